import type { DataQuery, DataSourceJsonData } from '@grafana/data';

/**
 * The query model shared with the Go backend (plugin/pkg/plugin/query.go); docs/plugin.md documents every field.
 * A change here needs the same change there.
 */
export const QUERY_TYPES = [
  'stage_percentiles',
  'e2e_distribution',
  'consumer_lag',
  'slo',
  'slowest_messages',
  'clock_offsets',
  'probe_health',
] as const;
export type QueryType = (typeof QUERY_TYPES)[number];

export const STAGES = ['produce_append', 'append_receive', 'receive_process', 'e2e'] as const;
export type Stage = (typeof STAGES)[number];

export const GROUP_BYS = ['none', 'topic', 'group', 'host', 'group_type', 'subtopology'] as const;
export type GroupBy = (typeof GROUP_BYS)[number];

/** Where latency percentiles are read: auto picks by resolution and cost; the others pin a tier. */
export const TIERS = ['auto', 'raw', 'minute', 'hour'] as const;
export type Tier = (typeof TIERS)[number];

/** Group-bys only consumer lag has: by Kafka group type, and per streams-group subtopology. */
export const LAG_ONLY_GROUP_BYS: readonly GroupBy[] = ['group_type', 'subtopology'];

/** Kafka's group types (consumer = KIP-848, share = KIP-932, streams = KIP-1071); a consumer-lag filter. */
export const GROUP_TYPES = ['classic', 'consumer', 'share', 'streams'] as const;

export interface TidemarkQuery extends DataQuery {
  queryType?: QueryType;
  /** Kafka cluster name (the cluster column), or several joined by commas (a $cluster variable); empty means all. */
  cluster?: string;
  /** Exact topic name, or several joined by commas (a multi-value variable); empty means all. */
  topic?: string;
  /** Exact consumer group name, or several joined by commas; empty means all. */
  group?: string;
  /** Exact host id, or several joined by commas; empty means all. */
  host?: string;
  /** Consumer lag only: Kafka group types (GROUP_TYPES) joined by commas; empty means all. */
  groupType?: string;
  stage?: Stage;
  /** Quantiles in (0, 1), e.g. [0.5, 0.99]. */
  percentiles?: number[];
  groupBy?: GroupBy;
  /** A message is "good" for the SLO when its end-to-end latency is at most this many milliseconds. */
  sloThresholdMs?: number;
  /** Target fraction of good messages, in (0, 1), e.g. 0.999. */
  sloObjective?: number;
  /** Rows for slowest_messages (1..1000). */
  limit?: number;
  /** Count replayed (reprocessed) messages as live latency; off by default, as the architecture requires. */
  includeReplays?: boolean;
  /** Keep only these value fields of a time series (e.g. ["burn_rate"] for an alert rule); empty keeps all. */
  fields?: string[];
  /** Pins the tier latency is read from (raw rows, minute or hourly rollups); auto by default. */
  tier?: Tier;
}

export const DEFAULT_QUERY: Partial<TidemarkQuery> = {
  queryType: 'stage_percentiles',
  stage: 'e2e',
  percentiles: [0.5, 0.99],
  groupBy: 'none',
  sloThresholdMs: 500,
  sloObjective: 0.999,
  limit: 20,
  includeReplays: false,
};

/**
 * Datasource settings kept in plain jsonData. The password, the CA certificate and the client certificate and key live
 * in secureJsonData: Grafana encrypts them and never sends them back to the browser (only secureJsonFields, which
 * says whether each is set).
 */
export interface TidemarkOptions extends DataSourceJsonData {
  /** host:port of ClickHouse's native protocol, e.g. clickhouse:9000. */
  address?: string;
  database?: string;
  username?: string;
  tlsEnabled?: boolean;
  tlsSkipVerify?: boolean;
  /** Name the server certificate must carry, when it is not the address's host. */
  tlsServerName?: string;
  /** Seconds a query may run on the server (max_execution_time); default 30. */
  queryTimeoutSeconds?: number;
  /** UID of a tracing datasource (Tempo, Jaeger) that slowest-message trace ids link to. */
  tracingDatasourceUid?: string;
  /** A tracing UI's URL of one trace, with ${__value.raw} where the trace id goes (e.g. Jaeger's /trace/<id>). */
  traceUrl?: string;
}

export interface TidemarkSecureOptions {
  password?: string;
  tlsCACert?: string;
  /** PEM client certificate for mutual TLS; with tlsClientKey. */
  tlsClientCert?: string;
  /** PEM private key of tlsClientCert. */
  tlsClientKey?: string;
}

/** What a template variable lists; answered by the backend's resource handler (GET resources/<kind>). */
export const VARIABLE_KINDS = ['topics', 'groups', 'hosts', 'clusters'] as const;
export type VariableKind = (typeof VARIABLE_KINDS)[number];

export interface TidemarkVariableQuery {
  kind: VariableKind;
  /** Optional: only groups reading this topic, or topics read by this group. */
  topic?: string;
  group?: string;
  /** Optional: only names seen in these clusters (e.g. $cluster). */
  cluster?: string;
}

export const QUERY_TYPE_LABELS: Record<QueryType, string> = {
  stage_percentiles: 'Stage latency percentiles',
  e2e_distribution: 'End-to-end distribution',
  consumer_lag: 'Consumer lag',
  slo: 'SLO compliance',
  slowest_messages: 'Slowest messages',
  clock_offsets: 'Clock offsets',
  probe_health: 'Probe health',
};

export const STAGE_LABELS: Record<Stage, string> = {
  produce_append: 'produce → append (ingest)',
  append_receive: 'append → receive (queue wait)',
  receive_process: 'receive → processed (processing)',
  e2e: 'end-to-end',
};
