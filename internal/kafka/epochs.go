package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/kafka/franzconn"
)

// AppendLeaders answers, for a record's topic, partition and offset, which broker appended it: the leader of the
// partition leader epoch the record was written in. That broker's clock stamped its LogAppendTime, and across a
// leader failover it is not the partition's leader when the record is read (docs/collector.md, "Whose clock stamped
// the append").
//
// Sarama hands out no record batch's partitionLeaderEpoch, so offsets are placed in epochs the way Kafka's own
// replicas do (KIP-101, KIP-279): a refresh round asks each partition's leader for its log end offset and current
// leader epoch (ListOffsets v4+; the broker that answers is the epoch's leader), and, when the epoch is new, asks
// OffsetForLeaderEpoch for where it began (the end offset of the epoch before it). An epoch that began and ended
// between two rounds (a failover and back) is found the same way and kept with an unknown leader. Only offsets below
// the last log end offset read are placed; a caller asking for a newer one waits for the next round (at most
// Interval, bounded by MaxWait). Offsets before the first epoch seen, and those of an epoch whose leader was never
// seen, have no known leader: -1, never a guess.
//
// Safe for concurrent use. Partitions nobody asked about for 10 minutes are forgotten (memory stays bounded).
type AppendLeaders struct {
	rpc      epochRPC
	close    func()
	interval time.Duration
	maxWait  time.Duration
	log      *slog.Logger

	kick chan struct{} // a caller waits for a round

	mu    sync.Mutex // guards parts, round, after, done and inRound
	parts map[topicPartition]*epochHistory
	round chan struct{} // closed when the current refresh round ends
	// after, when not nil, is closed when the round after the one under way ends (Await's answer during a round).
	after chan struct{}
	// done counts the rounds that ended; inRound is set while one runs. A caller needs a round that began after it
	// asked (one already under way may have read the log end before the caller's record was appended).
	done    uint64
	inRound bool

	// Rounds and Errors count refresh rounds and failed requests (for tests and metrics).
	Rounds, Errors atomic.Uint64

	// logMu guards logged: per kind of failure, when it was last logged and how many failures went unlogged since.
	// A lookup that keeps failing (a broker down, an ACL missing) fails every round, 10 times a second by default;
	// one warning per kind per failLogEvery says so without flooding the log.
	logMu  sync.Mutex
	logged map[string]*failLog
	now    func() time.Time
}

// failLogEvery is the least time between two warnings about the same kind of lookup failure.
const failLogEvery = time.Minute

type failLog struct {
	at         time.Time
	suppressed uint64
}

type topicPartition struct {
	topic     string
	partition int32
}

// epochSpan is one leader epoch of a partition: its leader (-1 unknown) and first offset (-1 not yet known).
type epochSpan struct {
	epoch  int32
	leader int32
	start  int64
}

// epochHistory is one partition's epochs, by epoch ascending, and how far they are known to reach.
type epochHistory struct {
	spans []epochSpan
	// placed: every offset in [spans[0].start, placed) lies in a span whose start is known.
	placed int64
	// failing: the last round could not read the partition (its leader down, an election under way). Callers asking
	// about offsets beyond placed get -1 at once instead of waiting: a partition that cannot be read must not hold up
	// every record of it by MaxWait.
	failing bool
	lastUse time.Time
}

// epochRPC is what AppendLeaders asks the cluster (franzEpochs; a fake in tests).
type epochRPC interface {
	// listEnds returns each partition's leader, current leader epoch and log end offset; partitions it could not
	// read are left out (and counted through fail).
	listEnds(ctx context.Context, keys []topicPartition, fail func(string, error)) map[topicPartition]logEnd
	// epochEnd returns the largest epoch <= epoch the partition's leader has and that epoch's end offset; (-1, -1)
	// when it has no epoch that old.
	epochEnd(ctx context.Context, k topicPartition, epoch int32) (int32, int64, error)
}

// NewAppendLeaders connects (as sc does: see franzconn.NewClient) and returns the lookup; Run refreshes it.
// interval <= 0 is 100 ms, maxWait <= 0 is 2 s.
func NewAppendLeaders(brokers []string, sc *sarama.Config, interval, maxWait time.Duration, log *slog.Logger) (*AppendLeaders, error) {
	cl, err := franzconn.NewClient(brokers, sc)
	if err != nil {
		return nil, err
	}
	return newAppendLeaders(franzEpochs{cl}, cl.Close, interval, maxWait, log), nil
}

