package lagexporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Loop is the poll loop: every Config.PollInterval it reads the cluster through a Cluster, evaluates the observation
// and publishes an immutable Snapshot. Readers get the latest snapshot with Latest, or each new one with Subscribe;
// the Prometheus collector (package promexport) serves the latest one, so a scrape never calls Kafka.
type Loop struct {
	cfg     *Config
	cluster Cluster
	now     func() time.Time
	eval    *Evaluator

	latest atomic.Pointer[Snapshot]
	health health

	// cache holds record probes that are facts about the immutable log, keyed by topic incarnation; after every
	// cycle it holds only the entries that cycle used, so at most one per lagging group-partition.
	// The map is per topic incarnation, so that an entry's key is 16 B, not a copy of the topic's name and id.
	cache    map[probeTopic]map[probeSpot]cachedProbe
	wide     map[cacheKey]RecordProbe // the answers of cache's probeWide entries
	probeSeq uint32                   // readRecords calls (wrapping), the stamp of the entries a call used

	// scopes holds each group's topics from the last cycle that read its commits, sorted (scopeNames).
	scopes map[string][]string

	// record, when set, receives every cycle's observation (tidemark lag record).
	record func(*Observation) error

	// clocks, when set, answers brokers' clock offsets (the collector's probes): LogAppendTime record reads are
	// corrected with them.
	clocks BrokerClocks

	mu   sync.Mutex // guards subs
	subs map[chan *Snapshot]struct{}
}

// health is the exporter's own health; mu guards every field.
type health struct {
	mu                sync.Mutex
	cycles            uint64
	errors            map[ErrorKind]uint64
	invalidTimestamps map[TimestampProblem]uint64
	partitionErrors   map[PartitionErrorKey]uint64
	lastDuration      time.Duration
	lastEval          time.Duration
	lastSuccess       time.Time
}

// NewLoop returns a loop over cluster. cfg must have passed Validate; now is the clock (time.Now in production, the
// timeline's clock under eval). To serve its snapshots on /metrics, register promexport.NewCollector(cfg, loop) (or
// use promexport.Register).
func NewLoop(cfg *Config, cluster Cluster, now func() time.Time) (*Loop, error) {
	if !cfg.compiled {
		return nil, errors.New("new lag loop: config not validated (call SetDefaults and Validate)")
	}
	l := &Loop{cfg: cfg, cluster: cluster, now: now, eval: NewEvaluator(cfg),
		cache: map[probeTopic]map[probeSpot]cachedProbe{}, wide: map[cacheKey]RecordProbe{},
		subs: map[chan *Snapshot]struct{}{}}
	l.health.errors = map[ErrorKind]uint64{}
	l.health.invalidTimestamps = map[TimestampProblem]uint64{}
	l.health.partitionErrors = map[PartitionErrorKey]uint64{}
	return l, nil
}

// Health is the exporter's own health, as of the last cycle.
type Health struct {
	Cycles       uint64               // cycles run, successful or not
	Errors       map[ErrorKind]uint64 // cycle errors by kind, since start
	LastDuration time.Duration        // duration of the last cycle's cluster reads
	// LastEvaluation is the duration of the last published cycle's evaluation (status rules, aggregates), after its
	// reads; LastDuration + LastEvaluation is the cycle's whole time.
	LastEvaluation time.Duration
	LastSuccess    time.Time // end of the last cycle that published a snapshot; zero before the first
	// InvalidTimestamps counts the record timestamps the exporter met and did not use, by problem, since start: each
	// record read counts the stamps it skipped before the first valid one, and a first valid one that is in the
	// future (once, when the record is read; cached answers are not counted again).
	InvalidTimestamps map[TimestampProblem]uint64
	// PartitionErrors counts, per partition and error code, the consecutive cycles up to the last one in which the
	// partition's offsets could not be read. A partition read successfully leaves the map, so only partitions that
	// are failing now have an entry (bounded cardinality).
	PartitionErrors map[PartitionErrorKey]uint64
	// Requests is the number of Kafka requests the Cluster sent since the loop started, when it counts them (a
	// Cluster with a Requests() int64 method, as internal/kafka/lagread's reader has); 0 otherwise.
	Requests uint64
}

// PartitionErrorKey names a failing partition and the code of its failure (PartitionObservation.ErrorCode).
type PartitionErrorKey struct {
	Topic     string
	Partition int32
	Code      string
}

// requestCounter is implemented by a Cluster that counts the Kafka requests it sends.
type requestCounter interface{ Requests() int64 }

// Health returns a copy of the loop's health counters.
func (l *Loop) Health() Health {
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := Health{Cycles: h.cycles, Errors: maps.Clone(h.errors), LastDuration: h.lastDuration, LastEvaluation: h.lastEval,
		LastSuccess: h.lastSuccess, InvalidTimestamps: maps.Clone(h.invalidTimestamps), PartitionErrors: maps.Clone(h.partitionErrors)}
	if rc, ok := l.cluster.(requestCounter); ok {
		out.Requests = uint64(max(rc.Requests(), 0))
	}
	return out
}

