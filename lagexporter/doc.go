// Package lagexporter computes consumer-group lag that is right, and serves it.
//
// The package has three layers, each usable on its own:
//
//   - The pure lag model (lag.go, timelag.go, aggregate.go): from an [Observation] of a cluster (partition log start,
//     high watermark, last stable offset, topic incarnation, leader availability; group state, members, assignment,
//     committed offsets; record timestamps read at offsets) it computes per group-partition offset lag, time lag and
//     flags, and group/topic aggregates. No I/O.
//   - Status rules (status_rules.go): Burrow's sliding-window evaluation (OK, WARN, STALL, STOP, ERR, REWIND), each
//     rule a small pure function, plus the replay flag of case C30.
//   - The poll loop ([Loop]) over the narrow [Cluster] interface (implemented by internal/kafka for a real cluster and
//     by [TimelineCluster] for a recorded or hand-written timeline file), publishing immutable [Snapshot] values that
//     the Prometheus [Collector] serves; a scrape never calls Kafka.
//
// Definitions (docs/lag.md): offsets are Kafka's exclusive "next" positions; End is the high watermark for
// read_uncommitted groups and the last stable offset for read_committed groups (per-group configuration, the broker
// does not expose it); offset lag = max(0, End − max(committed, log start)); partitions without a commit are counted
// from the log start (reset=earliest, the franz-go kadm rule) or are 0 (reset=latest), and flagged; time lag = now −
// timestamp of the first unconsumed record, 0 when nothing is unconsumed.
package lagexporter
