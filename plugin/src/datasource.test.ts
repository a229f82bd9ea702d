import { describe, expect, it, vi } from 'vitest';
import { DataSourceInstanceSettings, ScopedVars } from '@grafana/data';
import { TemplateSrv } from '@grafana/runtime';

import { DataSource } from './datasource';
import { TidemarkOptions } from './types';

const settings = {
  id: 1,
  uid: 'tidemark',
  type: 'tidemark-kafka-datasource',
  name: 'Tidemark',
  jsonData: {},
  meta: { id: 'tidemark-kafka-datasource' },
} as unknown as DataSourceInstanceSettings<TidemarkOptions>;

// A template service that knows $topic (multi-value: orders, payments) and $group.
const templateSrv = {
  replace: (target: string, _vars?: ScopedVars, format?: string) => {
    expect(format).toBe('csv');
    return target.replace('$topic', 'orders,payments').replace('$group', 'billing');
  },
} as unknown as TemplateSrv;

describe('DataSource', () => {
  it('interpolates filters as comma-separated lists', () => {
    const ds = new DataSource(settings, templateSrv);
    const q = ds.applyTemplateVariables(
      { refId: 'A', queryType: 'consumer_lag', topic: '$topic', group: '$group', host: '' },
      {}
    );
    expect(q).toEqual({ refId: 'A', queryType: 'consumer_lag', topic: 'orders,payments', group: 'billing', host: '' });
  });

  it('does not send hidden or typeless queries', () => {
    const ds = new DataSource(settings, templateSrv);
    expect(ds.filterQuery({ refId: 'A', queryType: 'slo' })).toBe(true);
    expect(ds.filterQuery({ refId: 'A', queryType: 'slo', hide: true })).toBe(false);
    expect(ds.filterQuery({ refId: 'A' })).toBe(false);
  });

  it('lists variable values through the resource handler', async () => {
    const ds = new DataSource(settings, templateSrv);
    const getResource = vi.spyOn(ds, 'getResource').mockResolvedValue({ values: ['g1', 'g2'] });
    const values = await ds.metricFindQuery({ kind: 'groups', topic: '$topic' });
    expect(getResource).toHaveBeenCalledWith('groups', { topic: 'orders,payments' });
    expect(values).toEqual([
      { text: 'g1', value: 'g1' },
      { text: 'g2', value: 'g2' },
    ]);
  });

  it('falls back to topics for an unknown variable kind', async () => {
    const ds = new DataSource(settings, templateSrv);
    const getResource = vi.spyOn(ds, 'getResource').mockResolvedValue({});
    expect(await ds.metricFindQuery({ kind: 'brokers' as never })).toEqual([]);
    expect(getResource).toHaveBeenCalledWith('topics', {});
  });
});
