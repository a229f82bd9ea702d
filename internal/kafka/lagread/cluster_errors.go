package lagread

import (
	"context"
	"errors"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

// kafkaErrorNames are Kafka's own names of the error codes a partition read can come back with (the protocol's
// error table); other codes are labelled KAFKA_<code>, so the label set stays the protocol's, bounded.
var kafkaErrorNames = map[sarama.KError]string{
	sarama.ErrUnknown:                      "UNKNOWN_SERVER_ERROR",
	sarama.ErrOffsetOutOfRange:             "OFFSET_OUT_OF_RANGE",
	sarama.ErrUnknownTopicOrPartition:      "UNKNOWN_TOPIC_OR_PARTITION",
	sarama.ErrLeaderNotAvailable:           "LEADER_NOT_AVAILABLE",
	sarama.ErrNotLeaderForPartition:        "NOT_LEADER_OR_FOLLOWER",
	sarama.ErrRequestTimedOut:              "REQUEST_TIMED_OUT",
	sarama.ErrBrokerNotAvailable:           "BROKER_NOT_AVAILABLE",
	sarama.ErrReplicaNotAvailable:          "REPLICA_NOT_AVAILABLE",
	sarama.ErrNetworkException:             "NETWORK_EXCEPTION",
	sarama.ErrTopicAuthorizationFailed:     "TOPIC_AUTHORIZATION_FAILED",
	sarama.ErrKafkaStorageError:            "KAFKA_STORAGE_ERROR",
	sarama.ErrFencedLeaderEpoch:            "FENCED_LEADER_EPOCH",
	sarama.ErrUnknownLeaderEpoch:           "UNKNOWN_LEADER_EPOCH",
	sarama.ErrOffsetNotAvailable:           "OFFSET_NOT_AVAILABLE",
	sarama.ErrPreferredLeaderNotAvailable:  "PREFERRED_LEADER_NOT_AVAILABLE",
	sarama.ErrClusterAuthorizationFailed:   "CLUSTER_AUTHORIZATION_FAILED",
	sarama.ErrUnsupportedVersion:           "UNSUPPORTED_VERSION",
	sarama.ErrInvalidRequest:               "INVALID_REQUEST",
	sarama.ErrPolicyViolation:              "POLICY_VIOLATION",
	sarama.ErrThrottlingQuotaExceeded:      "THROTTLING_QUOTA_EXCEEDED",
	sarama.ErrNotController:                "NOT_CONTROLLER",
	sarama.ErrInvalidTopic:                 "INVALID_TOPIC_EXCEPTION",
	sarama.ErrNotEnoughReplicas:            "NOT_ENOUGH_REPLICAS",
	sarama.ErrNotEnoughReplicasAfterAppend: "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
}

// partitionErrorCode classifies the error of one partition's read for PartitionObservation.ErrorCode: Kafka's name
// for an error code the broker answered, TIMEOUT when the cycle's context ended, NETWORK when the broker could not be
// reached or the request failed in transit.
func partitionErrorCode(ctx context.Context, err error) string {
	var kerr sarama.KError
	switch {
	case errors.As(err, &kerr):
		if n, ok := kafkaErrorNames[kerr]; ok {
			return n
		}
		return "KAFKA_" + strconv.Itoa(int(kerr))
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return lagexporter.ErrCodeTimeout
	case err != nil:
		return lagexporter.ErrCodeNetwork
	}
	return ""
}

// leaderMoved reports whether an error code means the partition's leader may have moved, so that a metadata refresh
// can find where to ask again (NOT_LEADER_OR_FOLLOWER after an election, LEADER_NOT_AVAILABLE during one,
// UNKNOWN_TOPIC_OR_PARTITION from a broker that has not learnt of the partition yet, stale epochs; and an unreachable
// leader, whose partitions may already be led elsewhere).
func leaderMoved(code string) bool {
	switch code {
	case "NOT_LEADER_OR_FOLLOWER", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PARTITION", "FENCED_LEADER_EPOCH",
		"UNKNOWN_LEADER_EPOCH", "REPLICA_NOT_AVAILABLE", "BROKER_NOT_AVAILABLE", lagexporter.ErrCodeNetwork:
		return true
	}
	return false
}
