package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// Header is one record header.
type Header struct {
	Key, Value []byte
}

// Record is one consumed Kafka record, copied out of sarama's types so the collector does not import sarama.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	// Timestamp is the record's Kafka timestamp: the broker's append time on a LogAppendTime topic, else the
	// producer's CreateTime. The zero time when the record carried none (pre-0.10 format); a -1 (NO_TIMESTAMP) stamp
	// reads as 1 ms before the epoch.
	Timestamp time.Time
	// Received is when the consumer took the record from sarama (GroupConfig.Now), before it waited in a batch.
	Received time.Time
}

// HeaderValue returns the last value of the header named key, or nil.
func (r *Record) HeaderValue(key string) []byte {
	var v []byte
	for i := range r.Headers {
		if string(r.Headers[i].Key) == key {
			v = r.Headers[i].Value
			if v == nil {
				v = []byte{}
			}
		}
	}
	return v
}

// Batch is a run of consecutive records of one partition, in offset order.
type Batch struct {
	Topic     string
	Partition int32
	// Generation is the consumer-group generation the batch was read in; marks are scoped to it.
	Generation int32
	Records    []Record
	// Restart, when set (RunGroup sets it), ends the consumer-group session the batch was read in, so that every
	// partition of it is read again from its last committed offset in a new session: what a handler calls when
	// records it accepted can no longer be made durable (their offsets must not be skipped, and nothing after them
	// may be committed). Marks made before it are committed first. Safe to call from any goroutine, later; a no-op
	// once that session has ended. cause is logged.
	Restart func(cause error)
}

// BatchHandler processes one batch. It may block (that is the backpressure: while it blocks the partition is not
// read and sarama stops fetching it once its buffers fill). mark(next) records that every offset below next is
// durably processed, so it may be committed; it is safe to call from any goroutine, later, after the handler
// returned; marks from a session that has ended are ignored (the records will be delivered again). A handler error
// ends the consumer.
type BatchHandler func(ctx context.Context, b Batch, mark func(next int64)) error

// GroupConfig configures RunGroup.
type GroupConfig struct {
	Brokers []string
	// Sarama is the client config (version, TLS, SASL); RunGroup sets the consumer-group fields it needs on it and
	// it must not be shared with another client.
	Sarama *sarama.Config
	Group  string
	Topics []string
	// Oldest starts a group without commits at the log start (else at the end).
	Oldest bool
	// MaxBatch is the most records per batch (default 500); MaxWait how long a partial batch waits (default 50 ms).
	MaxBatch int
	MaxWait  time.Duration
	// ChannelBuffer is how many records sarama buffers per partition ahead of the handler (default 256, sarama's).
	// Receipt batches are large records (256 receipts each by default, up to 4,096): a smaller buffer bounds memory.
	ChannelBuffer int
	// Weight, when set, weighs each record; a batch is then also handed over as soon as its records' weights reach
	// MaxWeight (it always holds at least one record). The receipts path weighs a record by the receipts it carries,
	// so that its batches are bounded in rows, not only in records.
	Weight    func(*Record) int
	MaxWeight int
	// CommitInterval is how often marked offsets are committed (default 1 s).
	CommitInterval time.Duration
	// Now stamps Record.Received; nil is time.Now.
	Now func() time.Time
	// OnAssigned, if set, is called with the claimed partitions at the start of every session (after a rebalance).
	OnAssigned func(claims map[string][]int32)
	// Prepare, if set, is called like OnAssigned, before any record of the session is handed to the handler, with
	// the session's context. An error ends the session before it reads anything (logged; the group rejoins a second
	// later): the place to load state the new partitions' records need.
	Prepare func(ctx context.Context, claims map[string][]int32) error
	// BeforeCommit, if set, is called when a session ends (shutdown or rebalance), after the handlers returned and
	// before the session's final commit: the place to wait for in-flight batches to be acknowledged so their marks
	// make it into that commit instead of being re-read.
	BeforeCommit func()
	Logger       *slog.Logger
}