func newAppendLeaders(rpc epochRPC, closeFn func(), interval, maxWait time.Duration, log *slog.Logger) *AppendLeaders {
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 2 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &AppendLeaders{rpc: rpc, close: closeFn, interval: interval, maxWait: maxWait, log: log, kick: make(chan struct{}, 1),
		parts: map[topicPartition]*epochHistory{}, round: make(chan struct{}), logged: map[string]*failLog{}, now: time.Now}
}

// Close releases the connections.
func (a *AppendLeaders) Close() {
	if a.close != nil {
		a.close()
	}
}

// AppendLeader returns the broker that appended offset of topic/partition, or -1 when it cannot be known: before
// the first epoch seen, in an epoch whose leader was never seen, while the partition cannot be read (the last round
// failed for it: the answer is then immediate, never a wait), or when no round that began after the call placed
// the offset (within MaxWait, before ctx ended). A record the caller has read lies below the log end a round begun
// after the read sees, so one such round is all a healthy partition ever costs.
func (a *AppendLeaders) AppendLeader(ctx context.Context, topic string, partition int32, offset int64) int32 {
	k := topicPartition{topic, partition}
	var timer *time.Timer
	need := uint64(0) // the round count at which a round begun after this call has ended
	for {
		a.mu.Lock()
		h := a.parts[k]
		if h == nil {
			h = &epochHistory{placed: -1}
			a.parts[k] = h
		}
		h.lastUse = time.Now()
		if offset < h.placed {
			l := h.leaderOf(offset)
			a.mu.Unlock()
			return l
		}
		if need == 0 {
			need = a.done + 1
			if a.inRound {
				need++
			}
		}
		if h.failing || a.done >= need {
			a.mu.Unlock()
			select {
			case a.kick <- struct{}{}: // a failing partition is retried by the next round, not by this caller
			default:
			}
			return -1
		}
		round := a.round
		a.mu.Unlock()
		select {
		case a.kick <- struct{}{}:
		default:
		}
		if timer == nil {
			timer = time.NewTimer(a.maxWait)
			defer timer.Stop()
		}
		select {
		case <-round:
		case <-timer.C:
			// A round slower than MaxWait (a broker not answering): the partition counts as failing until a round
			// places it, so its other records do not wait too.
			a.setFailing(k, true)
			return -1
		case <-ctx.Done():
			return -1
		}
	}
}

// Placed is AppendLeader without waiting: the broker that appended offset if a round has placed it, else -1. A
// caller that must not block (the receipts path) first waits, off its record path, on Await's channel.
func (a *AppendLeaders) Placed(topic string, partition int32, offset int64) int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.parts[topicPartition{topic, partition}]
	if h == nil || offset >= h.placed {
		return -1
	}
	h.lastUse = time.Now()
	return h.leaderOf(offset)
}

// Await returns nil when Placed can answer for offset now (it is placed, or its partition cannot be read: -1 at
// once), else a channel closed when a round begun after this call has ended, after which Placed answers as
// AppendLeader would have (-1 if that round did not place it). It never blocks, and it asks the runner for a round.
func (a *AppendLeaders) Await(topic string, partition int32, offset int64) <-chan struct{} {
	k := topicPartition{topic, partition}
	a.mu.Lock()
	h := a.parts[k]
	if h == nil {
		h = &epochHistory{placed: -1}
		a.parts[k] = h
	}
	h.lastUse = time.Now()
	if offset < h.placed {
		a.mu.Unlock()
		return nil
	}
	var ch chan struct{}
	switch {
	case h.failing: // answered at once (-1); the next round retries the partition
	case a.inRound: // the round under way may have read the log end before offset was appended
		if a.after == nil {
			a.after = make(chan struct{})
		}
		ch = a.after
	default:
		ch = a.round
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
	if ch == nil {
		return nil
	}
	return ch
}

// leaderOf is the leader of the span holding offset (below placed), -1 when none does.
func (h *epochHistory) leaderOf(offset int64) int32 {
	for i := len(h.spans) - 1; i >= 0; i-- {
		if s := h.spans[i]; s.start >= 0 && s.start <= offset {
			return s.leader
		}
	}
	return -1
}

// Run refreshes the partitions asked about, every interval and whenever a caller waits (but not more often than
// every interval/4), until ctx ends.
func (a *AppendLeaders) Run(ctx context.Context) error {
	t := time.NewTicker(a.interval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.kick:
			if wait := a.interval/4 - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}
		last = time.Now()
		a.refresh(ctx)
	}
}

