package latency

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Engine estimates clock offsets, corrects and classifies records, and keeps the sketches and counters. It is the
// package's entry point.
//
// Concurrency: every method is safe for concurrent use. Per-record work goes through a [Path] (one per group, topic,
// partition); a Path serialises its own records with its own mutex, so one goroutine per partition-path runs
// without contention. Host offset estimates are read by paths without locks (atomically published snapshots);
// brackets, sync exchanges and envelope updates take the host's own mutex.
type Engine struct {
	cfg    Config
	pol    policy
	bounds boundsMs
	two    windowConfig
	env    windowConfig

	hosts   atomic.Pointer[hostTable] // by slot (hosts.go); slots stored and the table grown under mu
	anchors anchorLookup              // e.anchorAt, made once for every host's envelope window

	mu    sync.Mutex // guards paths and hb's counts and free slots (and serialises host creation)
	hb    hostBook
	paths map[pathKey]*Path

	// tick is the engine's coarse clock for path eviction: Unix seconds as last set by EvictIdle (0 before). Every
	// use of a path stamps it, so eviction never reads the wall clock on the record path.
	tick    atomic.Int64
	evicted atomic.Uint64 // paths evicted (idle or over MaxPaths)
}

type pathKey struct {
	group, topic string
	partition    int32
}

// NewEngine returns an engine for cfg (defaults applied). It fails with ErrConfig on an invalid config.
func NewEngine(cfg Config) (*Engine, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("create latency engine: %w", err)
	}
	e := &Engine{cfg: cfg, bounds: boundsMs{age: durMs(cfg.Bounds.MaxAge), skew: durMs(cfg.Bounds.MaxSkew)}, pol: policy{tolMs: durMs(cfg.SkewTolerance), floorMs: durMs(cfg.UncertaintyFloor), ratio: cfg.UncertaintyRatio, driftMax: cfg.MaxDriftPPM * 1e-6}, two: cfg.twoSidedWindow(), env: cfg.envelopeWindow(),
		paths: map[pathKey]*Path{}}
	e.anchors = e.anchorAt
	ref := newHostState(cfg.ReferenceHost, e.two, e.env, e.anchors)
	ref.kind = KindReference
	hs := make(hostTable, 1, 8)
	hs[RefHost].Store(ref)
	e.hosts.Store(&hs)
	e.hb.byName.Store(cfg.ReferenceHost, ref)
	e.hb.n = 1
	return e, nil
}

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// ObserveBracket feeds one probe round trip (KindBracketed). It fails with ErrUnknownHost or ErrBadRoundTrip.
func (e *Engine) ObserveBracket(b Bracket) error {
	h := e.host(b.Host)
	if h == nil || b.Host == RefHost {
		return fmt.Errorf("observe bracket for host %d: %w", b.Host, ErrUnknownHost)
	}
	e.touchHost(h)
	bd, err := b.bound()
	if err != nil {
		return fmt.Errorf("observe bracket for %s: %w", h.name, err)
	}
	h.addTwo(bd, KindBracketed, e.two.bucketMs)
	return nil
}

// ObserveSync feeds one round-trip exchange of an instrumented host with the collector (KindSynced). It fails with
// ErrUnknownHost or ErrBadRoundTrip.
func (e *Engine) ObserveSync(x SyncExchange) error {
	h := e.host(x.Host)
	if h == nil || x.Host == RefHost {
		return fmt.Errorf("observe sync for host %d: %w", x.Host, ErrUnknownHost)
	}
	e.touchHost(h)
	bd, err := x.bound()
	if err != nil {
		return fmt.Errorf("observe sync for %s: %w", h.name, err)
	}
	h.addTwo(bd, KindSynced, e.two.bucketMs)
	return nil
}

