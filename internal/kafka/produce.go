package kafka

import (
	"errors"
	"fmt"
	"hash/fnv"
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
