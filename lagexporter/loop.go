package lagexporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
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

// cacheKey is a record probe's question: where it was read (topic incarnation, partition, offset) and whether for
// read_committed. The answer's RecordProbe is rebuilt from it and the entry's cachedProbe (cachedProbe.probe).
type cacheKey struct {
	probeTopic
	probeSpot
}

type probeTopic struct{ id, name string }

type probeSpot struct {
	offset        int64
	partition     int32
	readCommitted bool
}

func probeCacheKey(topicID, topic string, partition int32, offset int64, iso Isolation) cacheKey {
	return cacheKey{probeTopic{id: topicID, name: topic},
		probeSpot{offset: offset, partition: partition, readCommitted: iso.OrDefault() == ReadCommitted}}
}

// cachedAt returns k's entry.
func (l *Loop) cachedAt(k cacheKey) (cachedProbe, bool) {
	e, ok := l.cache[k.probeTopic][k.probeSpot]
	return e, ok
}

// setCached sets k's entry.
func (l *Loop) setCached(k cacheKey, e cachedProbe) {
	m := l.cache[k.probeTopic]
	if m == nil {
		m = map[probeSpot]cachedProbe{}
		l.cache[k.probeTopic] = m
	}
	m[k.probeSpot] = e
}

// cachedProbe is a cache entry: the answer of a RecordProbe without what its key holds (and without Error: answers
// with one are not cached), 64 B instead of the probe's 168 under a 16-B key instead of 64, and the readRecords call
// that last used it. The map is updated in place, so a steady cycle allocates nothing for it. An answer the compact
// form cannot give back identically (a Timestamp not in whole milliseconds on time.Local or UTC, a count beyond
// int32, an Isolation neither empty nor the key's) is kept whole in Loop.wide, flagged probeWide.
type cachedProbe struct {
	firstOffset, scannedTo, timestampOffset, gapOffsets int64
	timestampMs                                         int64 // Timestamp as Unix milliseconds, unless probeNoTime
	clock                                               *AppendClock
	missing, wrongUnit                                  int32
	used                                                uint32 // probeSeq of the last call that used it (wraps)
	flags                                               uint8
}

const (
	probeAnswered    uint8 = 1 << iota // not a placeholder awaiting the answer
	probeWide                          // the answer is in Loop.wide
	probeGap                           // RecordProbe.Gap
	probeNoTime                        // Timestamp is the zero time
	probeUTC                           // Timestamp's location is UTC (else time.Local)
	probeNoIsolation                   // Isolation is empty (Kafka's default, read_uncommitted)
)

// packProbe returns r's compact cache entry, and false when the entry would not give r back identically.
func packProbe(k cacheKey, r *RecordProbe, used uint32) (cachedProbe, bool) {
	c := cachedProbe{firstOffset: r.FirstOffset, scannedTo: r.ScannedTo, timestampOffset: r.TimestampOffset,
		gapOffsets: r.GapOffsets, clock: r.AppendClock, missing: int32(r.MissingTimestamps),
		wrongUnit: int32(r.WrongUnitTimestamps), used: used, flags: probeAnswered}
	if r.Gap {
		c.flags |= probeGap
	}
	switch {
	case r.Timestamp.IsZero():
		c.flags |= probeNoTime
	case r.Timestamp.Location() == time.UTC:
		c.flags |= probeUTC
		c.timestampMs = r.Timestamp.UnixMilli()
	default:
		c.timestampMs = r.Timestamp.UnixMilli()
	}
	if r.Isolation == "" {
		c.flags |= probeNoIsolation
	}
	return c, c.probe(k) == *r // every field is compared: time.Time's wall, ext and location, the clock's pointer
}

// probe is the answer c holds for k (not for a probeWide entry).
func (c *cachedProbe) probe(k cacheKey) RecordProbe {
	r := RecordProbe{Topic: k.name, TopicID: k.id, Partition: k.partition, Offset: k.offset,
		Isolation: ReadUncommitted, FirstOffset: c.firstOffset, ScannedTo: c.scannedTo,
		TimestampOffset: c.timestampOffset, Gap: c.flags&probeGap != 0, GapOffsets: c.gapOffsets,
		MissingTimestamps: int(c.missing), WrongUnitTimestamps: int(c.wrongUnit), AppendClock: c.clock}
	if k.readCommitted {
		r.Isolation = ReadCommitted
	}
	if c.flags&probeNoIsolation != 0 {
		r.Isolation = ""
	}
	if c.flags&probeNoTime == 0 {
		r.Timestamp = time.UnixMilli(c.timestampMs) // time.Local, as the reader's (sarama's) record times
		if c.flags&probeUTC != 0 {
			r.Timestamp = r.Timestamp.UTC()
		}
	}
	return r
}