// ReportOffset feeds an offset measured elsewhere: host − reference = offset ± uncertainty at reference time at (an
// NTP/chrony report, or the clock offset an instrumented consumer puts in its receipts). It is trusted as a bound
// of half-width uncertainty (KindReported); a negative uncertainty is an error, and an offset beyond
// Config.Bounds.MaxSkew fails with ErrImplausibleOffset and changes nothing.
func (e *Engine) ReportOffset(host HostID, offset, uncertainty time.Duration, at time.Time) error {
	h := e.host(host)
	if h == nil || host == RefHost {
		return fmt.Errorf("report offset for host %d: %w", host, ErrUnknownHost)
	}
	e.touchHost(h)
	if uncertainty < 0 {
		return fmt.Errorf("report offset for %s: negative uncertainty %v", h.name, uncertainty)
	}
	if offset > e.cfg.Bounds.MaxSkew || offset < -e.cfg.Bounds.MaxSkew {
		return fmt.Errorf("report offset %v for %s (max skew %v): %w", offset, h.name, e.cfg.Bounds.MaxSkew, ErrImplausibleOffset)
	}
	o, u := durMs(offset), durMs(uncertainty)
	h.addTwo(bound{at: timeToMs(at), lo: o - u, hi: o + u}, KindReported, e.two.bucketMs)
	return nil
}

// Offset returns the host's offset estimate at reference time at. It fails with ErrUnknownHost.
func (e *Engine) Offset(host HostID, at time.Time) (Offset, error) {
	h := e.host(host)
	if h == nil {
		return Offset{}, fmt.Errorf("offset of host %d: %w", host, ErrUnknownHost)
	}
	if host == RefHost {
		return Offset{Host: h.name, Kind: KindReference, At: at}, nil
	}
	s := h.snap.Load()
	minDelay := 0.0
	if s.kind == KindUnknown && s.env.ok && s.env.oneSided != 0 {
		minDelay = e.minOneWayMs(*e.hosts.Load())
	}
	return s.offset(h.name, timeToMs(at), minDelay), nil
}

// Offsets returns every host's estimate at reference time at, sorted by host name, the reference host included.
func (e *Engine) Offsets(at time.Time) []Offset {
	hs := *e.hosts.Load()
	minDelay := e.minOneWayMs(hs)
	atMs := timeToMs(at)
	out := make([]Offset, 0, len(hs))
	for id := range hs {
		h := hs[id].Load()
		if h == nil {
			continue
		}
		if HostID(id) == RefHost {
			out = append(out, Offset{Host: h.name, Kind: KindReference, At: at})
			continue
		}
		out = append(out, h.snap.Load().offset(h.name, atMs, minDelay))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out
}

// MinOneWayDelay returns this network's minimum one-way delay as the probe path measures it: half the narrowest
// probe round trip (send → acknowledgement) in the window of any bracketed broker, the delay NTP's symmetry
// assumption gives. ok is false when no broker is bracketed. It is what [Offset.Estimate] adds to a one-sided
// envelope.
func (e *Engine) MinOneWayDelay() (d time.Duration, ok bool) {
	ms := e.minOneWayMs(*e.hosts.Load())
	return msDuration(ms), ms > 0
}

// minOneWayMs is MinOneWayDelay in ms, 0 when unknown.
func (e *Engine) minOneWayMs(hs hostTable) float64 {
	rtt := math.Inf(1)
	for i := range hs {
		if h := hs[i].Load(); h != nil {
			rtt = math.Min(rtt, h.snap.Load().minRTTMs())
		}
	}
	if math.IsInf(rtt, 1) {
		return 0
	}
	return math.Max(rtt, 0) / 2
}

// Path returns the path of (group, topic, partition), creating it on first use. Keep it only briefly (a batch):
// its methods avoid the engine's map, but an evicted path no longer appears in snapshots. Creating a path while
// MaxPaths exist first evicts the least recently used eighth of them (by the coarse clock EvictIdle sets), so the
// cost is amortised over many creations; a path evicted and used again starts afresh, like a new group's.
func (e *Engine) Path(group, topic string, partition int32) *Path {
	k := pathKey{group, topic, partition}
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.paths[k]; ok {
		return p
	}
	if len(e.paths) >= e.cfg.MaxPaths {
		e.evictOldestLocked(max(1, e.cfg.MaxPaths/8))
	}
	p := newPath(e, k)
	p.used.Store(e.tick.Load())
	e.paths[k] = p
	return p
}

// UnorderedPath is Path for a source that observes a partition's records out of processing order (the spans path):
// its replay tracker accepts late arrivals ([ReplayTracker.AcceptLate]), so a record arriving after higher offsets
// is live, not a redelivery, when its offset was skipped and never processed.
func (e *Engine) UnorderedPath(group, topic string, partition int32) *Path {
	p := e.Path(group, topic, partition)
	p.mu.Lock()
	p.tracker.AcceptLate()
	p.mu.Unlock()
	return p
}

// evictOldestLocked removes the n least recently used paths. e.mu must be held.
func (e *Engine) evictOldestLocked(n int) {
	used := make([]int64, 0, len(e.paths))
	for _, p := range e.paths {
		used = append(used, p.used.Load())
	}
	slices.Sort(used)
	cut := used[min(n, len(used))-1] // evict paths used at or before cut, at most n of them
	for k, p := range e.paths {
		if n == 0 {
			break
		}
		if p.used.Load() <= cut {
			delete(e.paths, k)
			e.evicted.Add(1)
			n--
		}
	}
}

// EvictIdle sets the engine's coarse clock to now and removes every path not used (no record observed, no commit
// observed) for idle or longer; it returns how many it removed. It also forgets every host not used (named by Host,
// or fed a bracket, sync exchange or reported offset) for idle or longer, the reference excepted (see Host; counted
// by HostStats). The collector calls it periodically with its idle TTL. A use is stamped with the clock of the last
// EvictIdle before it, so idleness is measured to within the calling period.
func (e *Engine) EvictIdle(now time.Time, idle time.Duration) int {
	t := now.Unix()
	first := e.tick.Swap(t) == 0
	cut := t - int64(idle/time.Second)
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for k, p := range e.paths {
		if first && p.used.Load() == 0 {
			p.used.Store(t) // used before the clock was first set: count its idleness from now
			continue
		}
		if p.used.Load() < cut {
			delete(e.paths, k)
			n++
		}
	}
	e.evicted.Add(uint64(n))
	e.evictIdleHostsLocked(cut, t, first)
	return n
}

// PathStats returns how many paths the engine holds and how many it has evicted since it started.
func (e *Engine) PathStats() (paths int, evicted uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.paths), e.evicted.Load()
}

