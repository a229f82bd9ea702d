package kafka

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// TopicState is what the metadata cache knows about a topic name.
type TopicState uint8

const (
	// TopicPending: the name's first lookup is queued or in flight; Metadata.Await's channel closes when it settles.
	TopicPending TopicState = iota
	// TopicKnown: the topic exists; the view holds its partitions' leaders and its timestamp type as last read.
	TopicKnown
	// TopicMissing: the cluster answered that no such topic exists (or the name is not a legal topic name). The
	// answer is believed for MetadataConfig.MissingTTL.
	TopicMissing
	// TopicFailed: the lookup failed (no broker answered, authorization, a timeout); retried after MissingTTL.
	TopicFailed
	// TopicOverflow: the name was not looked up because MetadataConfig.MaxUnknown names not known to exist are
	// tracked already: a flood of made-up names must not grow the cache or its requests without bound.
	TopicOverflow
)

var topicStates = [...]string{"pending", "known", "missing", "failed", "overflow"}

func (s TopicState) String() string {
	if int(s) < len(topicStates) {
		return topicStates[s]
	}
	return fmt.Sprintf("TopicState(%d)", s)
}

// PartitionInfo is one partition as the last Metadata response described it.
type PartitionInfo struct {
	// Leader is the leader broker's id, -1 when the partition had none (an election in progress).
	Leader int32
	// LeaderEpoch is the leader's epoch (Metadata v7+, KIP-320), -1 when unknown. It increases with every leader
	// change, so a record stamped by a leader can be matched to it through the epoch its batch carries.
	LeaderEpoch int32
}

// TopicView is an immutable answer of the metadata cache: safe to keep and share, never updated in place (a refresh
// publishes a new view).
type TopicView struct {
	State TopicState
	// TimestampType is the topic's message.timestamp.type (TopicKnown only; TimestampUnknown when its config could
	// not be read).
	TimestampType TimestampType
	// Partitions are indexed by partition id (TopicKnown only).
	Partitions []PartitionInfo
	// ReadAt is when the cluster gave this answer; zero for TopicPending and TopicOverflow.
	ReadAt time.Time
	// Err says why for TopicMissing (a name that is not a legal topic name), TopicFailed and TopicOverflow.
	Err error
}

// Leader returns the leader broker id of partition, -1 when unknown (not TopicKnown, no such partition, no leader).
func (v *TopicView) Leader(partition int32) int32 {
	if v == nil || partition < 0 || int(partition) >= len(v.Partitions) {
		return -1
	}
	return v.Partitions[partition].Leader
}

var (
	viewPending = &TopicView{State: TopicPending}
	// ErrTooManyUnknownTopics is TopicOverflow's Err.
	ErrTooManyUnknownTopics = errors.New("too many topic names unknown to the cluster are tracked")
)

// MetadataConfig bounds the metadata cache. Zero values take the defaults.
type MetadataConfig struct {
	// TTL: a known topic's view older than this is refreshed in the background on its next lookup, which meanwhile
	// answers from the old view (default 30 s). A view with a leaderless partition is refreshed after 1 s.
	TTL time.Duration
	// MissingTTL: how long a TopicMissing or TopicFailed answer stands before the name is looked up again
	// (default 30 s).
	MissingTTL time.Duration
	// MaxUnknown bounds the names tracked that are not known to exist (pending, missing or failed; default 1000).
	// Past it, a new name is looked up only if the cluster's topic list (read every TTL) holds it; any other answers
	// TopicOverflow at once, without a request. So a flood of made-up names never keeps a real topic from being
	// looked up, unless the topic was created since the last list.
	MaxUnknown int
	// RequestTimeout bounds one request to a broker (default 5 s): a lookup settles within about that, whatever
	// the cluster does.
	RequestTimeout time.Duration
	// BatchTopics is the most names one Metadata request asks for (default 200); all names queued meanwhile are
	// looked up together.
	BatchTopics int
}

