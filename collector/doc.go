// Package collector turns Kafka traffic into corrected latency rows in ClickHouse. It runs three paths, each its own
// consumer group (ARCHITECTURE.md, "The collector's paths"):
//
//   - [Probe]: owns a LogAppendTime probe topic with a partition led by every broker, produces sequenced probes,
//     consumes them back, and records per-broker ingest and delivery latency, loss and duplicates; every probe's
//     send/ack times bracket the leader's append stamp, which feeds the broker's clock offset to the latency engine.
//   - [Receipts]: consumes the receipts topic that instrumented applications write (package latency/instrument) and
//     turns each receipt into a corrected latency row.
//   - [Tap]: reads monitored topics (optionally sampled) for produce/append stamps and trace ids.
//
// Every stamp goes through the latency engine (skew, replay, validity). Records that do not decode go to a
// dead-letter topic and are counted; the pipeline continues. Delivery into the [Sink] is at-least-once: a batch's
// Kafka offsets are marked for commit only after the sink acknowledged its rows ([marker]), and a sink that is full
// blocks the path, which stops reading its partitions (backpressure).
//
// Main types: [Config], [Collector], [Sink], [DeadLetters], and the three paths.
package collector
