// Package topicadmin creates Kafka topics and keeps their layout in shape, over sarama's cluster admin: Ensure
// creates a topic from a Spec when it is missing (optionally with every broker leading a partition) and returns once
// every broker knows it (ensure.go); Admin reads the live brokers and a topic's replica assignment (BrokerInfo,
// PartitionLayout), adds partitions, reassigns replicas (KIP-455) and runs preferred leader elections (KIP-460)
// (admin.go). Its users are the collector (the probe topic and its state topics), the lag exporter's election (its
// lease topic) and the load tools under cmd/.
package topicadmin
