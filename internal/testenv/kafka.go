package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// KafkaVersion is the protocol version tests give sarama: Kafka 4 removed the old protocol versions sarama defaults to.
var KafkaVersion = sarama.V4_0_0_0

// Kafka returns the bootstrap addresses of the local brokers (TIDEMARK_KAFKA_BROKERS). It skips the test, or fails it
// under CI=true, when they are not set. The first call in a test binary also waits until every broker's group
// coordinator serves requests (see waitGroupCoordinators).
func Kafka(t testing.TB) []string {
	t.Helper()
	addrs := strings.Split(require(t, "TIDEMARK_KAFKA_BROKERS", "Kafka"), ",")
	coordinatorsReady.Do(func() { waitGroupCoordinators(addrs, 90*time.Second) })
	return addrs
}

var coordinatorsReady sync.Once

// waitGroupCoordinators makes the cluster ready for group operations before the first test uses it. A broker that
// was just started, or that creates __consumer_offsets on the first FindCoordinator any test sends, answers
// ListGroups (and any group read) with COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE until it has
// loaded its offsets partitions: a test whose first cycle lands in that window would fail on the harness, not on the
// code (every test package runs in its own process, in parallel with the others). So this asks for a coordinator once
// (creating __consumer_offsets) and then polls ListGroups on every broker until none answers those two errors, for at
// most limit. Anything else (a broker down, a deadline) is left to the tests to report.
func waitGroupCoordinators(addrs []string, limit time.Duration) {
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	cfg.ClientID = "tidemark-testenv"
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		return
	}
	defer client.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := client.Coordinator("tidemark-testenv-ready"); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, b := range client.Brokers() {
		for time.Now().Before(deadline) {
			if err := b.Open(client.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
				break
			}
			resp, err := b.ListGroups(&sarama.ListGroupsRequest{Version: 4})
			if err == nil {
				err = resp.Err
			}
			if !errors.Is(err, sarama.ErrOffsetsLoadInProgress) && !errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// KafkaBrokerCount is the number of brokers the local cluster was started with.
func KafkaBrokerCount(t testing.TB) int {
	return len(Kafka(t))
}

// NeedBrokers stops a test that needs at least n brokers when the stack has fewer: a failure under CI=true (the
// stack make test starts has 3), a skip otherwise.
func NeedBrokers(t testing.TB, n int) {
	t.Helper()
	if got := KafkaBrokerCount(t); got < n {
		if InCI() {
			t.Fatalf("needs at least %d brokers, the stack has %d (CI=true; make test starts 3)", n, got)
		}
		t.Skipf("needs at least %d brokers, the stack has %d", n, got)
	}
}

// SaramaConfig returns a sarama config for tests: Kafka 4 protocol, a client id naming the test, errors returned.
func SaramaConfig(t testing.TB) *sarama.Config {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = KafkaVersion
	cfg.ClientID = "tidemark-test"
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Consumer.Return.Errors = true
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

// Admin returns a cluster admin closed at the end of the test.
func Admin(t testing.TB) sarama.ClusterAdmin {
	t.Helper()
	adm, err := sarama.NewClusterAdmin(Kafka(t), SaramaConfig(t))
	if err != nil {
		t.Fatalf("connect admin to %v: %v", Kafka(t), err)
	}
	t.Cleanup(func() { _ = adm.Close() })
	return adm
}

// Topic describes a topic a test creates.
type Topic struct {
	Partitions  int32
	Replication int16             // default 1
	Configs     map[string]string // e.g. {"message.timestamp.type": "LogAppendTime"}
}

// CreateTopic creates a topic with a unique name (prefix + test name) and deletes it at the end of the test. It waits
// until every partition has a leader in the metadata, so a produce right after it does not race the creation.
func CreateTopic(t testing.TB, prefix string, spec Topic) string {
	t.Helper()
	name := Name(t, prefix)
	CreateNamedTopic(t, name, spec)
	return name
}

// CreateNamedTopic creates the topic name (see CreateTopic) and deletes it at the end of the test.
func CreateNamedTopic(t testing.TB, name string, spec Topic) {
	t.Helper()
	if spec.Partitions == 0 {
		spec.Partitions = 1
	}
	if spec.Replication == 0 {
		spec.Replication = 1
	}
	entries := map[string]*string{}
	for k, v := range spec.Configs {
		entries[k] = &v
	}
	adm := Admin(t)
	err := adm.CreateTopic(name, &sarama.TopicDetail{
		NumPartitions: spec.Partitions, ReplicationFactor: spec.Replication, ConfigEntries: entries,
	}, false)
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	t.Cleanup(func() { _ = adm.DeleteTopic(name) })
	WaitTopicReady(t, name, spec.Partitions)
}

// WaitTopicReady waits (up to 30 s) until topic has n partitions, each with a leader.
func WaitTopicReady(t testing.TB, topic string, n int32) {
	t.Helper()
	client, err := sarama.NewClient(Kafka(t), SaramaConfig(t))
	if err != nil {
		t.Fatalf("connect client: %v", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = topicReady(client, topic, n)
		if last == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("topic %s not ready after 30s: %v", topic, last)
}

func topicReady(client sarama.Client, topic string, n int32) error {
	if err := client.RefreshMetadata(topic); err != nil {
		return err
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	if int32(len(parts)) != n {
		return fmt.Errorf("%d of %d partitions", len(parts), n)
	}
	for _, p := range parts {
		if _, err := client.Leader(topic, p); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
