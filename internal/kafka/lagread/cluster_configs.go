package lagread

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

// DefaultTopicConfigTTL is how long ListOffsets reuses a topic's retention settings before DescribeConfigs reads them
// again. Retention settings change rarely and the margins they give are lower bounds anyway; re-reading every five
// minutes bounds both the cost (one request for every topic due) and how long a changed setting goes unseen.
const DefaultTopicConfigTTL = 5 * time.Minute

// retentionConfigs are the topic configs the retention margins need.
var retentionConfigs = []string{"cleanup.policy", "retention.ms", "retention.bytes", "segment.ms", "segment.bytes"}

// topicSettings caches topic retention settings by topic incarnation; mu guards every field.
type topicSettings struct {
	mu      sync.Mutex
	ttl     time.Duration // 0: DefaultTopicConfigTTL
	byTopic map[string]cachedSettings
}

type cachedSettings struct {
	id string // topic id the settings were read for: a re-created topic reads them again
	r  *lagexporter.TopicRetention
	at time.Time
}

// SetTopicConfigTTL sets how long retention settings read with DescribeConfigs are reused (DefaultTopicConfigTTL
// when d <= 0). Call before the reader is used.
func (c *ClusterReader) SetTopicConfigTTL(d time.Duration) {
	c.settings.mu.Lock()
	defer c.settings.mu.Unlock()
	c.settings.ttl = d
}

// fillRetention sets each topic's Retention (DescribeConfigs for the topics not cached: one request) and, for topics
// whose cleanup.policy deletes with a finite retention.bytes, the size of each read partition's log on its leader
// (DescribeLogDirs: one request per leader). A topic whose settings cannot be read keeps the cached ones, or none.
func (c *ClusterReader) fillRetention(ctx context.Context, topics []lagexporter.TopicObservation) lagexporter.CycleErrors {
	if len(topics) == 0 {
		return nil
	}
	s := &c.settings
	now := time.Now()
	s.mu.Lock()
	if s.byTopic == nil {
		s.byTopic = map[string]cachedSettings{}
	}
	ttl := s.ttl
	if ttl <= 0 {
		ttl = DefaultTopicConfigTTL
	}
	var due []string
	for _, t := range topics {
		if e, ok := s.byTopic[t.Topic]; !ok || e.id != t.ID || now.Sub(e.at) >= ttl {
			due = append(due, t.Topic)
		}
	}
	s.mu.Unlock()

	var errs lagexporter.CycleErrors
	if len(due) > 0 && ctx.Err() == nil {
		got, ferrs := c.describeRetention(due)
		errs = append(errs, ferrs...)
		ids := map[string]string{}
		for _, t := range topics {
			ids[t.Topic] = t.ID
		}
		s.mu.Lock()
		for name, r := range got {
			s.byTopic[name] = cachedSettings{id: ids[name], r: r, at: now}
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	inScope := make(map[string]bool, len(topics))
	for i := range topics {
		t := &topics[i]
		inScope[t.Topic] = true
		if e, ok := s.byTopic[t.Topic]; ok && e.id == t.ID {
			t.Retention = e.r // immutable once cached: snapshots may share it
		}
	}
	for name := range s.byTopic {
		if !inScope[name] {
			delete(s.byTopic, name) // a topic out of scope is read again when it comes back
		}
	}
	s.mu.Unlock()
	return append(errs, c.fillLogSizes(ctx, topics)...)
}

// describeRetention reads the retention configs of topics with one DescribeConfigs request (any broker answers topic
// configs).
func (c *ClusterReader) describeRetention(topics []string) (map[string]*lagexporter.TopicRetention, lagexporter.CycleErrors) {
	req := &sarama.DescribeConfigsRequest{Version: 4}
	for _, t := range topics {
		req.Resources = append(req.Resources, &sarama.ConfigResource{Type: sarama.TopicResource, Name: t, ConfigNames: retentionConfigs})
	}
	var last error
	for _, id := range c.Brokers() {
		b, err := c.broker(id)
		if err != nil {
			last = err
			continue
		}
		c.requests.Add(1)
		resp, err := b.DescribeConfigs(req)
		if err != nil {
			_ = b.Close()
			last = err
			continue
		}
		out := make(map[string]*lagexporter.TopicRetention, len(resp.Resources))
		var errs lagexporter.CycleErrors
		for _, res := range resp.Resources {
			if kerr := sarama.KError(res.ErrorCode); !errors.Is(kerr, sarama.ErrNoError) {
				errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindConfigs, Subject: "topic " + res.Name,
					Message: fmt.Sprintf("describe configs: %v %s", kerr, res.ErrorMsg)})
				continue
			}
			r, err := parseRetention(res.Configs)
			if err != nil {
				errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindConfigs, Subject: "topic " + res.Name, Message: err.Error()})
				continue
			}
			out[res.Name] = r
		}
		return out, errs
	}
	if last == nil {
		last = errors.New("no broker known")
	}
	return nil, lagexporter.CycleErrors{{Kind: lagexporter.ErrKindConfigs, Message: fmt.Sprintf("describe configs of %d topics: %v", len(topics), last)}}
}

