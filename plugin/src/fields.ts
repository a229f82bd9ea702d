import { QueryType } from './types';

/** Editor fields a query type uses; the backend ignores the others (docs/plugin.md has the same table). */
export type EditorField =
  | 'cluster'
  | 'topic'
  | 'group'
  | 'groupType'
  | 'host'
  | 'stage'
  | 'percentiles'
  | 'groupBy'
  | 'sloThresholdMs'
  | 'sloObjective'
  | 'limit'
  | 'includeReplays'
  | 'tier'
  | 'fields';

export const FIELDS_BY_TYPE: Record<QueryType, readonly EditorField[]> = {
  stage_percentiles: ['cluster', 'topic', 'group', 'host', 'stage', 'percentiles', 'groupBy', 'includeReplays', 'tier', 'fields'],
  e2e_distribution: ['cluster', 'topic', 'group', 'host', 'stage', 'includeReplays', 'tier', 'fields'],
  consumer_lag: ['cluster', 'topic', 'group', 'groupType', 'groupBy', 'fields'],
  slo: ['cluster', 'topic', 'group', 'host', 'sloThresholdMs', 'sloObjective', 'groupBy', 'includeReplays', 'fields'],
  slowest_messages: ['cluster', 'topic', 'group', 'host', 'stage', 'limit', 'includeReplays'],
  clock_offsets: ['cluster', 'host', 'fields'],
  probe_health: ['cluster', 'host', 'fields'],
};

/** usesField reports whether the editor shows field for queryType. */
export function usesField(queryType: QueryType | undefined, field: EditorField): boolean {
  return !!queryType && (FIELDS_BY_TYPE[queryType] ?? []).includes(field);
}

/** Value fields each time-series query type returns (stage percentiles add one per level, named p50, p99.9, …). */
export const VALUE_FIELDS: Partial<Record<QueryType, readonly string[]>> = {
  stage_percentiles: ['p50', 'p99', '… one per level', 'p50_lower', 'p50_upper', '… a band per level', 'samples', 'unbounded'],
  e2e_distribution: ['latency'],
  consumer_lag: ['lag', 'time_lag', 'expired', 'partitions'],
  slo: ['compliance', 'burn_rate', 'error_budget_remaining', 'good', 'total', 'compliance_min', 'compliance_max', 'unbounded'],
  clock_offsets: ['offset', 'estimate', 'lower', 'upper', 'uncertainty'],
  probe_health: ['sent', 'lost', 'loss_ratio', 'duplicates', 'p50', 'p99'],
};