// cached returns the answer of the entry c of k.
func (l *Loop) cached(k cacheKey, c *cachedProbe) RecordProbe {
	if c.flags&probeWide != 0 {
		return l.wide[k]
	}
	return c.probe(k)
}

// dropCached deletes k's entry c.
func (l *Loop) dropCached(k cacheKey, c *cachedProbe) {
	if c.flags&probeWide != 0 {
		delete(l.wide, k)
	}
	delete(l.cache[k.probeTopic], k.probeSpot) // an emptied topic's map goes at the end of readRecords
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
	// Cluster with a Requests() int64 method, as internal/kafka's reader has); 0 otherwise.
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

// observe reads one observation: metadata and groups, then committed offsets, then end offsets, then records. It
// also returns the invalid timestamps the records read this cycle met. On error (metadata or the group list could not
// be read at all) obs.Failed names the read that failed.
func (l *Loop) observe(ctx context.Context) (*Observation, map[TimestampProblem]uint64, error) {
	obs := &Observation{Cluster: l.cfg.Cluster}
	topics, err := l.cluster.Metadata(ctx)
	obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindMetadata)...)
	if topics == nil && err != nil {
		obs.Failed = ErrKindMetadata
		return obs, nil, fmt.Errorf("read topic metadata: %w", err)
	}
	groups, err := l.cluster.Groups(ctx)
	obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindGroups)...)
	if groups == nil && err != nil {
		obs.Failed = ErrKindGroups
		return obs, nil, fmt.Errorf("list groups: %w", err)
	}
	names := make([]string, 0, len(groups))
	byName := make(map[string]int, len(groups))
	for _, g := range groups {
		if l.cfg.GroupAllowed(g.Group) {
			byName[g.Group] = len(obs.Groups)
			obs.Groups = append(obs.Groups, g)
			names = append(names, g.Group)
		}
	}

	// Committed offsets first (C03): an end offset read after a commit is >= that commit.
	if len(names) > 0 {
		offs, err := l.cluster.CommittedOffsets(ctx, names)
		obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindCommitted)...)
		got := make(map[string]bool, len(offs))
		for _, o := range offs {
			if i, ok := byName[o.Group]; ok {
				obs.Groups[i].Offsets, obs.Groups[i].Error = o.Offsets, o.Error
				if o.Reset != "" {
					obs.Groups[i].Reset = o.Reset
				}
				got[o.Group] = true
			}
		}
		for i := range obs.Groups {
			if !got[obs.Groups[i].Group] && obs.Groups[i].Error == "" {
				obs.Groups[i].Error = "committed offsets not returned"
			}
		}
	}

	// End offsets of the topics some group consumes; a group whose commits failed this cycle keeps its last scope, so
	// that its last values can be shown (stale) against current end offsets.
	inScope := map[string]bool{}
	scopes := make(map[string][]string, len(obs.Groups))
	var scope []string
	for i := range obs.Groups {
		g := &obs.Groups[i]
		sc := l.scopes[g.Group]
		if g.Error == "" {
			// a sorted slice per group, not a map (~250 B for one topic); last cycle's when it is the same
			if scope = scopeNames(scope[:0], g); !slices.Equal(scope, sc) {
				sc = slices.Clone(scope)
			}
		}
		scopes[g.Group] = sc
		for _, t := range sc {
			inScope[t] = true
		}
	}
	l.scopes = scopes
	var want []TopicObservation
	for _, t := range topics {
		if inScope[t.Topic] && l.cfg.TopicAllowed(t.Topic) {
			want = append(want, t)
		}
	}
	if len(want) > 0 {
		listed, err := l.cluster.ListOffsets(ctx, want)
		obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindListOffsets)...)
		obs.Topics = listed
	}
	obs.Time = l.now()

	var invalid map[TimestampProblem]uint64
	if *l.cfg.ReadRecordTimestamps {
		invalid = l.readRecords(ctx, obs)
	}
	return obs, invalid, nil
}

