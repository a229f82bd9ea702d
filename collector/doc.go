// Package collector turns Kafka traffic into corrected latency rows in ClickHouse. It runs four paths, each its own
// consumer group (docs/architecture.md, "The collector's paths"):
//
//   - [Probe]: owns a LogAppendTime probe topic with a partition led by every broker, produces sequenced probes,
//     consumes them back, and records per-broker ingest and delivery latency, loss and duplicates; every probe's
//     send/ack times bracket the leader's append stamp, which feeds the broker's clock offset to the latency engine.
//   - [Receipts]: consumes the receipts topic that instrumented applications write (package latency/instrument) and
//     turns each receipt into a corrected latency row.
//   - [Tap]: reads monitored topics (optionally sampled) for produce/append stamps and trace ids.
//   - [Spans]: consumes OpenTelemetry trace data (OTLP) from a spans topic and turns the Kafka messaging spans that
//     OpenTelemetry agents record into the stamps receipts carry; producer spans bracket their hosts' clocks. The
//     collector can also serve OTLP (HTTP and gRPC) and write what it receives into that topic.
//
// Every stamp goes through the latency engine (skew, replay, validity). Records that do not decode go to a
// dead-letter topic and are counted; the pipeline continues. Delivery into the [Sink] is at-least-once: a batch's
// Kafka offsets are marked for commit only after the sink acknowledged its rows ([marker]), and a sink that is full
// blocks the path, which stops reading its partitions (backpressure).
//
// Live receipts (latency.Result.Live) are also observed in the histograms tidemark_e2e_latency_seconds and
// tidemark_stage_latency_seconds ([Metrics]), by group and topic, with trace-id exemplars and buckets derived from
// the SLO thresholds ([LatencyBuckets]); replays, backfills and skew-suspected samples never are.
//
// Dependencies (docs/architecture.md, "Package layout"): the collector builds on the latency core (engine, stamps,
// results) and on lagexporter's Snapshot type (commit bounds for uninstrumented groups). It reaches Kafka only
// through the Kafka adapter: internal/kafka (consumers, producers, topic metadata), internal/kafka/topicadmin (its
// topics and the probe topic's layout) and internal/kafka/lagread (the spans path's append-time reads). Its rows
// are internal/store's plain row types ([store.Rows], [store.LatencyRow]) and its acknowledgement callback is
// [store.Ack]; the collector never calls clickhouse-go, and its [Sink] is an interface any writer (or a test fake)
// satisfies. Importing internal/store does link clickhouse-go into the package's import graph, which costs nothing
// in cmd/tidemark (it links the store anyway); TestNoClickHouseImport keeps clickhouse-go out of the collector's
// own non-test files.
//
// Main types: [Config], [Collector], [Sink], [DeadLetters], [Metrics], and the four paths.
package collector