// SetDefaults fills zero fields.
func (c *MetadataConfig) SetDefaults() {
	if c.TTL <= 0 {
		c.TTL = 30 * time.Second
	}
	if c.MissingTTL <= 0 {
		c.MissingTTL = 30 * time.Second
	}
	if c.MaxUnknown <= 0 {
		c.MaxUnknown = 1000
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.BatchTopics <= 0 {
		c.BatchTopics = 200
	}
}

// MetadataStats are the cache's counters (for metrics).
type MetadataStats struct {
	Topics    int    // names tracked
	Unknown   int    // of which not known to exist: pending, missing or failed (≤ MaxUnknown, give or take deletions)
	Requests  uint64 // Metadata requests sent
	Overflows uint64 // lookups answered TopicOverflow
}

// Metadata answers the consuming paths' questions about topics (which broker leads a partition, whose clock stamped
// a LogAppendTime; what a topic's timestamps mean) without ever blocking them on Kafka:
//
//   - Topic answers from the cache at once. A name never seen is queued for lookup and answers TopicPending; a
//     caller that needs the answer parks on Await(name), one channel per topic shared by every waiter, never one
//     lookup per partition or per record.
//   - One goroutine looks names up in the background, all names queued meanwhile in one Metadata request (never
//     auto-creating a topic), then their timestamp types in one DescribeConfigs request.
//   - Answers are cached: a known topic for TTL (stale-while-revalidate: an expired view is served while its
//     refresh runs), "no such topic" and failures for MissingTTL (negative caching).
//   - Names not known to exist are bounded by MaxUnknown; past it, new ones answer TopicOverflow.
//
// Extension point: a topic's entry (topicEntry) is where per-partition history belongs, e.g. the leader of each
// leader epoch for attributing append stamps across failovers; refreshes replace views, so history must be kept
// in the entry and carried from one view to the next in apply.
type Metadata struct {
	client sarama.Client
	admin  sarama.ClusterAdmin
	cfg    MetadataConfig
	now    func() time.Time

	wake chan struct{} // cap 1: names were queued
	stop chan struct{} // closed by Close
	done chan struct{} // closed when the refresher returned

	requests, overflows atomic.Uint64
	started             atomic.Bool // run was started (Close waits for it)
	closeOnce           sync.Once

	// mu guards entries, queue, unknown, lastPrune, listed and closed.
	mu      sync.Mutex
	closed  bool
	entries map[string]*topicEntry
	// listed holds every topic name of the cluster as of the last list (nil until the first): what a new name is
	// checked against while MaxUnknown unknown names are tracked.
	listed  map[string]struct{}
	queue   []string // names to look up, in order; each at most once (topicEntry.queued)
	unknown int      // entries whose view is nil or not TopicKnown
	// lastPrune is when the entries were last scanned for expired unknown names (at most once a second, only while
	// at the bound).
	lastPrune time.Time
}

// topicEntry is one name's state; guarded by Metadata.mu.
type topicEntry struct {
	view    *TopicView    // nil until the first lookup settles
	expires time.Time     // when view is due for a refresh
	queued  bool          // in Metadata.queue or in flight
	settled chan struct{} // closed when the first lookup settled
}

func (e *topicEntry) unknown() bool { return e.view == nil || e.view.State != TopicKnown }

// NewMetadata connects the metadata cache to brokers and starts its refresher; Close stops it. sc must not be
// shared; its timeouts are bounded by cfg.RequestTimeout and topic auto-creation is turned off.
func NewMetadata(brokers []string, sc *sarama.Config, cfg MetadataConfig) (*Metadata, error) {
	cfg.SetDefaults()
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	// A lookup of a made-up name must never create it (brokers default to auto.create.topics.enable=true).
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Net.DialTimeout = min(sc.Net.DialTimeout, cfg.RequestTimeout)
	sc.Net.ReadTimeout = min(sc.Net.ReadTimeout, cfg.RequestTimeout)
	sc.Net.WriteTimeout = min(sc.Net.WriteTimeout, cfg.RequestTimeout)
	sc.Admin.Timeout = min(sc.Admin.Timeout, cfg.RequestTimeout)
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect metadata client to %v: %w", brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("connect admin to %v: %w", brokers, err)
	}
	m := newMetadata(client, admin, cfg)
	m.start()
	return m, nil
}

