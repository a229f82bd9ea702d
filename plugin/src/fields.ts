import { QueryType } from './types';

/** Editor fields a query type uses; the backend ignores the others (docs/plugin.md has the same table). */
export type EditorField =
  | 'topic'
  | 'group'
  | 'host'
  | 'stage'
  | 'percentiles'
  | 'groupBy'
  | 'sloThresholdMs'
  | 'sloObjective'
  | 'limit'
  | 'includeReplays';

export const FIELDS_BY_TYPE: Record<QueryType, readonly EditorField[]> = {
  stage_percentiles: ['topic', 'group', 'host', 'stage', 'percentiles', 'groupBy', 'includeReplays'],
  e2e_distribution: ['topic', 'group', 'host', 'stage', 'includeReplays'],
  consumer_lag: ['topic', 'group', 'groupBy'],
  slo: ['topic', 'group', 'host', 'sloThresholdMs', 'sloObjective', 'groupBy', 'includeReplays'],
  slowest_messages: ['topic', 'group', 'host', 'stage', 'limit', 'includeReplays'],
  clock_offsets: ['host'],
  probe_health: ['host'],
};

/** usesField reports whether the editor shows field for queryType. */
export function usesField(queryType: QueryType | undefined, field: EditorField): boolean {
  return !!queryType && (FIELDS_BY_TYPE[queryType] ?? []).includes(field);
}
