// Package lagexporter computes consumer-group lag that is right: the pure model, its status rules and the poll loop.
//
// It has no I/O of its own and does not import a Kafka or Prometheus client. Its parts, each in its own file:
//
//   - The input (observation.go): an [Observation] is what one poll read from a cluster: partition log start, high
//     watermark, last stable offset, topic incarnation and leader ([TopicObservation]); group state, members,
//     assignment and committed offsets ([GroupObservation]); record reads at offsets ([RecordProbe]); and the failed
//     parts ([CycleError], errors.go). No field ever holds a Kafka sentinel.
//   - The lag of one group-partition (lag.go, flags.go): [ComputeLag] turns a [PartitionInput] into a [PartitionLag]
//     (offset lag, effective lag, expired offsets, time lag, [Flags]). Pure.
//   - The status rules (status.go, status_rules.go): Burrow's sliding-window evaluation ([EvaluateStatus]: OK, WARN,
//     STALL, STOP, ERR, REWIND, AHEAD), each rule a small pure function, and the replay state of case C30
//     ([NextReplay]), an episode beside the status rather than a status in its place.
//   - Time left (retention.go, catchup.go): [ComputeRetentionMargin], the time and bytes before retention may delete
//     the first unconsumed record, and [EstimateCatchUp], the least-squares catch-up estimate over the status window
//     with its standard error. Pure.
//   - The evaluator (evaluator.go, snapshot.go): an [Evaluator] turns successive observations into immutable
//     [Snapshot] values (per group [GroupLag] with partitions and [Aggregate] sums), holding the state that spans
//     cycles (windows, commit times, replay, last known offsets, high-watermark history for interpolation). A group
//     is evaluated in group_eval.go, each of its partitions in partition_eval.go; the state kept per group and
//     group-partition is in group_state.go, and statewalk.go matches it to a cycle's partitions.
//   - The poll loop (loop.go) over the narrow [Cluster] interface (cluster.go): [Loop] reads committed offsets before
//     end offsets (case C03, observe.go), caches record reads (recordread.go, probecache.go), evaluates and publishes
//     each snapshot; [Config] (config.go) configures it.
//
// Around it: internal/kafka/lagread implements Cluster over a real cluster; package timeline is the timeline file format
// (docs/lag-timeline.md) with its fake cluster, the Player, and Eval; package promexport serves snapshots on /metrics; package lagapi serves them as JSON
// (/api/v1/lag and Burrow's v3 API).
//
// Definitions (docs/lag.md): offsets are Kafka's exclusive "next" positions; End is the high watermark for
// read_uncommitted groups and the last stable offset for read_committed groups (per-group configuration, the broker
// does not expose it); offset lag = max(0, End − max(committed, log start)); partitions without a commit are counted
// from the log start (reset=earliest, the franz-go kadm rule) or are 0 (reset=latest), and flagged; time lag = now −
// timestamp of the first unconsumed record, 0 when nothing is unconsumed.
package lagexporter
