import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen } from '@testing-library/react';

import type { DataSource } from '../datasource';
import { TidemarkQuery } from '../types';
import { QueryEditor } from './QueryEditor';

function renderEditor(query: TidemarkQuery) {
  const onChange = vi.fn();
  const onRunQuery = vi.fn();
  const utils = render(
    <QueryEditor datasource={{} as DataSource} query={query} onChange={onChange} onRunQuery={onRunQuery} />
  );
  return { ...utils, onChange, onRunQuery };
}

const ids = (container: HTMLElement) =>
  Array.from(container.querySelectorAll('[id^="tidemark-"]'))
    .map((e) => e.id)
    .sort();

describe('QueryEditor', () => {
  it('shows the stage-percentile fields', () => {
    const { container } = renderEditor({ refId: 'A', queryType: 'stage_percentiles' });
    expect(ids(container)).toEqual(
      [
        'tidemark-query-type',
        'tidemark-stage',
        'tidemark-topic',
        'tidemark-group',
        'tidemark-host',
        'tidemark-percentiles',
        'tidemark-group-by',
        'tidemark-include-replays',
        'tidemark-tier',
        'tidemark-cluster',
        'tidemark-fields',
      ].sort()
    );
    // defaults fill the percentiles box as percents
    expect((screen.getByDisplayValue('50, 99') as HTMLInputElement).id).toBe('tidemark-percentiles');
  });

  it('shows only the cluster and host filters for clock offsets', () => {
    const { container } = renderEditor({ refId: 'A', queryType: 'clock_offsets' });
    expect(ids(container)).toEqual(['tidemark-cluster', 'tidemark-fields', 'tidemark-host', 'tidemark-query-type']);
  });

  it('shows SLO threshold and objective for slo', () => {
    const { container } = renderEditor({ refId: 'A', queryType: 'slo', sloThresholdMs: 250, sloObjective: 0.99 });
    expect(ids(container)).toContain('tidemark-slo-threshold');
    expect(ids(container)).toContain('tidemark-slo-objective');
    expect(screen.getByDisplayValue('250')).toBeTruthy();
  });

  it('parses percentiles on blur and runs the query', () => {
    const { onChange, onRunQuery } = renderEditor({ refId: 'A', queryType: 'stage_percentiles' });
    const box = screen.getByDisplayValue('50, 99');
    fireEvent.change(box, { target: { value: 'p99.9, 95' } });
    fireEvent.blur(box);
    expect(onChange).toHaveBeenLastCalledWith({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.95, 0.999] });
    expect(onRunQuery).toHaveBeenCalledTimes(1);
  });

  it('keeps a bad percentile out of the query and says why', () => {
    const { onChange, onRunQuery } = renderEditor({ refId: 'A', queryType: 'stage_percentiles' });
    const box = screen.getByDisplayValue('50, 99');
    fireEvent.change(box, { target: { value: '50, abc' } });
    fireEvent.blur(box);
    expect(onChange).not.toHaveBeenCalled();
    expect(onRunQuery).not.toHaveBeenCalled();
    expect(screen.getByText('"abc" is not a number')).toBeTruthy();
  });

  it('shows percentiles changed from outside the editor', () => {
    const { rerender } = renderEditor({ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.5] });
    expect(screen.getByDisplayValue('50')).toBeTruthy();
    rerender(
      <QueryEditor
        datasource={{} as DataSource}
        query={{ refId: 'A', queryType: 'stage_percentiles', percentiles: [0.9, 0.999] }}
        onChange={vi.fn()}
        onRunQuery={vi.fn()}
      />
    );
    expect(screen.getByDisplayValue('90, 99.9')).toBeTruthy();
  });

  it('keeps only the fields typed, for alert rules', () => {
    const { container, onChange, onRunQuery } = renderEditor({ refId: 'A', queryType: 'slo' });
    const box = container.querySelector('#tidemark-fields') as HTMLInputElement;
    fireEvent.change(box, { target: { value: 'burn_rate, ' } });
    fireEvent.blur(box);
    expect(onChange).toHaveBeenLastCalledWith({ refId: 'A', queryType: 'slo', fields: ['burn_rate'] });
    expect(onRunQuery).toHaveBeenCalledTimes(1);
  });

  it('warns about a malformed filter before the query runs', () => {
    renderEditor({ refId: 'A', queryType: 'consumer_lag', topic: 'bad topic' });
    expect(screen.getByText('This query will be rejected')).toBeTruthy();
    expect(screen.getByText(/topic filter "bad topic" is not a Kafka topic name/)).toBeTruthy();
  });

  it('passes typed filters through unchanged', () => {
    const { onChange, container } = renderEditor({ refId: 'A', queryType: 'consumer_lag' });
    fireEvent.change(container.querySelector('#tidemark-group') as HTMLInputElement, { target: { value: '$group' } });
    expect(onChange).toHaveBeenLastCalledWith({ refId: 'A', queryType: 'consumer_lag', group: '$group' });
  });
});
