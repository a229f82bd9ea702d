// Package franzconn opens franz-go (kgo) clients that reach a cluster exactly as a sarama.Config does: the same seed
// brokers, client id, timeouts, the kafka: block's TLS dialer and SASL. Tidemark speaks sarama except for the few
// RPCs sarama lacks (share- and streams-group reads, OffsetForLeaderEpoch), which go over franz-go's kmsg; this
// package keeps those connections' settings derived from the one sarama configuration, so that internal/kafkaconfig
// stays the one place that knows how to reach the cluster. Options maps a sarama.Config onto kgo options; NewClient
// opens a client with them. Its importers are internal/kafka (AppendLeaders) and internal/kafka/lagread
// (ClusterReader).
package franzconn
