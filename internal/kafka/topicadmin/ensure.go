package topicadmin

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// Spec describes a topic Ensure creates when it is missing.
type Spec struct {
	Name        string
	Partitions  int32 // 0 with SpreadLeaders: one per broker
	Replication int16 // default min(3, brokers)
	Configs     map[string]string
	// SpreadLeaders assigns replicas explicitly so partition i's preferred leader is the i-th broker (by id,
	// cycling): every broker leads at least one partition when Partitions ≥ brokers (the probe topic's need).
	SpreadLeaders bool
}

// Ensure creates spec's topic if it does not exist and returns its partition count. An existing topic is left
// as it is (its partition count is returned). A topic it creates is returned once every broker's metadata shows
// every partition with a leader (waitTopicMetadata): a controller accepts CreateTopics before the brokers learn the
// topic, and a read or produce meanwhile fails with UNKNOWN_TOPIC_OR_PARTITION.
func Ensure(brokers []string, sc *sarama.Config, spec Spec) (int32, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	adm, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return 0, fmt.Errorf("connect admin to %v: %w", brokers, err)
	}
	defer adm.Close()
	topics, err := adm.ListTopics()
	if err != nil {
		return 0, fmt.Errorf("list topics: %w", err)
	}
	if d, ok := topics[spec.Name]; ok {
		return d.NumPartitions, nil
	}
	bs, _, err := adm.DescribeCluster()
	if err != nil {
		return 0, fmt.Errorf("describe cluster: %w", err)
	}
	ids := make([]int32, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	rf := spec.Replication
	if rf <= 0 {
		rf = int16(min(3, len(ids)))
	}
	detail := &sarama.TopicDetail{NumPartitions: spec.Partitions, ReplicationFactor: rf, ConfigEntries: map[string]*string{}}
	for k, v := range spec.Configs {
		detail.ConfigEntries[k] = &v
	}
	if spec.SpreadLeaders {
		n := spec.Partitions
		if n <= 0 {
			n = int32(len(ids))
		}
		detail.NumPartitions, detail.ReplicationFactor = -1, -1
		detail.ReplicaAssignment = make(map[int32][]int32, n)
		for p := int32(0); p < n; p++ {
			rs := make([]int32, rf)
			for r := range rs {
				rs[r] = ids[(int(p)+r)%len(ids)]
			}
			detail.ReplicaAssignment[p] = rs
		}
	}
	if err := adm.CreateTopic(spec.Name, detail, false); err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return 0, fmt.Errorf("create topic %s: %w", spec.Name, err)
	}
	n := spec.Partitions
	if spec.SpreadLeaders && spec.Partitions <= 0 {
		n = int32(len(ids))
	}
	if err := waitTopicMetadata(bs, sc, spec.Name, n, topicMetadataTimeout); err != nil {
		return 0, err
	}
	return n, nil
}

// topicMetadataTimeout bounds Ensure's wait for a new topic's metadata: Kafka's brokers learn a topic from the
// metadata log within milliseconds; a cluster that takes longer has a problem worth an error.
const topicMetadataTimeout = 30 * time.Second

// waitTopicMetadata waits until each of bs answers a metadata request for topic with n partitions (n <= 0: any), each with a
// leader, as Kafka's own tests wait for a topic they create (TestUtils.waitForAllPartitionsMetadata). It returns
// the last broker's answer as the error when timeout passes first.
func waitTopicMetadata(bs []*sarama.Broker, sc *sarama.Config, topic string, n int32, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, b := range bs {
		if err := b.Open(sc); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			return fmt.Errorf("wait for topic %s: connect to broker %d: %w", topic, b.ID(), err)
		}
		defer func() { _ = b.Close() }()
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
			err := topicLed(b, topic, n)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("wait for topic %s on broker %d: %w", topic, b.ID(), err)
			}
			time.Sleep(wait)
		}
	}
	return nil
}

// topicLed returns nil when broker b's metadata has topic with n partitions, each with a leader.
func topicLed(b *sarama.Broker, topic string, n int32) error {
	md, err := b.GetMetadata(&sarama.MetadataRequest{Version: 7, Topics: []string{topic}})
	if err != nil {
		return err
	}
	if len(md.Topics) != 1 {
		return fmt.Errorf("metadata answer has %d topics", len(md.Topics))
	}
	t := md.Topics[0]
	if !errors.Is(t.Err, sarama.ErrNoError) {
		return t.Err
	}
	if len(t.Partitions) == 0 || (n > 0 && int32(len(t.Partitions)) != n) { // n <= 0: the broker's default count
		return fmt.Errorf("%d of %d partitions known", len(t.Partitions), n)
	}
	for _, p := range t.Partitions {
		if !errors.Is(p.Err, sarama.ErrNoError) {
			return fmt.Errorf("partition %d: %w", p.ID, p.Err)
		}
		if p.Leader < 0 {
			return fmt.Errorf("partition %d has no leader", p.ID)
		}
	}
	return nil
}