// start starts the refresher.
func (m *Metadata) start() {
	m.started.Store(true)
	go m.run()
}

// newMetadata returns a cache whose refresher is not started (start starts it).
func newMetadata(client sarama.Client, admin sarama.ClusterAdmin, cfg MetadataConfig) *Metadata {
	return &Metadata{client: client, admin: admin, cfg: cfg, now: time.Now,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		entries: map[string]*topicEntry{}}
}

// Close stops the refresher (an in-flight request ends with the connections, within RequestTimeout) and releases
// the connections. Channels of pending lookups are closed, so no waiter is left behind.
func (m *Metadata) Close() error {
	var err error
	m.closeOnce.Do(func() { err = m.close() })
	return err
}

func (m *Metadata) close() error {
	close(m.stop)
	err := m.admin.Close() // closes the client too, and with it any request in flight
	if m.started.Load() {
		<-m.done
	}
	m.mu.Lock()
	m.closed = true
	for _, e := range m.entries {
		if e.view == nil {
			close(e.settled)
			e.view = viewClosed
		}
	}
	m.mu.Unlock()
	return err
}

var viewClosed = &TopicView{State: TopicFailed, Err: errors.New("metadata cache closed")}

// Topic returns what the cache knows of name, never blocking: the cached view (refreshed in the background once
// expired); TopicPending for a name being looked up for the first time (queued now if it was never seen); a
// TopicMissing view without a request for a name that is not a legal topic name; TopicOverflow when MaxUnknown names
// not known to exist are tracked already.
func (m *Metadata) Topic(name string) *TopicView {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[name]
	if !ok {
		if m.closed {
			return viewClosed
		}
		if err := ValidTopicName(name); err != nil {
			return &TopicView{State: TopicMissing, Err: err}
		}
		if m.unknown >= m.cfg.MaxUnknown && !m.pruneLocked(now) {
			if _, exists := m.listed[name]; !exists {
				m.overflows.Add(1)
				return &TopicView{State: TopicOverflow, Err: fmt.Errorf("%w (%d)", ErrTooManyUnknownTopics, m.cfg.MaxUnknown)}
			}
		}
		e = &topicEntry{settled: make(chan struct{})}
		m.entries[name] = e
		m.unknown++
		m.enqueueLocked(name, e)
		return viewPending
	}
	if e.view == nil {
		return viewPending
	}
	if !e.queued && !now.Before(e.expires) {
		m.enqueueLocked(name, e)
	}
	return e.view
}

// Await returns a channel that is closed once name's first lookup has settled (at once if it has, or if name is
// not tracked). Every caller waiting for one topic shares its channel.
func (m *Metadata) Await(name string) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.entries[name]; ok && e.view == nil {
		return e.settled
	}
	return closedChan
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Leader returns the leader broker id of topic/partition from the cache, -1 when not known (yet).
func (m *Metadata) Leader(topic string, partition int32) int32 {
	return m.Topic(topic).Leader(partition)
}

// TimestampType returns topic's message.timestamp.type from the cache, TimestampUnknown when not known (yet).
func (m *Metadata) TimestampType(topic string) TimestampType { return m.Topic(topic).TimestampType }

// Stats returns the cache's counters.
func (m *Metadata) Stats() MetadataStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MetadataStats{Topics: len(m.entries), Unknown: m.unknown, Requests: m.requests.Load(), Overflows: m.overflows.Load()}
}

