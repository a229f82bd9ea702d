import { describe, expect, it } from 'vitest';

import { formatPercentiles, levelName, parsePercentiles, splitFilter, validateQuery } from './validate';

describe('parsePercentiles', () => {
  it.each([
    // percents and fractions mix; output is sorted fractions
    ['99, 50', [0.5, 0.99]],
    ['0.5 0.999', [0.5, 0.999]],
    // a "p" prefix is what people type after reading p99 on a dashboard
    ['p50,p99.9', [0.5, 0.999]],
    // duplicates collapse: 50 and 0.5 are the same quantile
    ['50, 0.5', [0.5]],
    // 1 is read as the first percentile, not the maximum
    ['1', [0.01]],
  ])('%s', (text, want) => {
    expect(parsePercentiles(text)).toEqual({ values: want });
  });

  it.each([
    ['', 'enter at least one percentile, e.g. 50, 99, 99.9'],
    ['abc', '"abc" is not a number'],
    // 100 would be the maximum, which a t-digest cannot promise: rejected
    ['100', '"100" is outside (0, 100): percentiles are fractions like 0.99 or percents like 99'],
    ['0', '"0" is outside (0, 100): percentiles are fractions like 0.99 or percents like 99'],
    ['1 2 3 4 5 6 7 8 9 10 11', 'at most 10 percentiles per query'],
  ])('rejects %j', (text, msg) => {
    expect(parsePercentiles(text)).toEqual({ error: msg });
  });
});

describe('formatPercentiles', () => {
  it('writes percents', () => {
    expect(formatPercentiles([0.5, 0.99, 0.999])).toBe('50, 99, 99.9');
    expect(formatPercentiles(undefined)).toBe('');
  });
});

describe('splitFilter', () => {
  it('splits a multi-value variable', () => {
    expect(splitFilter('a, b,c')).toEqual(['a', 'b', 'c']);
    expect(splitFilter('')).toEqual([]);
  });
});

describe('validateQuery', () => {
  it('accepts the default query', () => {
    expect(validateQuery({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.5] })).toEqual([]);
  });
  it('words a malformed filter as the backend does', () => {
    expect(validateQuery({ refId: 'A', queryType: 'consumer_lag', topic: 'orders,,payments' })).toEqual([
      'topic filter "orders,,payments" is malformed: an empty name between commas',
    ]);
  });
  it('checks group types and the lag-only group-bys as the backend does', () => {
    expect(
      validateQuery({ refId: 'A', queryType: 'consumer_lag', groupType: 'share,streams', groupBy: 'subtopology' })
    ).toEqual([]);
    expect(validateQuery({ refId: 'A', queryType: 'consumer_lag', groupType: 'share,dynamic' })).toEqual([
      'unknown group type "dynamic": choose one of classic, consumer, share, streams',
    ]);
    expect(validateQuery({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.5], groupBy: 'group_type' })).toEqual([
      'only consumer lag can be grouped by group_type: choose none, topic, group or host',
    ]);
  });
  it('accepts an uninterpolated variable in a filter', () => {
    expect(validateQuery({ refId: 'A', queryType: 'consumer_lag', topic: '${topic:csv}' })).toEqual([]);
  });
  it('names every problem', () => {
    const errs = validateQuery({
      refId: 'A',
      queryType: 'bogus' as never,
      topic: 'orders,bad topic',
      group: 'a,,b',
      percentiles: [1.5],
      sloObjective: 99.9,
      limit: 0,
    });
    expect(errs).toEqual([
      'unknown query type "bogus": choose one of stage_percentiles, e2e_distribution, consumer_lag, slo, slowest_messages, clock_offsets, probe_health',
      `topic filter "bad topic" is not a Kafka topic name (letters, digits, '.', '_', '-')`,
      'group filter "a,,b" is malformed: an empty name between commas',
      'percentile 1.5 is outside (0, 1)',
      'SLO objective 99.9 is outside (0, 1), e.g. 0.999 for 99.9%',
      'limit 0 must be a whole number from 1 to 1000',
    ]);
  });
});

describe('fields', () => {
  it('names levels as the backend does', () => {
    expect([0.5, 0.99, 0.999, 0.9999, 0.05].map(levelName)).toEqual(['p50', 'p99', 'p99.9', 'p99.99', 'p5']);
    // the backend rounds the percent to 3 decimals; the editor's field list must name the same fields
    expect([0.123456, 0.07, 0.29].map(levelName)).toEqual(['p12.346', 'p7', 'p29']);
  });
  it('checks fields against what the query type returns', () => {
    expect(validateQuery({ refId: 'A', queryType: 'slo', fields: ['burn_rate'] })).toEqual([]);
    expect(validateQuery({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.999], fields: ['p99.9'] })).toEqual([]);
    // only p50 is asked for, so there is no p99 field
    expect(validateQuery({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.5], fields: ['p99'] })).toEqual([
      'stage_percentiles has no field "p99": choose from p50, p50_lower, p50_upper, samples, unbounded',
    ]);
    expect(validateQuery({ refId: 'A', queryType: 'consumer_lag', fields: ['burn_rate'] })).toEqual([
      'consumer_lag has no field "burn_rate": choose from lag, time_lag, expired, partitions',
    ]);
    expect(validateQuery({ refId: 'A', queryType: 'slowest_messages', fields: ['latency'] })).toEqual([
      'slowest_messages has no fields to choose: clear Fields',
    ]);
  });
});