// SetRecorder makes every cycle hand its observation to fn (e.g. to append it to a timeline file). Call before Run.
func (l *Loop) SetRecorder(fn func(*Observation) error) { l.record = fn }

// SetBrokerClocks makes every cycle read, for each LogAppendTime record it uses, the appending broker's clock
// offset from fn (RecordProbe.AppendClock; docs/lag.md, "Time lag across a failover"). Call before Run.
func (l *Loop) SetBrokerClocks(fn BrokerClocks) { l.clocks = fn }

// Latest returns the last published snapshot, or nil before the first cycle completed.
func (l *Loop) Latest() *Snapshot { return l.latest.Load() }

// Subscribe returns a channel that receives every new snapshot, and a function that cancels the subscription. A
// subscriber that does not keep up misses snapshots (the channel holds buf; sends never block the loop).
func (l *Loop) Subscribe(buf int) (<-chan *Snapshot, func()) {
	ch := make(chan *Snapshot, max(buf, 1))
	l.mu.Lock()
	l.subs[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}
}

// Run runs a cycle immediately and then every PollInterval until ctx is done; it returns nil on cancellation. A
// failed cycle is counted and the last good snapshot stays published.
func (l *Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.PollInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, l.cfg.CycleTimeout)
		_, _ = l.Cycle(cctx) // errors are counted in health and carried in the snapshot
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Cycle runs one poll cycle: read, evaluate, publish. It returns the new snapshot, or an error (and publishes
// nothing) when not even the topic metadata and group list could be read. Partial failures are in Snapshot.Errors.
func (l *Loop) Cycle(ctx context.Context) (*Snapshot, error) {
	start := l.now()
	obs, invalid, err := l.observe(ctx)
	dur := l.now().Sub(start)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !hasKind(obs.Errors, ErrKindCycleTimeout) {
		obs.Errors = append(obs.Errors, CycleError{Kind: ErrKindCycleTimeout, Message: "cycle deadline exceeded; unread parts are marked"})
	}
	// the timeout goes last, as the live loop finds it; a replayed timeline hands it over with the first call
	slices.SortStableFunc(obs.Errors, func(a, b CycleError) int {
		return cmp.Compare(b2i(a.Kind == ErrKindCycleTimeout), b2i(b.Kind == ErrKindCycleTimeout))
	})
	if err != nil {
		// nothing is published, but the failed cycle is recorded, so that a replayed incident counts it too
		if obs.Time.IsZero() {
			obs.Time = l.now()
		}
		var rerr error
		if l.record != nil {
			rerr = l.record(obs)
		}
		l.count(obs, invalid, dur, false)
		if rerr != nil {
			return nil, errors.Join(err, fmt.Errorf("record observation: %w", rerr))
		}
		return nil, err
	}
	evalStart := l.now()
	snap := l.eval.Apply(obs)
	snap.CycleDuration = dur
	evalDur := l.now().Sub(evalStart)
	if u, ok := l.cluster.(UnsupportedReporter); ok {
		snap.Unsupported = u.Unsupported()
	}
	if l.record != nil {
		if rerr := l.record(obs); rerr != nil {
			return nil, fmt.Errorf("record observation: %w", rerr)
		}
	}
	l.latest.Store(snap)
	l.count(obs, invalid, dur, true)
	l.health.mu.Lock()
	l.health.lastEval = evalDur
	l.health.mu.Unlock()
	l.mu.Lock()
	for ch := range l.subs {
		select {
		case ch <- snap:
		default:
		}
	}
	l.mu.Unlock()
	return snap, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func hasKind(errs []CycleError, k ErrorKind) bool {
	for _, e := range errs {
		if e.Kind == k {
			return true
		}
	}
	return false
}

// count updates the health counters with one cycle: its errors by kind, the invalid timestamps its record reads met,
// and the partitions whose offsets failed (a partition that did not fail this cycle leaves PartitionErrors).
func (l *Loop) count(obs *Observation, invalid map[TimestampProblem]uint64, dur time.Duration, ok bool) {
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cycles++
	h.lastDuration = dur
	for _, e := range obs.Errors {
		h.errors[e.Kind]++
	}
	for k, n := range invalid {
		h.invalidTimestamps[k] += n
	}
	failing := map[PartitionErrorKey]bool{}
	for _, t := range obs.Topics {
		for _, p := range t.Partitions {
			if p.Known() {
				continue
			}
			code := p.ErrorCode
			if code == "" {
				code = ErrCodeUnknown
			}
			k := PartitionErrorKey{t.Topic, p.Partition, code}
			failing[k] = true
			h.partitionErrors[k]++
		}
	}
	for k := range h.partitionErrors {
		if !failing[k] {
			delete(h.partitionErrors, k)
		}
	}
	if ok {
		h.lastSuccess = l.now()
	}
}