func (m *Metadata) enqueueLocked(name string, e *topicEntry) {
	e.queued = true
	m.queue = append(m.queue, name)
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// pruneLocked deletes expired missing and failed entries that nobody is looking up, at most once a second, and
// reports whether that made room under MaxUnknown.
func (m *Metadata) pruneLocked(now time.Time) bool {
	if now.Sub(m.lastPrune) < time.Second {
		return false
	}
	m.lastPrune = now
	for name, e := range m.entries {
		if e.view != nil && e.unknown() && !e.queued && !now.Before(e.expires) {
			delete(m.entries, name)
			m.unknown--
		}
	}
	return m.unknown < m.cfg.MaxUnknown
}

// run is the refresher: it lists the cluster's topics every TTL and looks up queued names, BatchTopics at a time,
// until Close.
func (m *Metadata) run() {
	defer close(m.done)
	list := time.NewTicker(m.cfg.TTL)
	defer list.Stop()
	m.list()
	for {
		select {
		case <-m.stop:
			return
		case <-list.C:
			m.list()
			continue
		case <-m.wake:
		}
		for {
			m.mu.Lock()
			n := min(len(m.queue), m.cfg.BatchTopics)
			names := append([]string(nil), m.queue[:n]...)
			m.queue = m.queue[n:]
			if len(m.queue) == 0 {
				m.queue = nil // let a burst's backing array go
			}
			m.mu.Unlock()
			if len(names) == 0 {
				break
			}
			views := m.fetch(names)
			select {
			case <-m.stop:
				return
			default:
			}
			m.apply(views)
		}
	}
}

// list reads the names of every topic of the cluster (one Metadata request for all topics); on failure the last
// list stays.
func (m *Metadata) list() {
	resp, err := m.metadata(nil)
	if err != nil {
		return
	}
	names := make(map[string]struct{}, len(resp.Topics))
	for _, t := range resp.Topics {
		if t != nil && errors.Is(t.Err, sarama.ErrNoError) {
			names[t.Name] = struct{}{}
		}
	}
	m.mu.Lock()
	m.listed = names
	m.mu.Unlock()
}

// fetch looks names up: one Metadata request (tried on each broker until one answers), then one DescribeConfigs
// request for the timestamp types of those that exist. Every name gets a view.
func (m *Metadata) fetch(names []string) map[string]*TopicView {
	now := m.now()
	out := make(map[string]*TopicView, len(names))
	resp, err := m.metadata(names)
	if err != nil {
		for _, n := range names {
			out[n] = &TopicView{State: TopicFailed, ReadAt: now, Err: err}
		}
		return out
	}
	var exist []*sarama.ConfigResource
	for _, t := range resp.Topics {
		if t == nil {
			continue
		}
		switch {
		case errors.Is(t.Err, sarama.ErrNoError):
			v := &TopicView{State: TopicKnown, ReadAt: now}
			for _, p := range t.Partitions {
				if p == nil || p.ID < 0 || p.ID >= 1<<20 {
					continue
				}
				for int(p.ID) >= len(v.Partitions) {
					v.Partitions = append(v.Partitions, PartitionInfo{Leader: -1, LeaderEpoch: -1})
				}
				info := PartitionInfo{Leader: p.Leader, LeaderEpoch: p.LeaderEpoch}
				if !errors.Is(p.Err, sarama.ErrNoError) && !errors.Is(p.Err, sarama.ErrReplicaNotAvailable) {
					info.Leader = -1 // LEADER_NOT_AVAILABLE and friends: no leader to attribute to
				}
				if resp.Version < 7 { // no epochs before v7
					info.LeaderEpoch = -1
				}
				v.Partitions[p.ID] = info
			}
			out[t.Name] = v
			exist = append(exist, &sarama.ConfigResource{Type: sarama.TopicResource, Name: t.Name,
				ConfigNames: []string{"message.timestamp.type"}})
		case errors.Is(t.Err, sarama.ErrUnknownTopicOrPartition), errors.Is(t.Err, sarama.ErrInvalidTopic):
			out[t.Name] = &TopicView{State: TopicMissing, ReadAt: now}
		default:
			out[t.Name] = &TopicView{State: TopicFailed, ReadAt: now, Err: fmt.Errorf("metadata of topic %q: %w", t.Name, t.Err)}
		}
	}
	for _, n := range names {
		if out[n] == nil { // not in the answer: treat as failed, try again later
			out[n] = &TopicView{State: TopicFailed, ReadAt: now, Err: fmt.Errorf("topic %q missing from the metadata response", n)}
		}
	}
	if len(exist) > 0 {
		if results, err := m.admin.DescribeConfigs(exist, sarama.DescribeConfigsOptions{}); err == nil {
			for _, r := range results {
				v := out[r.Name]
				if v == nil || v.State != TopicKnown || r.ErrorCode != sarama.ErrNoError {
					continue
				}
				for _, c := range r.Configs {
					if c.Name == "message.timestamp.type" {
						v.TimestampType = TimestampCreate
						if strings.EqualFold(c.Value, "LogAppendTime") {
							v.TimestampType = TimestampLogAppend
						}
					}
				}
			}
		}
		// A config that cannot be read leaves TimestampUnknown; the view still gives the leaders.
	}
	return out
}

// metadata sends one Metadata request for names (nil: every topic), trying each known broker (least loaded first)
// until one answers.
func (m *Metadata) metadata(names []string) (*sarama.MetadataResponse, error) {
	req := sarama.NewMetadataRequest(m.client.Config().Version, names)
	req.AllowAutoTopicCreation = false
	tried := map[*sarama.Broker]bool{}
	var errs []error
	try := func(b *sarama.Broker) *sarama.MetadataResponse {
		if b == nil || tried[b] {
			return nil
		}
		tried[b] = true
		m.requests.Add(1)
		resp, err := b.GetMetadata(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("metadata from %s: %w", b.Addr(), err))
			_ = b.Close() // reopened by the client on its next use
			return nil
		}
		return resp
	}
	if resp := try(m.client.LeastLoadedBroker()); resp != nil {
		return resp, nil
	}
	for _, b := range m.client.Brokers() {
		select {
		case <-m.stop:
			return nil, errors.New("metadata cache closed")
		default:
		}
		if err := b.Open(m.client.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			continue
		}
		if resp := try(b); resp != nil {
			return resp, nil
		}
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no broker reachable"))
	}
	return nil, fmt.Errorf("look up %d topics: %w", len(names), errors.Join(errs...))
}