func cmpPartition(a, b PartitionObservation) int { return cmp.Compare(a.Partition, b.Partition) }

// scopeNames appends to dst the topics a group is measured on, sorted and each once: those it has commits for and
// those assigned to its members (a newly assigned partition without a commit is in scope, case C10).
func scopeNames(dst []string, g *GroupObservation) []string {
	for i := range g.Offsets {
		if t := g.Offsets[i].Topic; len(dst) == 0 || dst[len(dst)-1] != t {
			dst = append(dst, t)
		}
	}
	for i := range g.Members {
		for t := range memberTopics(&g.Members[i]) {
			dst = append(dst, t)
		}
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

// memberTopics yields the topics a member owns or is the target of (KIP-848 and streams groups move partitions in
// steps: a partition on its way to a member is in the group's scope before its first commit). A topic in both is
// yielded twice; nothing is allocated.
func memberTopics(m *Member) iter.Seq[string] {
	return func(yield func(string) bool) {
		for t := range m.Assignment {
			if !yield(t) {
				return
			}
		}
		for t := range m.Target {
			if !yield(t) {
				return
			}
		}
	}
}

// readRecords asks for the first unconsumed record of every lagging group-partition whose answer is not cached, and
// puts every answer the evaluator needs (cached or new) into obs.Records. It returns the invalid timestamps the new
// answers met (cached answers were counted when they were read).
func (l *Loop) readRecords(ctx context.Context, obs *Observation) map[TimestampProblem]uint64 {
	l.probeSeq++
	seq := l.probeSeq
	reqs, unfinished := l.recordRequests(obs, seq)
	invalid := map[TimestampProblem]uint64{}
	if len(reqs) > 0 {
		got, err := l.cluster.ReadRecords(ctx, reqs)
		obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindRecords)...)
		l.absorbRecords(got, unfinished, seq, obs.Time, invalid)
	}
	obs.Records = l.cycleRecords(seq, obs.Time)
	return invalid
}

// recordRequests walks every group's partitions with a backlog and returns the reads this cycle needs: one per
// (topic incarnation, partition, first unconsumed offset, isolation) that the cache cannot answer, each marked in
// the cache as used in cycle seq. unfinished holds last cycle's answers that are asked again (no valid timestamp
// yet), so that their timestamp problems are counted once.
func (l *Loop) recordRequests(obs *Observation, seq uint32) ([]RecordRequest, map[cacheKey]RecordProbe) {
	byTopic := make(map[string]*TopicObservation, len(obs.Topics)) // partitions in order (the reader's order)
	for i := range obs.Topics {
		t := &obs.Topics[i]
		if !slices.IsSortedFunc(t.Partitions, cmpPartition) {
			cp := *t
			cp.Partitions = slices.Clone(t.Partitions)
			slices.SortStableFunc(cp.Partitions, cmpPartition)
			t = &cp
		}
		byTopic[t.Topic] = t
	}
	unfinished := map[cacheKey]RecordProbe{}
	var reqs []RecordRequest
	var offs []CommittedOffset
	var names []string
	for gi := range obs.Groups {
		g := &obs.Groups[gi]
		if g.Error != "" {
			continue
		}
		iso, reset := l.cfg.GroupSettingsOf(g)
		// the group's commits in (topic, partition) order, walked alongside its partitions (no map per group)
		offs = g.Offsets
		if !slices.IsSortedFunc(offs, cmpOffset) {
			offs = slices.Clone(offs)
			slices.SortStableFunc(offs, cmpOffset)
		}
		names = scopeNames(names[:0], g)
		oi := 0
		for _, topic := range names {
			t := byTopic[topic]
			if t == nil {
				continue
			}
			for _, p := range t.Partitions {
				if !p.Known() {
					continue
				}
				var c int64
				has := false
				for oi < len(offs) && cmpTP(offs[oi].Topic, offs[oi].Partition, topic, p.Partition) <= 0 {
					if offs[oi].Topic == topic && offs[oi].Partition == p.Partition {
						c, has = offs[oi].Offset, true
					}
					oi++
				}
				in := PartitionInput{HasCommit: has, Committed: c, OffsetsKnown: true, LogStart: p.LogStart,
					HighWatermark: p.HighWatermark, LastStable: p.LastStable, Isolation: iso, Reset: reset}
				if req, ok := l.recordRequest(t, p.Partition, in, seq, unfinished); ok {
					reqs = append(reqs, req)
				}
			}
		}
	}
	return reqs, unfinished
}

