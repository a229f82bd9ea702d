// Package lagread is the lag exporter's view of a real Kafka cluster: ClusterReader implements lagexporter.Cluster
// over sarama with batched reads (metadata and partition leaders, groups of every type and their members, committed
// offsets, share-group start offsets, log start / last stable offset / high watermark, the records at a group's
// position for time lag, topic retention settings and log sizes), so that a poll cycle costs O(brokers + group
// coordinators) requests. The share- and streams-group RPCs sarama lacks go over franz-go's kmsg, connected through
// internal/kafka/franzconn with the same settings as the sarama connections (cluster_franz.go).
//
// Files: cluster.go (the reader, its connections and Metadata), cluster_groups.go and cluster_grouptypes.go (group
// listings, descriptions and committed offsets), cluster_share.go (share groups), cluster_offsets.go (ListOffsets
// and leader retries), cluster_records.go (record timestamps), cluster_configs.go (retention and log sizes),
// cluster_errors.go (classifying a partition's read error), leader_epochs.go (who led each leader epoch).
// cluster_admin.go holds the writes tests and cmd/bench-lag set scenarios up with (CommitOffsets, Admin); the lag
// loop never calls them.
//
// It imports the lag exporter's types and nothing of the collector or the store.
package lagread