// apply publishes the views the refresher read and wakes the waiters of names that were pending.
func (m *Metadata) apply(views map[string]*TopicView) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, v := range views {
		e, ok := m.entries[name]
		if !ok {
			continue
		}
		wasUnknown := e.unknown()
		if e.view != nil && e.view.State == TopicKnown && v.State == TopicFailed {
			// A refresh that failed (brokers down) keeps the last known leaders: serve them, try again soon.
			e.queued, e.expires = false, now.Add(min(m.cfg.TTL, m.cfg.MissingTTL))
			continue
		}
		first := e.view == nil
		e.view, e.queued = v, false
		switch {
		case v.State == TopicKnown && v.leaderless():
			e.expires = now.Add(min(m.cfg.TTL, time.Second))
		case v.State == TopicKnown:
			e.expires = now.Add(m.cfg.TTL)
		default:
			e.expires = now.Add(m.cfg.MissingTTL)
		}
		switch isUnknown := e.unknown(); {
		case wasUnknown && !isUnknown:
			m.unknown--
		case !wasUnknown && isUnknown:
			m.unknown++
		}
		if first {
			close(e.settled)
		}
	}
}

func (v *TopicView) leaderless() bool {
	for _, p := range v.Partitions {
		if p.Leader < 0 {
			return true
		}
	}
	return len(v.Partitions) == 0
}

// ValidTopicName reports whether name is a legal Kafka topic name: 1 to 249 characters of [a-zA-Z0-9._-], and
// not "." or ".." (the broker's rules, org.apache.kafka.common.internals.Topic.validate).
func ValidTopicName(name string) error {
	if name == "" {
		return errors.New("topic name is empty")
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name %q… is %d characters long; Kafka allows at most 249", name[:40], len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		switch b := name[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '.', b == '_', b == '-':
		default:
			return fmt.Errorf("topic name %q: character %q is not allowed (only a-z, A-Z, 0-9, '.', '_', '-')", name, b)
		}
	}
	return nil
}