// recordRequest decides one partition's read for a group waiting at in.Start(): none when nothing is unconsumed,
// when another group already asked for the same offset this cycle, or when the cache holds a final answer (a valid
// timestamp, or a scan that reached the end); else the read, with a placeholder in the cache.
func (l *Loop) recordRequest(t *TopicObservation, partition int32, in PartitionInput, seq uint32,
	unfinished map[cacheKey]RecordProbe) (RecordRequest, bool) {
	start, end := in.Start(), in.End()
	if start >= end {
		return RecordRequest{}, false
	}
	k := probeCacheKey(t.ID, t.Topic, partition, start, in.Isolation)
	e, ok := l.cachedAt(k)
	if ok && e.used == seq {
		return RecordRequest{}, false // another group waits at the same offset
	}
	if ok {
		if e.firstOffset >= 0 && e.timestampOffset >= 0 || e.scannedTo >= end {
			e.used = seq
			l.setCached(k, e)
			return RecordRequest{}, false
		}
		unfinished[k] = l.cached(k, &e)
		if e.flags&probeWide != 0 {
			delete(l.wide, k)
		}
	}
	l.setCached(k, cachedProbe{used: seq}) // placeholder, replaced by the answer
	return RecordRequest{Topic: t.Topic, TopicID: t.ID, Partition: partition, Offset: start, End: end,
		Isolation: in.Isolation}, true
}

// absorbRecords puts the reads' answers into the cache for cycle seq and adds to invalid the timestamp problems they
// found (for an answer read again, only the stamps it got further to).
func (l *Loop) absorbRecords(got []RecordProbe, unfinished map[cacheKey]RecordProbe, seq uint32, now time.Time,
	invalid map[TimestampProblem]uint64) {
	for _, r := range got {
		k := probeCacheKey(r.TopicID, r.Topic, r.Partition, r.Offset, r.Isolation)
		if e, ok := l.cachedAt(k); ok {
			l.dropCached(k, &e) // a placeholder, or an answer given twice (the last one counts)
		}
		if r.Error != "" {
			continue
		}
		e, exact := packProbe(k, &r, seq)
		if !exact { // the offsets stay in e too: the next call decides on them whether to ask again
			e.flags |= probeWide
			l.wide[k] = r
		}
		l.setCached(k, e)
		prev := unfinished[k]
		invalid[TimestampMissing] += uint64(max(r.MissingTimestamps-prev.MissingTimestamps, 0))
		invalid[TimestampWrongUnit] += uint64(max(r.WrongUnitTimestamps-prev.WrongUnitTimestamps, 0))
		if r.TimestampOffset >= 0 && ValidRecordTimestamp(r.Timestamp) && r.Timestamp.After(now) {
			invalid[TimestampFuture]++
		}
	}
}

// cycleRecords returns the answers cycle seq used, their append clocks read afresh, and drops every other entry of
// the cache (not needed this cycle, or never answered).
func (l *Loop) cycleRecords(seq uint32, now time.Time) []RecordProbe {
	n := 0
	for _, m := range l.cache {
		n += len(m)
	}
	out := make([]RecordProbe, 0, n)
	for t, m := range l.cache {
		for s, e := range m {
			k := cacheKey{t, s}
			if e.used != seq || e.flags&probeAnswered == 0 { // not needed this cycle, or no answer
				l.dropCached(k, &e)
				continue
			}
			out = append(out, l.refreshed(l.cached(k, &e), now))
		}
		if len(m) == 0 {
			delete(l.cache, t)
		}
	}
	return out
}

// refreshed is a cached answer with its AppendClock's offset read afresh (when the loop has clocks).
func (l *Loop) refreshed(rp RecordProbe, now time.Time) RecordProbe {
	if rp.AppendClock != nil && l.clocks != nil {
		// The offset is read afresh every cycle (a cached answer says only whose clock it was), and recorded
		// with the observation so that lag eval, which has no clocks, sees what this cycle saw.
		c := AppendClock{Broker: rp.AppendClock.Broker}
		if c.Broker >= 0 {
			c.Offset, c.Uncertainty, c.Known = l.clocks(c.Broker, now)
		}
		rp.AppendClock = &c
	}
	return rp
}
