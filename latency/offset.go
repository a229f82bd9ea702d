package latency

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// OffsetKind says where a host's offset estimate comes from, which says how far to trust it.
type OffsetKind uint8

// Offset sources, from none to the reference clock itself.
const (
	KindUnknown   OffsetKind = iota // no estimate: corrections through this host are flagged
	KindEnvelope                    // causal envelope: a one-sided bound, biased by the minimum one-way delay
	KindReported                    // supplied from outside (e.g. NTP/chrony reports), trusted at face value ± its uncertainty
	KindSynced                      // round-trip exchanges between the host and the collector (NTP maths)
	KindBracketed                   // probe brackets: send and ack on the reference clock around the host's stamp
	KindReference                   // the reference clock itself: offset 0
)

var kindNames = [...]string{"unknown", "envelope", "reported", "synced", "bracketed", "reference"}

// String returns the kind's name (a metric label value).
func (k OffsetKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Offset is a host's clock offset from the reference clock at one reference time: Offset = host clock − reference
// clock (the cases' convention), so corrected = observed − Offset.
//
// For KindBracketed, KindSynced and KindReported the true offset lies within Offset ± Uncertainty (a hard bound when
// the inputs are true brackets and drift is linear over the window): [Lower, Upper]. For KindEnvelope the estimate is
// the causal bound itself, and it bounds one side only: the true offset is larger (for a host that stamps earlier
// moments, e.g. a producer: Upper is Unbounded) or smaller (a host that stamps later moments: Lower is -Unbounded) by
// up to the minimum one-way delay between the two hosts, which no passive measurement can see. Uncertainty then
// counts only how far the bound itself may be off (its anchor's uncertainty and drift extrapolation), not the
// estimate's error; the honest interval is [Lower, Upper], and [Offset.Estimate] offers MinDelay as a documented
// estimate of the missing side. (A host stamped between two known ones, e.g. a broker between its producer and its
// consumer, can get a two-sided envelope: both sides then are causal bounds.)
type Offset struct {
	Host        string
	Kind        OffsetKind
	At          time.Time     // reference time the estimate is for
	Offset      time.Duration // host − reference
	Uncertainty time.Duration // half-width of the interval around Offset (envelope: of the bound itself)
	// Lower and Upper bound the true offset: Lower ≤ θ ≤ Upper. An open side is -Unbounded or Unbounded; both are
	// open for KindUnknown, both 0 for the reference.
	Lower, Upper time.Duration
	// MinDelay is, for a one-sided envelope, this network's minimum one-way delay as the probe path measures it: half
	// the narrowest probe round trip in the window of any bracketed broker (the NTP symmetry assumption). 0 when no
	// broker is bracketed, and for every other kind.
	MinDelay time.Duration
	DriftPPM float64 // fitted drift of the host clock against the reference, parts per million
	Samples  int     // bounds that reached the window since the host was first seen (repeats are skipped)
	Steps    int     // clock steps detected (each restarted the window)
	Suspect  bool    // inconsistent bounds are pending: a step may be under way; corrections are flagged
	// Settled: the drift is known (a quarter of the window has data, or it carried over a step, or the offset is
	// reported); until then cross-clock stages are held to the accuracy target (FlagUnsettled).
	Settled bool
}

// Unbounded is the open side of an [Offset] interval: Upper = Unbounded or Lower = -Unbounded.
const Unbounded = time.Duration(math.MaxInt64)

// OneSided reports whether the interval is open on exactly one side (a one-sided causal envelope).
func (o Offset) OneSided() bool { return (o.Lower == -Unbounded) != (o.Upper == Unbounded) }

// Estimate returns the best point estimate of the offset and whether it rests on MinDelay: for a one-sided envelope
// with a measured minimum delay, the bound moved by MinDelay toward its open side (a producer's true offset is its
// lower bound plus the smallest produce → append delay in the window, which the probe path's smallest one-way delay
// estimates; a consumer's mirrors it). It is an estimate, not a bound: the producer's network may be slower than the
// collector's. Otherwise it is Offset.
func (o Offset) Estimate() (time.Duration, bool) {
	switch {
	case o.MinDelay <= 0 || !o.OneSided():
		return o.Offset, false
	case o.Upper == Unbounded:
		return o.Offset + o.MinDelay, true
	}
	return o.Offset - o.MinDelay, true
}

// Bracket is one probe round trip: the collector sent a record at Send and got the acknowledgement at Ack (both on
// the reference clock), and the host (the partition leader) stamped it RemoteMs (LogAppendTime, ms, its own clock)
// in between. Hence host − reference ∈ [RemoteMs − Ack, RemoteMs + 1 ms − Send]; the +1 ms covers the truncation of
// the broker's millisecond stamp. This is the NTP offset bound of RFC 5905 §8 with the remote's receive and transmit
// collapsed into one stamp.
type Bracket struct {
	Host     HostID
	Send     time.Time
	RemoteMs int64
	Ack      time.Time
}

// SyncExchange is one NTP-style round trip initiated by an instrumented host: it sent at T1 (host clock), the
// collector received at T2 and replied at T3 (reference clock), the host received the reply at T4 (host clock).
// Then host − reference ∈ [T1 − T2, T4 − T3], an interval as wide as the round-trip delay (T4−T1) − (T3−T2);
// its midpoint is RFC 5905's θ = ((T1−T2) + (T4−T3))/2 with the sign flipped to host − reference.
type SyncExchange struct {
	Host           HostID
	T1, T2, T3, T4 time.Time
}

// bounds converts a bracket to an offset bound in ms.
func (b Bracket) bound() (bound, error) {
	s, a := timeToMs(b.Send), timeToMs(b.Ack)
	if a < s {
		return bound{}, ErrBadRoundTrip
	}
	r := float64(b.RemoteMs)
	return bound{at: (s + a) / 2, lo: r - a, hi: r + 1 - s}, nil
}

func (x SyncExchange) bound() (bound, error) {
	t1, t2, t3, t4 := timeToMs(x.T1), timeToMs(x.T2), timeToMs(x.T3), timeToMs(x.T4)
	if t4 < t1 || t3 < t2 || (t4-t1) < (t3-t2) {
		return bound{}, ErrBadRoundTrip
	}
	return bound{at: (t2 + t3) / 2, lo: t1 - t2, hi: t4 - t3}, nil
}

// hostSnap is an immutable view of one host's estimate, published atomically so message paths read it without a
// lock.
type hostSnap struct {
	kind      OffsetKind // of the two-sided family, KindUnknown when it has no fit
	two       segment
	prev      segment
	prevUntil float64
	stepAt    float64
	suspectAt float64 // +Inf unless inconsistent bounds are pending; stamps after it are suspect
	env       segment
	envIdx    int64 // bucket of the newest envelope bound and its extremes: the fast path skips non-improving bounds
	envLo     float64
	envHi     float64
	envLoAnc  anchor // the anchors envLo and envHi were last evaluated with
	envHiAnc  anchor
	twoIdx    int64 // the same for the two-sided window, so that a receipt repeating a reported offset costs no lock
	twoLo     float64
	twoHi     float64
	twoBest   float64 // width of the newest bucket's narrowest bound
	twoLastAt float64 // newest bound time in that bucket
	samples   int
	steps     int
}

// fastPathMs: repeated bounds closer than this to the newest one in their bucket skip the host lock.
const fastPathMs = 100

// hostState is one host's estimators. mu guards two and env; snap is replaced (never mutated) under mu.
type hostState struct {
	name        string
	id          HostID       // slot and generation (hosts.go); fixed at creation
	used        atomic.Int64 // the engine's tick when the host was last used (see Engine.EvictIdle)
	mu          sync.Mutex
	two         *window // brackets, sync exchanges, reported offsets
	env         *window // causal envelope bounds from records
	kind        OffsetKind
	publishedAt float64 // reference time of the bound that last published a two-sided change
	snap        atomic.Pointer[hostSnap]
}

func newHostState(name string, twoCfg, envCfg windowConfig, anchors anchorLookup) *hostState {
	h := &hostState{name: name, two: newWindow(twoCfg), env: newWindow(envCfg)}
	h.env.anchors = anchors
	h.snap.Store(&hostSnap{suspectAt: math.Inf(1), envIdx: math.MinInt64, twoIdx: math.MinInt64})
	return h
}

// publish rebuilds the snapshot; mu must be held.
func (h *hostState) publish() {
	s := &hostSnap{
		kind: h.kind, two: h.two.cur, prev: h.two.prev, prevUntil: h.two.prevUntil, stepAt: h.two.stepAt,
		suspectAt: math.Inf(1), env: h.env.cur, envIdx: math.MinInt64, envLo: math.Inf(-1), envHi: math.Inf(1),
		twoIdx:  math.MinInt64,
		samples: h.two.samples + h.env.samples, steps: h.two.steps + h.env.steps,
	}
	if !h.two.cur.ok {
		s.kind = KindUnknown
	}
	if len(h.two.pending) > 0 {
		s.suspectAt = h.two.lastConsistent
	}
	if h.env.latest != math.MinInt64 {
		k := &h.env.buckets[mod(h.env.latest, len(h.env.buckets))]
		s.envIdx, s.envLo, s.envHi, s.envLoAnc, s.envHiAnc = k.idx, k.lo, k.hi, k.loAnc, k.hiAnc
	}
	if h.two.latest != math.MinInt64 && len(h.two.pending) == 0 {
		k := &h.two.buckets[mod(h.two.latest, len(h.two.buckets))]
		s.twoIdx, s.twoLo, s.twoHi, s.twoBest, s.twoLastAt = k.idx, k.lo, k.hi, k.bestHi-k.bestLo, k.lastAt
	}
	h.snap.Store(s)
}

func (h *hostState) addTwo(b bound, kind OffsetKind, bucketMs float64) {
	// Fast path: receipts repeat their host's reported offset on every record. A bound inside its bucket's current
	// extremes, no narrower than its best, of a kind already recorded and within fastPathMs of the bucket's newest
	// bound changes nothing worth a lock; one such bound per fastPathMs still goes through to keep the window's
	// newest time (extrapolation, step bookkeeping) current.
	if s := h.snap.Load(); s.twoIdx == int64(math.Floor(b.at/bucketMs)) && b.lo <= s.twoLo && b.hi >= s.twoHi &&
		b.hi-b.lo >= s.twoBest && kind <= s.kind && b.at-s.twoLastAt < fastPathMs {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	changed := false
	if kind > h.kind || !h.two.cur.ok {
		changed = h.kind != kind
		h.kind = kind
	}
	if kind == KindReported {
		// A reported offset comes from a sync that follows the host's drift itself: it needs no warm-up here.
		h.two.lastSlopeKnown = true
	}
	// Publishing allocates a snapshot: only when something it shows changed, or to keep the fast path's newest
	// time current.
	if h.two.add(b) || changed || (kind == KindReported && b.at-h.publishedAt >= fastPathMs) {
		h.publish()
		h.publishedAt = b.at
	}
}

// addEnv feeds a causal bound; the caller has checked the fast path.
func (h *hostState) addEnv(b bound, anc *anchors) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The bucket's extremes are first re-evaluated with their anchors' current estimates: the caller came here
	// because they moved or because b beats them, and either way the fit must follow.
	moved := h.env.reanchorAt(b.at)
	switch {
	case h.env.improves(b):
		h.env.addAnchored(b, anc)
		h.publish()
	case moved:
		h.env.refitAt(b.at)
		h.publish()
	}
}

// resolved is one host's correction for one stamp.
type resolved struct {
	theta, unc float64 // ms
	kind       OffsetKind
	ambiguous  bool // the stamp falls in a step's ambiguity or a pending inconsistency: flag it
	unsettled  bool // the estimate has no drift fit yet (warm-up): reported with FlagUnsettled
	// side is, for a one-sided envelope, the side the offset is bounded on: +1 only from below (θ ≥ theta − unc: a
	// host stamping an earlier moment, whose true time is at most corrected + unc), −1 only from above (a host
	// stamping a later moment, whose true time is at least corrected − unc); 0 when both sides are bounded.
	side int8
	// before: the stamp was corrected with the fit from before a detected step (another offset than a stamp of the
	// same host after it: their difference is no longer one clock's).
	before bool
}

// free reports whether the stamp's reading says nothing about where it lies on the reference clock: its offset is
// unknown, or it falls in a step's ambiguity. The projection then moves it only as far as order requires.
func (r *resolved) free() bool { return r.kind == KindUnknown || r.ambiguous }

// lookup returns the offset that applies to a stamp read as obsMs on this host. The reference time of the stamp is
// approximated by obsMs − θ (offsets are tiny against the window, so one iteration suffices). A stamp before a
// detected step uses the pre-step fit; a stamp whose host reading could belong to either side is ambiguous.
func (s *hostSnap) lookup(obsMs float64, r *resolved) {
	// Fields are written one by one into the caller's slot: returning the struct by value made the caller copy it
	// with wide moves right after the callee's narrow stores, a store-forwarding stall that cost more than the maths.
	r.ambiguous, r.unsettled, r.side, r.before = false, false, 0, false
	switch {
	case s.two.ok:
		th, u := s.two.at(obsMs)
		r.kind = s.kind
		if s.prev.ok {
			pt, pu := s.prev.at(obsMs)
			inPrev, inCur := obsMs-pt < s.prevUntil, obsMs-th >= s.stepAt
			if inPrev && !inCur {
				r.theta, r.unc, r.unsettled, r.before = pt, pu, !s.prev.settled, true
				return
			}
			if !inCur || inPrev { // in the gap, or a backward step made the reading occur twice
				r.theta, r.unc, r.ambiguous = th, u, true
				return
			}
		}
		r.theta, r.unc, r.ambiguous, r.unsettled = th, u, obsMs-th > s.suspectAt, !s.two.settled
	case s.env.ok:
		r.theta, r.unc = s.env.at(obsMs)
		r.unc += s.env.slack
		r.kind, r.unsettled, r.side = KindEnvelope, !s.env.settled, s.env.oneSided
	default:
		r.theta, r.unc, r.kind = 0, 0, KindUnknown
	}
}

// offset renders the snapshot as an Offset at reference time atMs; minDelayMs is the probe path's minimum one-way
// delay (ms, 0 when unknown), reported with one-sided envelopes.
func (s *hostSnap) offset(name string, atMs, minDelayMs float64) Offset {
	o := Offset{Host: name, At: msToTime(atMs), Samples: s.samples, Steps: s.steps, Suspect: !math.IsInf(s.suspectAt, 1),
		Lower: -Unbounded, Upper: Unbounded}
	var seg segment
	switch {
	case s.two.ok:
		seg, o.Kind = s.two, s.kind
	case s.env.ok:
		seg, o.Kind = s.env, KindEnvelope
	default:
		return o
	}
	th, u := seg.eval(atMs)
	u += seg.slack // an envelope's anchors' uncertainty and stamp quantisation (0 for brackets and exchanges)
	o.Settled = seg.settled
	o.Offset = msDuration(th)
	o.Uncertainty = msDuration(u)
	o.DriftPPM = seg.slope * 1e6
	if seg.oneSided <= 0 {
		o.Upper = msDuration(th + u)
	}
	if seg.oneSided >= 0 {
		o.Lower = msDuration(th - u)
	}
	if seg.oneSided != 0 && minDelayMs > 0 {
		o.MinDelay = msDuration(minDelayMs)
	}
	return o
}

// minRTTMs is the narrowest probe round trip (ms) among the buckets of a bracketed window, +Inf when it has none: a
// bracket [R − A, R + 1 − S] is A − S + 1 ms wide.
func (s *hostSnap) minRTTMs() float64 {
	if s.kind != KindBracketed || !s.two.ok {
		return math.Inf(1)
	}
	return s.two.minWidth - 1
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
