package kafka

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// TimestampType is what a topic's record timestamps mean (its message.timestamp.type config).
type TimestampType uint8

// Timestamp types.
const (
	TimestampUnknown   TimestampType = 0
	TimestampCreate    TimestampType = 1
	TimestampLogAppend TimestampType = 2
)

// Metadata answers the consuming paths' questions about topics — which broker leads a partition (whose clock
// stamped a LogAppendTime) and what a topic's timestamps mean — from a cache refreshed at most every TTL, so a
// record never costs a Kafka request.
type Metadata struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
	ttl    time.Duration
	now    func() time.Time

	// mu guards the caches.
	mu      sync.Mutex
	leaders map[string]cachedLeaders
	tsTypes map[string]cachedType
}

type cachedLeaders struct {
	at time.Time
	m  map[int32]int32
}

type cachedType struct {
	at time.Time
	t  TimestampType
}

// NewMetadata connects a metadata reader. ttl ≤ 0 means 30 s.
func NewMetadata(brokers []string, sc *sarama.Config, ttl time.Duration) (*Metadata, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	if ttl <= 0 {
		ttl = 30 * time.Second
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect metadata client to %v: %w", brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connect admin to %v: %w", brokers, err)
	}
	return &Metadata{client: client, admin: admin, ttl: ttl, now: time.Now,
		leaders: map[string]cachedLeaders{}, tsTypes: map[string]cachedType{}}, nil
}

// Close releases the connections.
func (m *Metadata) Close() error { return m.admin.Close() } // closes the client too

// Leader returns the leader broker id of topic/partition, or -1 when unknown.
func (m *Metadata) Leader(topic string, partition int32) int32 {
	now := m.now()
	m.mu.Lock()
	c, ok := m.leaders[topic]
	m.mu.Unlock()
	if !ok || now.Sub(c.at) > m.ttl {
		c = cachedLeaders{at: now, m: map[int32]int32{}}
		if err := m.client.RefreshMetadata(topic); err == nil {
			parts, _ := m.client.Partitions(topic)
			for _, p := range parts {
				if b, err := m.client.Leader(topic, p); err == nil {
					c.m[p] = b.ID()
				}
			}
		}
		m.mu.Lock()
		m.leaders[topic] = c
		m.mu.Unlock()
	}
	if id, ok := c.m[partition]; ok {
		return id
	}
	return -1
}

// TimestampType returns topic's message.timestamp.type, TimestampUnknown when it cannot be read (the answer is
// cached for TTL either way, so an unreachable cluster costs one request per TTL).
func (m *Metadata) TimestampType(topic string) TimestampType {
	now := m.now()
	m.mu.Lock()
	c, ok := m.tsTypes[topic]
	m.mu.Unlock()
	if ok && now.Sub(c.at) <= m.ttl {
		return c.t
	}
	c = cachedType{at: now, t: TimestampUnknown}
	entries, err := m.admin.DescribeConfig(sarama.ConfigResource{
		Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"message.timestamp.type"},
	})
	if err == nil {
		for _, e := range entries {
			if e.Name == "message.timestamp.type" {
				if strings.EqualFold(e.Value, "LogAppendTime") {
					c.t = TimestampLogAppend
				} else {
					c.t = TimestampCreate
				}
			}
		}
	}
	m.mu.Lock()
	m.tsTypes[topic] = c
	m.mu.Unlock()
	return c.t
}
