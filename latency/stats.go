package latency

import (
	"math"
	"math/bits"
	"sort"
)

// Counters are a path's (or, summed, the engine's) record counts. All are monotonic totals.
type Counters struct {
	Records uint64
	// Invalid counts rejected stamps by moment and reason; Invalid[Produce][ReasonMissing] is C27's
	// missing_timestamp_total.
	Invalid [NumMoments][NumReasons]uint64
	Classes [NumClasses]uint64 // records per class; Classes[ClassReplay] is C30's replayed_records_total
	// LiveSamples counts records that fed the live sketches.
	LiveSamples uint64
	// LiveStages counts stages of flagged live records that still fed the live sketches (Result.Trusted).
	LiveStages uint64
	// SkewSuspected counts records flagged FlagSkewSuspected (an offset unknown or ambiguous, or an order violated
	// beyond the uncertainty: the stages resting on it are kept out of live percentiles).
	SkewSuspected uint64
	OffsetUnknown uint64
	Envelope      uint64
	CommitBound   uint64
	// Unsettled counts records flagged FlagUnsettled: a cross-clock stage rested on an offset with no drift fit yet
	// (warm-up) and its uncertainty exceeded the accuracy target. They feed the live percentiles with their intervals.
	Unsettled uint64
	// Wide counts records flagged FlagWide: a cross-clock stage's uncertainty exceeded max(UncertaintyFloor,
	// UncertaintyRatio × stage). They feed the live percentiles with their intervals.
	Wide uint64
	// Projected counts records flagged FlagProjected: the monotone projection moved a stage's end point beyond that
	// end's own uncertainty, so that stage stayed out of live percentiles.
	Projected uint64
	// UnitCorrected counts stamps Config.FixUnits converted to their real unit, by moment and by the reason they
	// would have been rejected with (ReasonMicros, ReasonNanos).
	UnitCorrected [NumMoments][NumReasons]uint64
}

func (c *Counters) add(o *Counters) {
	c.Records += o.Records
	for m := range c.Invalid {
		for r := range c.Invalid[m] {
			c.Invalid[m][r] += o.Invalid[m][r]
		}
	}
	for k := range c.Classes {
		c.Classes[k] += o.Classes[k]
	}
	c.LiveSamples += o.LiveSamples
	c.LiveStages += o.LiveStages
	c.SkewSuspected += o.SkewSuspected
	c.OffsetUnknown += o.OffsetUnknown
	c.Envelope += o.Envelope
	c.CommitBound += o.CommitBound
	c.Unsettled += o.Unsettled
	c.Wide += o.Wide
	c.Projected += o.Projected
	for m := range c.UnitCorrected {
		for r := range c.UnitCorrected[m] {
			c.UnitCorrected[m][r] += o.UnitCorrected[m][r]
		}
	}
}

// sketches are a path's latency distributions, all in ms; all nil before the path's first record, and always with
// Config.NoSketches (kept reports which).
type sketches struct {
	live        [NumStages]*Sketch // live, unflagged records only
	sinceRewind *Sketch            // replays: processed − rewind time
	e2eBound    *Sketch            // live commit-bounded records: e2e upper bound
}

// kept reports whether the sketches exist (every sketch is made at once).
func (s *sketches) kept() bool { return s.sinceRewind != nil }

func newSketches(acc float64) sketches {
	mk := func() *Sketch {
		s, err := NewSketch(acc)
		if err != nil {
			panic(err) // unreachable: Config.Validate checked acc
		}
		return s
	}
	var s sketches
	for i := range s.live {
		s.live[i] = mk()
	}
	s.sinceRewind, s.e2eBound = mk(), mk()
	return s
}

// account updates counters and sketches for one result and sets res.Live; p.mu must be held.
func (p *Path) account(res *Result) {
	if p.count(res) && p.sk.kept() {
		for has := res.Has; has != 0; has &= has - 1 {
			s := bits.TrailingZeros8(has)
			p.sk.live[s].Add(res.Stages[s])
		}
	}
}