// RunGroup consumes cfg.Topics as consumer group cfg.Group until ctx is done, handing each partition's records to h
// in batches. Offsets are committed only as h marks them (at-least-once): records never marked are delivered again
// after a restart or rebalance. Kafka unreachable, at start or later, is retried. It returns nil when ctx ends, or
// the first handler error.
func RunGroup(ctx context.Context, cfg GroupConfig, h BatchHandler) error {
	cfg.setDefaults()
	cg, err := joinGroup(ctx, cfg, groupSarama(cfg))
	if cg == nil {
		return err // nil when ctx ended first
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go func() {
		for err := range cg.Errors() {
			cfg.Logger.Warn("consumer group error", "group", cfg.Group, "err", err)
		}
	}()
	consumeSessions(ctx, cg, cfg, &groupHandler{cfg: cfg, h: h, fail: fail})
	// Close commits what was marked and leaves the group.
	closeErr := cg.Close()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	if closeErr != nil {
		return fmt.Errorf("close consumer group %s: %w", cfg.Group, closeErr)
	}
	return nil
}

// setDefaults fills the zero fields that have defaults: MaxBatch 500, MaxWait 50 ms, CommitInterval 1 s, no
// Logger, Now time.Now.
func (cfg *GroupConfig) setDefaults() {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 500
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 50 * time.Millisecond
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
}

// groupSarama returns cfg.Sarama (nil: sarama's defaults with the Kafka 4 protocol) with the consumer-group fields
// RunGroup needs set: errors returned, cfg.ChannelBuffer, marked offsets auto-committed every cfg.CommitInterval,
// and a group without commits starting at the log end, or at the log start when cfg.Oldest.
func groupSarama(cfg GroupConfig) *sarama.Config {
	sc := cfg.Sarama
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	sc.Consumer.Return.Errors = true
	if cfg.ChannelBuffer > 0 {
		sc.ChannelBufferSize = cfg.ChannelBuffer
	}
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = cfg.CommitInterval
	sc.Consumer.Offsets.Initial = sarama.OffsetNewest
	if cfg.Oldest {
		sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	}
	return sc
}

// joinGroup creates the group's own client. It connects here: Kafka gone since the caller connected is waited for
// like every outage (0.5 s doubling to 30 s), not a reason to stop consuming for good. It returns (nil, nil) when
// ctx ends first, and an error only for a configuration sarama refuses (no retry mends it).
func joinGroup(ctx context.Context, cfg GroupConfig, sc *sarama.Config) (sarama.ConsumerGroup, error) {
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		cg, err := sarama.NewConsumerGroup(cfg.Brokers, cfg.Group, sc)
		if err == nil {
			return cg, nil
		}
		if ce := sarama.ConfigurationError(""); errors.As(err, &ce) {
			return nil, fmt.Errorf("start consumer group %s: %w", cfg.Group, err)
		}
		cfg.Logger.Warn("consumer group cannot reach Kafka; retrying", "group", cfg.Group, "brokers", cfg.Brokers,
			"in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(wait):
		}
	}
}

// consumeSessions runs consumer-group sessions of cg with gh until ctx ends or the group is closed. A session that
// fails is logged and followed, a second later, by the next.
func consumeSessions(ctx context.Context, cg sarama.ConsumerGroup, cfg GroupConfig, gh *groupHandler) {
	for ctx.Err() == nil {
		// Each Consume call is one session with its own context, so Batch.Restart can end it: sarama then commits
		// the marks, and the next Consume rejoins and reads from the committed offsets.
		sctx, endSession := context.WithCancelCause(ctx)
		gh.endSession.Store(&endSession)
		err := cg.Consume(sctx, cfg.Topics, gh)
		if cause := context.Cause(sctx); ctx.Err() == nil && cause != nil {
			cfg.Logger.Warn("session ended to re-read from the committed offsets", "group", cfg.Group, "cause", cause)
		}
		endSession(nil)
		if err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				return
			}
			cfg.Logger.Warn("consume", "group", cfg.Group, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

type groupHandler struct {
	cfg  GroupConfig
	h    BatchHandler
	fail context.CancelCauseFunc
	// endSession ends the current Consume call's session (set before each call).
	endSession atomic.Pointer[context.CancelCauseFunc]
}

func (g *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	if g.cfg.OnAssigned != nil {
		g.cfg.OnAssigned(sess.Claims())
	}
	if g.cfg.Prepare != nil {
		return g.cfg.Prepare(sess.Context(), sess.Claims())
	}
	return nil
}

func (g *groupHandler) Cleanup(sarama.ConsumerGroupSession) error {
	if g.cfg.BeforeCommit != nil {
		g.cfg.BeforeCommit()
	}
	return nil
}

func (g *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	topic, part := claim.Topic(), claim.Partition()
	ctx := sess.Context()
	mark := func(next int64) { sess.MarkOffset(topic, part, next, "") }
	endSession := *g.endSession.Load() // this session's: a late Restart must not end a later session
	restart := func(cause error) {
		if cause == nil {
			cause = errors.New("restart requested")
		}
		endSession(fmt.Errorf("%s/%d: %w", topic, part, cause))
	}
	batch := make([]Record, 0, g.cfg.MaxBatch)
	weight := 0 // of the records in batch, with cfg.Weight
	timer := time.NewTimer(g.cfg.MaxWait)
	timer.Stop()
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := g.h(ctx, Batch{Topic: topic, Partition: part, Generation: sess.GenerationID(), Records: batch, Restart: restart}, mark)
		batch, weight = make([]Record, 0, g.cfg.MaxBatch), 0 // the handler may keep the slice
		if err != nil && ctx.Err() == nil {
			g.fail(fmt.Errorf("handle %s/%d: %w", topic, part, err))
			return err
		}
		return nil
	}
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return flush()
			}
			if len(batch) == 0 {
				timer.Reset(g.cfg.MaxWait)
			}
			rec := fromSarama(msg)
			rec.Received = g.cfg.Now()
			batch = append(batch, rec)
			if g.cfg.Weight != nil {
				weight += g.cfg.Weight(&batch[len(batch)-1])
			}
			if len(batch) >= g.cfg.MaxBatch || (g.cfg.Weight != nil && weight >= g.cfg.MaxWeight) {
				timer.Stop()
				if err := flush(); err != nil {
					return err
				}
			}
		case <-timer.C:
			if err := flush(); err != nil {
				return err
			}
		case <-ctx.Done():
			// Unflushed records were never marked: they are delivered again to the partition's next owner.
			return nil
		}
	}
}

func fromSarama(m *sarama.ConsumerMessage) Record {
	r := Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Timestamp}
	if len(m.Headers) > 0 {
		r.Headers = make([]Header, 0, len(m.Headers))
		for _, h := range m.Headers {
			if h != nil {
				r.Headers = append(r.Headers, Header{Key: h.Key, Value: h.Value})
			}
		}
	}
	return r
}