// refresh runs one round over the partitions in use and wakes the callers waiting for it.
func (a *AppendLeaders) refresh(ctx context.Context) {
	a.mu.Lock()
	keys := make([]topicPartition, 0, len(a.parts))
	for k, h := range a.parts {
		if time.Since(h.lastUse) > 10*time.Minute {
			delete(a.parts, k)
			continue
		}
		keys = append(keys, k)
	}
	a.inRound = true
	a.mu.Unlock()
	// A round is bounded like a caller's wait: partitions it did not reach in time are failing until the next.
	ctx, cancel := context.WithTimeout(ctx, a.maxWait)
	defer cancel()
	if len(keys) > 0 {
		ends := a.rpc.listEnds(ctx, keys, a.fail)
		for _, k := range keys {
			end, ok := ends[k]
			if !ok {
				a.setFailing(k, true)
				continue
			}
			a.observe(ctx, k, end)
		}
	}
	a.Rounds.Add(1)
	a.mu.Lock()
	a.inRound = false
	a.done++
	close(a.round)
	a.round = a.after
	if a.round == nil {
		a.round = make(chan struct{})
	}
	a.after = nil
	a.mu.Unlock()
}

func (a *AppendLeaders) setFailing(k topicPartition, failing bool) {
	a.mu.Lock()
	if h := a.parts[k]; h != nil {
		h.failing = failing
	}
	a.mu.Unlock()
}

// logEnd is what one ListOffsets answer says about a partition: its leader (the broker that answered), its
// current leader epoch and its log end offset.
type logEnd struct {
	leader int32
	epoch  int32
	end    int64
}

// franzEpochs asks the cluster through a franz-go client (sarama has no OffsetForLeaderEpoch and hides the leader
// epoch ListOffsets answers).
type franzEpochs struct{ cl *kgo.Client }

func (f franzEpochs) listEnds(ctx context.Context, keys []topicPartition, fail func(string, error)) map[topicPartition]logEnd {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := map[string][]int32{}
	for _, k := range keys {
		byTopic[k.topic] = append(byTopic[k.topic], k.partition)
	}
	for topic, parts := range byTopic {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		for _, p := range parts {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = p, -1 // latest: the log end offset (read_uncommitted)
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	out := map[topicPartition]logEnd{}
	for _, sh := range f.cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			fail("list offsets", sh.Err)
			continue
		}
		resp := sh.Resp.(*kmsg.ListOffsetsResponse)
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					fail("list offsets of "+t.Topic, err)
					continue
				}
				if p.LeaderEpoch < 0 {
					continue // a broker before KIP-320 (2.1): no epochs to place offsets with
				}
				out[topicPartition{t.Topic, p.Partition}] = logEnd{leader: sh.Meta.NodeID, epoch: p.LeaderEpoch, end: p.Offset}
			}
		}
	}
	return out
}

// observe folds one log end into k's history, finding the start of a new epoch (and of any epoch missed before it)
// with OffsetForLeaderEpoch. Only when every epoch from the first seen on has a known start does placed advance.
func (a *AppendLeaders) observe(ctx context.Context, k topicPartition, e logEnd) {
	a.mu.Lock()
	h := a.parts[k]
	if h == nil {
		a.mu.Unlock()
		return
	}
	h.add(epochSpan{epoch: e.epoch, leader: e.leader, start: -1})
	a.mu.Unlock()
	// Walk back from the newest epoch whose start is unknown: its start is the end offset of the largest epoch
	// before it; an epoch the answer names that we never saw is added with an unknown leader and walked in turn.
	for step := 0; step < 16; step++ {
		a.mu.Lock()
		ep, ok := h.unknownStart()
		a.mu.Unlock()
		if !ok {
			break
		}
		prev, end, err := a.rpc.epochEnd(ctx, k, ep-1)
		if err != nil {
			a.fail("offset for leader epoch of "+k.topic, err)
			a.setFailing(k, true)
			return
		}
		a.mu.Lock()
		h.setStart(ep, prev, end)
		a.mu.Unlock()
	}
	a.mu.Lock()
	if h.complete() {
		h.placed = max(h.placed, e.end)
		h.failing = false
	} else {
		h.failing = true // an epoch's start is still unknown after the walk's limit
	}
	a.mu.Unlock()
}

