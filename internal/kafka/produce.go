package kafka

import (
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"time"

	"github.com/IBM/sarama"
)

// Message is a record to produce. Partition -1 picks the partition by a hash of Key (FNV-1a), so equal keys land
// together.
type Message struct {
	Topic     string
	Partition int32
	Key       []byte
	Value     []byte
	Headers   []Header
}

// Sent reports where a message landed and, on the clock given to Send, when the send started and when the
// acknowledgement arrived.
type Sent struct {
	Partition int32
	Offset    int64
	SendTime  time.Time
	AckTime   time.Time
}

// Producer sends records synchronously (acks from all in-sync replicas) so each send can be timed: the probe path
// brackets a broker's append stamp between send and acknowledgement.
type Producer struct {
	client sarama.Client
	sync   sarama.SyncProducer
}

// NewProducer connects a producer. sc (nil: defaults with Kafka 4 protocol) is modified: manual partitioning, acks
// from all replicas, successes returned; it must not be shared.
func NewProducer(brokers []string, sc *sarama.Config) (*Producer, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect producer to %v: %w", brokers, err)
	}
	sp, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("start producer on %v: %w", brokers, err)
	}
	return &Producer{client: client, sync: sp}, nil
}

// Close stops the producer and its client.
func (p *Producer) Close() error {
	return errors.Join(p.sync.Close(), p.client.Close())
}

func (p *Producer) toSarama(m Message) (*sarama.ProducerMessage, error) {
	part := m.Partition
	if part < 0 {
		parts, err := p.client.Partitions(m.Topic)
		if err != nil {
			return nil, fmt.Errorf("partitions of %s: %w", m.Topic, err)
		}
		if len(parts) == 0 {
			return nil, fmt.Errorf("topic %s has no partitions", m.Topic)
		}
		h := fnv.New32a()
		_, _ = h.Write(m.Key)
		part = int32(h.Sum32() % uint32(len(parts)))
	}
	pm := &sarama.ProducerMessage{Topic: m.Topic, Partition: part, Value: sarama.ByteEncoder(m.Value)}
	if m.Key != nil {
		pm.Key = sarama.ByteEncoder(m.Key)
	}
	for _, h := range m.Headers {
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return pm, nil
}

// Send produces m and waits for the acknowledgement, stamping SendTime and AckTime with clock (nil: time.Now).
func (p *Producer) Send(m Message, clock func() time.Time) (Sent, error) {
	if clock == nil {
		clock = time.Now
	}
	pm, err := p.toSarama(m)
	if err != nil {
		return Sent{}, fmt.Errorf("send to %s: %w", m.Topic, err)
	}
	s := Sent{SendTime: clock()}
	part, off, err := p.sync.SendMessage(pm)
	s.AckTime = clock()
	if err != nil {
		return s, fmt.Errorf("send to %s/%d: %w", m.Topic, pm.Partition, err)
	}
	s.Partition, s.Offset = part, off
	return s, nil
}

// SendAll produces ms and waits until all are acknowledged; it fails if any failed.
func (p *Producer) SendAll(ms []Message) error {
	pms := make([]*sarama.ProducerMessage, 0, len(ms))
	for _, m := range ms {
		pm, err := p.toSarama(m)
		if err != nil {
			return fmt.Errorf("send to %s: %w", m.Topic, err)
		}
		pms = append(pms, pm)
	}
	if err := p.sync.SendMessages(pms); err != nil {
		return fmt.Errorf("send %d messages: %w", len(pms), err)
	}
	return nil
}

// Leaders returns the leader broker id of each partition of topic, from freshly refreshed metadata.
func (p *Producer) Leaders(topic string) (map[int32]int32, error) {
	if err := p.client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("refresh metadata of %s: %w", topic, err)
	}
	parts, err := p.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	out := make(map[int32]int32, len(parts))
	var errs []error
	for _, part := range parts {
		b, err := p.client.Leader(topic, part)
		if err != nil {
			errs = append(errs, fmt.Errorf("leader of %s/%d: %w", topic, part, err))
			continue
		}
		out[part] = b.ID()
	}
	return out, errors.Join(errs...)
}

// TopicSpec describes a topic EnsureTopic creates when it is missing.
type TopicSpec struct {
	Name        string
	Partitions  int32 // 0 with SpreadLeaders: one per broker
	Replication int16 // default min(3, brokers)
	Configs     map[string]string
	// SpreadLeaders assigns replicas explicitly so partition i's preferred leader is the i-th broker (by id,
	// cycling): every broker leads at least one partition when Partitions ≥ brokers (the probe topic's need).
	SpreadLeaders bool
}

// EnsureTopic creates spec's topic if it does not exist and returns its partition count. An existing topic is left
// as it is (its partition count is returned). A topic it creates is returned once every broker's metadata shows
// every partition with a leader (waitTopicMetadata): a controller accepts CreateTopics before the brokers learn the
// topic, and a read or produce meanwhile fails with UNKNOWN_TOPIC_OR_PARTITION.
func EnsureTopic(brokers []string, sc *sarama.Config, spec TopicSpec) (int32, error) {
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

// topicMetadataTimeout bounds EnsureTopic's wait for a new topic's metadata: Kafka's brokers learn a topic from the
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