// Has reports whether the engine holds the path (it was neither evicted nor removed since its last use).
func (e *Engine) Has(group, topic string, partition int32) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.paths[pathKey{group, topic, partition}]
	return ok
}

// RemovePath forgets a path (a deleted topic or group, a partition no longer watched) so that its state and
// sketches can be collected; a later Path call starts it afresh. It reports whether the path existed. Callers that
// still hold the *Path may keep using it, but it no longer appears in snapshots.
func (e *Engine) RemovePath(group, topic string, partition int32) bool {
	k := pathKey{group, topic, partition}
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.paths[k]
	delete(e.paths, k)
	return ok
}

// CommitObservation is a group's committed offset for one partition as read by the lag exporter at At (reference
// clock). Offset -1 means the group has no commit for it.
type CommitObservation struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	At        time.Time
}

// ObserveCommit routes a commit observation to its path, creating the path unless MaxPaths exist: commits (the lag
// exporter reports every group of the cluster) never evict a path; records do. It reports whether it was routed.
func (e *Engine) ObserveCommit(c CommitObservation) bool {
	k := pathKey{c.Group, c.Topic, c.Partition}
	e.mu.Lock()
	p, ok := e.paths[k]
	if !ok && len(e.paths) < e.cfg.MaxPaths {
		p = newPath(e, k)
		p.used.Store(e.tick.Load())
		e.paths[k] = p
	}
	e.mu.Unlock()
	if p == nil {
		return false
	}
	p.ObserveCommit(c.Offset, c.At)
	return true
}

// Path is the per-(group, topic, partition) state: the replay tracker, the sketches and the counters. Its methods
// are safe for concurrent use; mu serialises them.
type Path struct {
	e   *Engine
	key pathKey

	used atomic.Int64 // the engine's tick when the path was last used (see EvictIdle)

	mu       sync.Mutex    // guards everything below
	tracker  ReplayTracker // by value: one pointer less on every record
	sk       sketches
	counters Counters
	skew     []skewCount // skew-suspected records by blamed host (at most maxSkewHosts+1 entries)
}

// newPath returns a path without sketches: they are made on its first record, so the many paths that only ever see
// commits (every group the lag exporter reports) cost a few hundred bytes each.
func newPath(e *Engine, k pathKey) *Path {
	return &Path{e: e, key: k, tracker: *NewReplayTracker()}
}

// Key returns the path's group, topic and partition.
func (p *Path) Key() (group, topic string, partition int32) {
	return p.key.group, p.key.topic, p.key.partition
}