// parseRetention reads the retention settings out of a DescribeConfigs answer. A missing cleanup.policy or retention
// setting is an error (the broker always answers them, with their defaults); the segment limits are optional.
func parseRetention(entries []*sarama.ConfigEntry) (*lagexporter.TopicRetention, error) {
	r := &lagexporter.TopicRetention{}
	seen := map[string]bool{}
	for _, e := range entries {
		if e == nil {
			continue
		}
		var dst *int64
		switch e.Name {
		case "cleanup.policy":
			r.CleanupPolicy = e.Value
		case "retention.ms":
			dst = &r.RetentionMs
		case "retention.bytes":
			dst = &r.RetentionBytes
		case "segment.ms":
			dst = &r.SegmentMs
		case "segment.bytes":
			dst = &r.SegmentBytes
		default:
			continue
		}
		seen[e.Name] = true
		if dst != nil {
			v, err := strconv.ParseInt(e.Value, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("config %s: %q is not an integer", e.Name, e.Value)
			}
			*dst = v
		}
	}
	for _, k := range []string{"cleanup.policy", "retention.ms", "retention.bytes"} {
		if !seen[k] {
			return nil, fmt.Errorf("describe configs: %s missing from the answer", k)
		}
	}
	return r, nil
}

// fillLogSizes sets SizeBytes of every read partition of the topics whose size-based retention applies, from one
// DescribeLogDirs per leader (the leader's own log; a replica being moved between log dirs is skipped). A leader
// that cannot be asked adds a cycle error naming it; its partitions keep no size.
func (c *ClusterReader) fillLogSizes(ctx context.Context, topics []lagexporter.TopicObservation) lagexporter.CycleErrors {
	byLeader := logSizeWants(topics)
	if len(byLeader) == 0 || ctx.Err() != nil {
		return nil
	}
	ids := make([]int32, 0, len(byLeader))
	for id := range byLeader {
		ids = append(ids, id)
	}
	res := perBroker(ids, func(id int32) error { return c.leaderLogSizes(id, byLeader[id]) })
	var errs lagexporter.CycleErrors
	for _, id := range ids {
		if err := res[id]; err != nil {
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindConfigs, Subject: brokerSubject(id), Message: err.Error()})
		}
	}
	return errs
}

// logSizeWant is one topic's partitions whose log sizes one leader is asked for, by partition id.
type logSizeWant struct {
	topic string
	parts map[int32]*lagexporter.PartitionObservation
}

// logSizeWants groups the read, led partitions of the topics whose size-based retention applies (deleting, finite
// retention.bytes) by leader, then by topic name.
func logSizeWants(topics []lagexporter.TopicObservation) map[int32]map[string]*logSizeWant {
	byLeader := map[int32]map[string]*logSizeWant{}
	for i := range topics {
		t := &topics[i]
		if !t.Retention.Deletes() || t.Retention.RetentionBytes < 0 {
			continue
		}
		for j := range t.Partitions {
			p := &t.Partitions[j]
			if !p.Known() || p.Leader < 0 {
				continue
			}
			m := byLeader[p.Leader]
			if m == nil {
				m = map[string]*logSizeWant{}
				byLeader[p.Leader] = m
			}
			if m[t.Topic] == nil {
				m[t.Topic] = &logSizeWant{topic: t.Topic, parts: map[int32]*lagexporter.PartitionObservation{}}
			}
			m[t.Topic].parts[p.Partition] = p
		}
	}
	return byLeader
}

// leaderLogSizes asks broker id for the log sizes of wants (the partitions it leads, by topic) with one
// DescribeLogDirs and sets their SizeBytes. Each partition's writer is the caller's goroutine only: the partitions
// of one leader. Errors: the broker unreachable, the request failing or answered with a top-level error.
func (c *ClusterReader) leaderLogSizes(id int32, wants map[string]*logSizeWant) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	req := &sarama.DescribeLogDirsRequest{Version: 4}
	for _, w := range wants {
		rt := sarama.DescribeLogDirsRequestTopic{Topic: w.topic}
		for p := range w.parts {
			rt.PartitionIDs = append(rt.PartitionIDs, p)
		}
		req.DescribeTopics = append(req.DescribeTopics, rt)
	}
	c.requests.Add(1)
	resp, err := b.DescribeLogDirs(req)
	if err != nil {
		_ = b.Close()
		return fmt.Errorf("describe log dirs: %w", err)
	}
	if !errors.Is(resp.ErrorCode, sarama.ErrNoError) {
		return fmt.Errorf("describe log dirs: %w", resp.ErrorCode)
	}
	for _, dir := range resp.LogDirs {
		if !errors.Is(dir.ErrorCode, sarama.ErrNoError) {
			continue
		}
		for _, t := range dir.Topics {
			w := wants[t.Topic]
			if w == nil {
				continue
			}
			for _, p := range t.Partitions {
				if po := w.parts[p.PartitionID]; po != nil && !p.IsTemporary {
					po.SizeBytes = p.Size
				}
			}
		}
	}
	return nil
}
