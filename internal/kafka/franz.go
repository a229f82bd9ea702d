package kafka

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franzClient opens a franz-go client for the RPCs sarama lacks (OffsetForLeaderEpoch). It connects exactly as sc
// does (franzOptions: the same client id, timeouts, the kafka: block's TLS dialer, SASL), so that the kafka: block
// stays the one place that knows how to reach the cluster.
func franzClient(brokers []string, sc *sarama.Config) (*kgo.Client, error) {
	if sc == nil {
		sc = sarama.NewConfig()
	}
	opts, err := franzOptions(brokers, sc)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect franz-go client to %v: %w", brokers, err)
	}
	return cl, nil
}