// count updates the counters and the non-live sketches for one result, sets res.Live and reports it; p.mu must be
// held.
func (p *Path) count(res *Result) bool {
	c := &p.counters
	c.Records++
	if res.Flags == 0 && res.Class == ClassLive { // the common case, in one branch
		c.Classes[ClassLive]++
		c.LiveSamples++
		res.Live = true
		return true
	}
	if res.Flags&FlagInvalidStamp != 0 {
		for m, why := range res.Invalid {
			if why != ReasonOK {
				c.Invalid[m][why]++
			}
		}
	}
	c.Classes[res.Class]++
	if res.Flags&FlagSkewSuspected != 0 {
		c.SkewSuspected++
		for i := 0; i < res.NumSkewHosts; i++ {
			p.blame(p.e.HostName(res.SkewHosts[i]))
		}
	}
	if res.Flags&FlagOffsetUnknown != 0 {
		c.OffsetUnknown++
	}
	if res.Flags&FlagEnvelope != 0 {
		c.Envelope++
	}
	if res.Flags&FlagCommitBound != 0 {
		c.CommitBound++
	}
	p.countInfo(res.Flags)
	if res.Flags&FlagProjected != 0 {
		c.Projected++
	}
	if res.Flags&FlagUnitCorrected != 0 {
		for m, why := range res.UnitFixed {
			if why != ReasonOK {
				c.UnitCorrected[m][why]++
			}
		}
	}
	switch {
	case res.Class == ClassReplay:
		if !math.IsNaN(res.SinceRewindMs) && p.sk.kept() {
			p.sk.sinceRewind.Add(res.SinceRewindMs)
		}
	case res.Class != ClassLive || res.Flags&FlagCommitBound != 0 && res.Flags&UntrustFlags != 0:
	case res.Flags&UntrustFlags != 0:
		// A live record with a flagged pair: its stages that do not rest on that pair are still right.
		for has := res.Has &^ res.Untrusted; has != 0 && p.sk.kept(); has &= has - 1 {
			s := bits.TrailingZeros8(has)
			p.sk.live[s].Add(res.Stages[s])
		}
		c.LiveStages += uint64(bits.OnesCount8(res.Has &^ res.Untrusted))
	case res.Flags&FlagCommitBound != 0:
		if v, ok := res.Stage(StageE2E); ok && p.sk.kept() {
			p.sk.e2eBound.Add(v)
		}
	default:
		res.Live = true
		c.LiveSamples++
	}
	return res.Live
}

// countInfo counts the flags that report an interval's width (FlagWide, FlagUnsettled); p.mu must be held. It has
// no branch: whether a stage is wide depends on each record's own lengths, which no branch predictor foresees.
func (p *Path) countInfo(f Flags) {
	p.counters.Unsettled += uint64(f&FlagUnsettled) / uint64(FlagUnsettled)
	p.counters.Wide += uint64(f&FlagWide) / uint64(FlagWide)
}

// maxSkewHosts bounds the hosts a path counts skew-suspected records of by name: blame on further hosts is summed
// under OtherHosts, so a path's state does not grow with the hosts that pass through it.
const maxSkewHosts = 8

// OtherHosts is the PathSnapshot.SkewSuspected key that sums blame on hosts beyond the first eight a path blamed, and
// on a host forgotten (expired) before its record was counted.
const OtherHosts = "(other)"

// skewCount is a path's count of skew-suspected records blamed on one host, by name: a host's counts stay with its
// name, never with an id a later host may reuse.
type skewCount struct {
	host string
	n    uint64
}

// blame counts one skew-suspected record against the named host; p.mu must be held.
func (p *Path) blame(host string) {
	if host == "" {
		host = OtherHosts
	}
	for i := range p.skew {
		if p.skew[i].host == host {
			p.skew[i].n++
			return
		}
	}
	if len(p.skew) >= maxSkewHosts && host != OtherHosts {
		p.blame(OtherHosts)
		return
	}
	p.skew = append(p.skew, skewCount{host, 1})
}

// PathSnapshot is one path's copied state.
type PathSnapshot struct {
	Group     string
	Topic     string
	Partition int32
	Counters  Counters
	Replay    ReplayState
	// Live holds copies of the live stage sketches (ms); SinceRewind the replays' time since the rewind; E2EUpperBound
	// the commit-bounded e2e of live records.
	Live          [NumStages]*Sketch
	SinceRewind   *Sketch
	E2EUpperBound *Sketch
	// SkewSuspected counts skew-suspected records by blamed host name (C25's clock_skew_suspected_total{host}); past
	// eight hosts on one path, the rest are summed under OtherHosts.
	SkewSuspected map[string]uint64
}

