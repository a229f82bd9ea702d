// Package kafka is the client plumbing the collector reads and writes Kafka with, over sarama, so that the collector
// never imports sarama itself:
//
//   - consuming: RunGroup runs a consumer group and hands each partition's records to a BatchHandler as a Batch of
//     Records, committing only the offsets the handler marks (at-least-once); ReadTopic reads a topic back from its
//     log start (the collector's compacted state topics); EndOffsets and CommittedOffsets are one-shot offset reads
//     (consume.go, read_topic.go);
//   - producing: Producer sends Messages and reports each acknowledged record as Sent (produce.go);
//   - what the record paths need to know about topics: Metadata, a cache of TopicViews (partitions, leaders,
//     timestamp type) that never blocks the record path, and ValidTopicName (consume_meta.go); AppendLeaders, which
//     broker appended an offset (the clock that stamped its LogAppendTime, epochs.go); ClusterID (cluster_id.go).
//
// Connection settings come from internal/kafkaconfig (ClientConfig). AppendLeaders' OffsetForLeaderEpoch, which
// sarama lacks, goes over franz-go through internal/kafka/franzconn. The lag exporter's cluster reads are
// internal/kafka/lagread; topic creation and layout changes are internal/kafka/topicadmin.
package kafka