// touch stamps the path's use with the engine's tick (a load, and a store only when the tick moved).
func (p *Path) touch() {
	if t := p.e.tick.Load(); p.used.Load() != t {
		p.used.Store(t)
	}
}

// ObserveCommit records the group's committed offset (-1: none) read at reference time at.
func (p *Path) ObserveCommit(offset int64, at time.Time) {
	p.touch()
	p.mu.Lock()
	p.tracker.ObserveCommit(offset, timeToMs(at))
	p.mu.Unlock()
}

// Replay returns the path's replay state (C30: replay flag and boundary offset for the lag exporter).
func (p *Path) Replay() ReplayState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.State()
}

// Checkpoint returns the path's replay-tracker state (see ReplayCheckpoint).
func (p *Path) Checkpoint() ReplayCheckpoint {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tracker.Checkpoint()
}

// Restore replaces the path's replay-tracker state with c: at start, before the path sees a record, from a
// checkpoint an earlier process took, so that records it re-reads keep their classification.
func (p *Path) Restore(c ReplayCheckpoint) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tracker.Restore(c)
}

// Observe validates, corrects and classifies one processed record, updates the sketches and counters, and returns
// the result. Records of a path should be fed in processing order (receipts keyed by source partition keep it).
func (p *Path) Observe(r Record) Result {
	var res Result
	p.ObserveInto(&r, &res)
	return res
}

// ObserveInto is Observe writing into *res (overwritten), for callers that reuse a Result on a hot path.
func (p *Path) ObserveInto(r *Record, res *Result) {
	p.touch()
	if hs := *p.e.hosts.Load(); !p.e.prepareFast(hs, r, res) {
		p.e.prepareGeneral(hs, r, res)
	}
	p.mu.Lock()
	if !p.sk.kept() && !p.e.cfg.NoSketches {
		p.sk = newSketches(p.e.cfg.RelativeAccuracy)
	}
	// The common case of finish (ReplayTracker.Classify's first rule for a group that is not new) in line: one call
	// less per record.
	if t := &p.tracker; !t.newGroup && (t.processedNext < 0 || r.Offset >= t.processedNext) {
		t.advance(r.Offset)
		res.Class = ClassLive
	} else {
		p.finish(r.Offset, res)
	}
	const common = 1<<StageIngest | 1<<StageDelivery | 1<<StageE2E
	if res.Flags&^(FlagWide|FlagUnsettled) == 0 && res.Class == ClassLive && res.Has == common {
		// The common live record, account's work in a straight line; a wide or unsettled one is as live.
		p.counters.Records++
		p.counters.Classes[ClassLive]++
		p.counters.LiveSamples++
		p.countInfo(res.Flags)
		res.Live = true
		if p.sk.kept() {
			p.sk.live[StageIngest].Add(res.Stages[StageIngest])
			p.sk.live[StageDelivery].Add(res.Stages[StageDelivery])
			p.sk.live[StageE2E].Add(res.Stages[StageE2E])
		}
	} else {
		p.account(res)
	}
	p.mu.Unlock()
}

// finish classifies a prepared result; p.mu must be held.
func (p *Path) finish(offset int64, res *Result) {
	// The common case, ReplayTracker.Classify's first rule for a group that is not new, without its inputs.
	if t := &p.tracker; !t.newGroup && (t.processedNext < 0 || offset >= t.processedNext) {
		t.advance(offset)
		res.Class = ClassLive
		return
	}
	c := &res.Corrected // 0 where absent
	appendMs := c[Append]
	if appendMs == 0 {
		appendMs = c[Produce]
	}
	atMs := c[Processed]
	if atMs == 0 {
		atMs = c[Commit]
	}
	if atMs == 0 {
		atMs = c[Receive]
	}
	if appendMs == 0 {
		appendMs = math.NaN()
	}
	if atMs == 0 {
		atMs = math.NaN()
	}
	var rewindAt float64
	res.Class, rewindAt = p.tracker.Classify(offset, appendMs, atMs)
	if res.Class == ClassReplay {
		if !p.tracker.rewindKnown {
			res.Flags |= FlagRewindInferred
		}
		if !math.IsNaN(atMs) {
			res.SinceRewindMs = math.Max(0, atMs-rewindAt)
		}
	}
}