// epochEnd asks k's leader where epoch ended: the largest epoch <= epoch it has, and that epoch's end offset (the
// first offset of the next). (-1, -1) when it has no epoch that old.
func (f franzEpochs) epochEnd(ctx context.Context, k topicPartition, epoch int32) (int32, int64, error) {
	if epoch < 0 {
		return -1, -1, nil
	}
	req := kmsg.NewPtrOffsetForLeaderEpochRequest()
	req.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = k.topic
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch = k.partition, epoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for _, sh := range f.cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return 0, 0, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.OffsetForLeaderEpochResponse).Topics {
			for _, p := range t.Partitions {
				if p.Partition != k.partition {
					continue
				}
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return 0, 0, err
				}
				return p.LeaderEpoch, p.EndOffset, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no answer for %s/%d", k.topic, k.partition)
}

func (a *AppendLeaders) fail(what string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	a.Errors.Add(1)
	key := what + ": " + err.Error()
	a.logMu.Lock()
	now, l := a.now(), a.logged[key]
	if l != nil && now.Sub(l.at) < failLogEvery {
		l.suppressed++
		a.logMu.Unlock()
		return
	}
	var suppressed uint64
	if l != nil {
		suppressed = l.suppressed
	}
	if len(a.logged) >= 1024 { // bounded: kinds are few (request × topic × error), but topics are the user's
		clear(a.logged)
	}
	a.logged[key] = &failLog{at: now}
	a.logMu.Unlock()
	a.log.Warn("leader epoch lookup", "what", what, "err", err, "repeated_since_last_warning", suppressed)
}

// add inserts s unless its epoch is known.
func (h *epochHistory) add(s epochSpan) {
	i := sort.Search(len(h.spans), func(i int) bool { return h.spans[i].epoch >= s.epoch })
	if i < len(h.spans) && h.spans[i].epoch == s.epoch {
		if h.spans[i].leader < 0 {
			h.spans[i].leader = s.leader
		}
		return
	}
	h.spans = append(h.spans, epochSpan{})
	copy(h.spans[i+1:], h.spans[i:])
	h.spans[i] = s
}

// unknownStart returns the newest epoch whose start is not known, if any. The first span's start is needed too:
// offsets before it have no known leader.
func (h *epochHistory) unknownStart() (int32, bool) {
	for i := len(h.spans) - 1; i >= 0; i-- {
		if h.spans[i].start < 0 {
			return h.spans[i].epoch, true
		}
	}
	return 0, false
}

// setStart records OffsetForLeaderEpoch's answer for epoch−1: the largest earlier epoch prev the leader has ended at
// end, which is where epoch began. An earlier epoch we never saw is added with an unknown leader (its own start is
// found next); none (prev < 0) means epoch is the partition's first: it began at offset 0.
func (h *epochHistory) setStart(epoch, prev int32, end int64) {
	i := sort.Search(len(h.spans), func(i int) bool { return h.spans[i].epoch >= epoch })
	if i == len(h.spans) || h.spans[i].epoch != epoch {
		return
	}
	if prev < 0 || end < 0 {
		h.spans[i].start = 0
		return
	}
	h.spans[i].start = end
	// Only the span just before matters: an earlier one already has its start, or is walked next. The very first
	// span seen needs no predecessor: offsets before it stay unknown.
	if i == 0 {
		return
	}
	if h.spans[i-1].epoch != prev {
		h.add(epochSpan{epoch: prev, leader: -1, start: -1})
	}
}

// complete reports whether every span has a known start (so that offsets from the first span's start on are placed).
func (h *epochHistory) complete() bool {
	for _, s := range h.spans {
		if s.start < 0 {
			return false
		}
	}
	return len(h.spans) > 0
}
