// Package latency turns timestamps read on disagreeing clocks into stage latencies that are right, and keeps
// replays out of live latency. It is pure Go: no I/O, no Kafka, no ClickHouse.
//
// The pieces, in the order a message meets them:
//
//   - [Record] and [Stamp]: the moments a message passed (produce, source-cluster append for mirrored topics,
//     log-append, receive, processed, group commit), each with the host whose clock stamped it and its unit.
//     [ToMillis] and [Bounds.Check] reject the Kafka NO_TIMESTAMP sentinel (-1), values in the wrong unit and
//     values absurdly far from the append time; rejected stamps are counted per [Reason] and never reach a percentile.
//   - Clock offsets ([Offset]): every host's offset from the reference clock (the collector's), with an
//     uncertainty. Probe brackets ([Bracket]) and round-trip sync exchanges ([SyncExchange]) give two-sided
//     bounds that are intersected over a sliding window after a drift fit (the NTP minimum-delay idea);
//     hosts with neither are bounded from causality (a causal envelope). Steps restart the window.
//   - Correction: corrected = observed - offset (cases convention), then a weighted isotonic projection makes
//     the corrected timeline monotone, so every stage is >= 0 and the stages sum to end-to-end. A stage's
//     uncertainty comes from its two end hosts: their offset uncertainties added, or only drift when one host
//     stamped both ends. Every stage carries an interval on the reference clock ([Result.StageBounds]) from the
//     offsets of exactly the clocks it spans. A cross-clock pair whose offset is unknown or whose ordering is
//     violated beyond the uncertainty is flagged skew-suspected (counted per host); the stages spanning it are kept
//     out of live percentiles, the record's other stages are not ([Result.Trusted]). A wide stage is kept.
//   - Replay classification ([Class]) per (group, topic, partition): live, replay (below an offset the group
//     had already committed; the boundary comes from a committed-offset decrease), redelivery (duplicate of an
//     uncommitted tail after a rebalance) and backfill (a new group's first pass over older data).
//   - [Sketch]: a mergeable relative-error quantile sketch (DDSketch); SLO math ([Objective], [SLOCounter]):
//     compliance, error budget, multiwindow multi-burn-rate alerts (Google SRE workbook).
//
// [Engine] is the entry point: feed it brackets, sync exchanges, commit observations and records (through a
// per-partition [Path]); read results, offsets, sketches and counters back. docs/latency.md explains the method
// with its formulas and sources; package latency/sim checks it against simulated ground truth.
package latency