// Snapshot copies the path's counters, replay state and sketches.
func (p *Path) Snapshot() PathSnapshot { return p.snapshot(false) }

// Flush is Snapshot that also empties the path's sketches, for per-interval rollups (e.g. one minute's quantile
// states): the returned sketches hold what was observed since the previous Flush. Counters stay cumulative, as
// Prometheus counters are. It also bounds a long-lived path's sketch memory.
func (p *Path) Flush() PathSnapshot { return p.snapshot(true) }

func (p *Path) snapshot(reset bool) PathSnapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := PathSnapshot{Group: p.key.group, Topic: p.key.topic, Partition: p.key.partition, Counters: p.counters,
		Replay: p.tracker.State(), SkewSuspected: map[string]uint64{}}
	switch {
	case !p.sk.kept(): // no record yet, or NoSketches
		sk := newSketches(p.e.cfg.RelativeAccuracy)
		s.Live, s.SinceRewind, s.E2EUpperBound = sk.live, sk.sinceRewind, sk.e2eBound
	case reset:
		// Hand the sketches over and start fresh ones: no copy needed.
		s.Live, s.SinceRewind, s.E2EUpperBound = p.sk.live, p.sk.sinceRewind, p.sk.e2eBound
		p.sk = newSketches(p.e.cfg.RelativeAccuracy)
	default:
		s.SinceRewind, s.E2EUpperBound = p.sk.sinceRewind.Copy(), p.sk.e2eBound.Copy()
		for i := range s.Live {
			s.Live[i] = p.sk.live[i].Copy()
		}
	}
	for _, c := range p.skew {
		s.SkewSuspected[c.host] += c.n
	}
	return s
}

// Totals returns every path's counters summed, without copying a sketch (what a metrics snapshot needs). Each path
// is read under its own lock.
func (e *Engine) Totals() Counters {
	e.mu.Lock()
	paths := make([]*Path, 0, len(e.paths))
	for _, p := range e.paths {
		paths = append(paths, p)
	}
	e.mu.Unlock()
	var c Counters
	for _, p := range paths {
		p.mu.Lock()
		c.add(&p.counters)
		p.mu.Unlock()
	}
	return c
}

// Snapshot is the engine-wide view: every path's snapshot, plus totals with merged sketches.
type Snapshot struct {
	Paths         []PathSnapshot // sorted by group, topic, partition
	Totals        Counters
	Live          [NumStages]*Sketch
	SinceRewind   *Sketch
	E2EUpperBound *Sketch
	SkewSuspected map[string]uint64
}

// Snapshot copies every path and merges the totals. Each path is copied under its own lock, so the snapshot is
// consistent per path, not across paths.
func (e *Engine) Snapshot() Snapshot { return e.snapshot(false) }

// Flush is Snapshot with Path.Flush for every path: the sketches cover the interval since the previous Flush.
func (e *Engine) Flush() Snapshot { return e.snapshot(true) }

func (e *Engine) snapshot(reset bool) Snapshot {
	e.mu.Lock()
	paths := make([]*Path, 0, len(e.paths))
	for _, p := range e.paths {
		paths = append(paths, p)
	}
	e.mu.Unlock()
	sk := newSketches(e.cfg.RelativeAccuracy)
	out := Snapshot{Live: sk.live, SinceRewind: sk.sinceRewind, E2EUpperBound: sk.e2eBound, SkewSuspected: map[string]uint64{}}
	for _, p := range paths {
		ps := p.snapshot(reset)
		out.Totals.add(&ps.Counters)
		for i := range out.Live {
			_ = out.Live[i].Merge(ps.Live[i]) // same accuracy by construction
		}
		_ = out.SinceRewind.Merge(ps.SinceRewind)
		_ = out.E2EUpperBound.Merge(ps.E2EUpperBound)
		for h, n := range ps.SkewSuspected {
			out.SkewSuspected[h] += n
		}
		out.Paths = append(out.Paths, ps)
	}
	sort.Slice(out.Paths, func(i, j int) bool {
		a, b := out.Paths[i], out.Paths[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.Partition < b.Partition
	})
	return out
}
