package kafka

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// ClusterID returns the Kafka cluster id (KIP-78: the id every broker of a cluster reports in its Metadata
// response, the one `kafka-storage.sh format --cluster-id` set), read from one bootstrap broker. Errors: the
// brokers cannot be reached, or a broker too old to report one (Metadata below version 2).
func ClusterID(brokers []string, sc *sarama.Config) (string, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return "", fmt.Errorf("cluster id: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	b := client.LeastLoadedBroker()
	if b == nil {
		return "", fmt.Errorf("cluster id: no broker of %v reachable", brokers)
	}
	_ = b.Open(client.Config()) // ErrAlreadyConnected when the client's metadata refresh opened it; a failure shows below
	resp, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{}))
	if err != nil {
		return "", fmt.Errorf("cluster id: metadata from %s: %w", b.Addr(), err)
	}
	if resp.ClusterID == nil || *resp.ClusterID == "" {
		return "", errors.New("cluster id: the broker reported none (Metadata v2+ needed)")
	}
	return *resp.ClusterID, nil
}
