package latency

import "math"

// bound says that a host's clock offset (host − reference, ms) lay within [lo, hi] at reference time at (ms since
// the epoch). Brackets and sync exchanges give both sides; causal envelopes give one side (the other is ±Inf).
//
// slack is how far the true offset may lie beyond [lo, hi]: 0 for brackets and sync exchanges, whose sides are hard
// bounds. A causal bound is computed from its anchor's offset estimate and from two stamps read at face value, so
// its anchor's offset uncertainty and both stamps' quantisation (half a millisecond each for ms stamps) may push the
// truth past it; the window keeps the bound itself for the estimate and its slack for the stated interval.
type bound struct{ at, lo, hi, slack float64 }

// anchors are the stamps a causal bound's lo and hi were computed from (see anchor), passed beside the bound so
// that the window can re-evaluate its kept extremes when an anchor's own estimate improves. Brackets, sync
// exchanges and reported offsets have none; nor has a bound re-inserted after a confirmed step.
type anchors struct{ lo, hi anchor }

// anchor is the stamp a causal bound was computed from: read obs (ms) on host's clock and corrected with that host's
// offset estimate theta ± unc (ms) at the time. A bound side is obs_m − (obs − theta) for the bounded host's reading
// obs_m, so it moves one for one with theta. The zero anchor is the reference clock, whose offset never changes.
type anchor struct {
	host            HostID
	obs, theta, unc float64
}

// anchorLookup returns a host's current offset estimate for a reading obs (ms) on its clock, and whether the host
// still has an unambiguous two-sided one (or is the reference).
type anchorLookup func(host HostID, obs float64) (theta, unc float64, ok bool)

func (b bound) twoSided() bool { return !math.IsInf(b.lo, 0) && !math.IsInf(b.hi, 0) }

// windowConfig parameterises a window; all times in ms, drifts as ratios (1e-6 = 1 ppm).
type windowConfig struct {
	bucketMs    float64 // width of one bucket
	nBuckets    int     // buckets kept: the window is nBuckets*bucketMs
	maxDrift    float64 // fitted slopes are clamped to ±maxDrift
	extrapRate  float64 // uncertainty growth per ms of extrapolation beyond the data
	stepTolMs   float64 // a bound further than this outside the predicted interval is inconsistent
	stepConfirm int     // consecutive, mutually consistent inconsistent bounds that confirm a step
	// refitEveryMs throttles refits (see add); 0 refits on every change. Envelopes must not be throttled: a record's
	// own causal bound has to be in the fit that corrects it.
	refitEveryMs float64
}

// bucket keeps the few bounds of one time slice that matter: the narrowest two-sided bound (for the drift fit, the
// NTP minimum-delay filter), the largest lower and the smallest upper bound (for the intersection).
type bucket struct {
	idx                    int64 // floor(at / bucketMs); meaningful when n > 0
	n                      int
	firstAt, lastAt        float64 // span of the bounds seen in the bucket
	bestAt, bestLo, bestHi float64
	bestW                  float64 // the best bound's weight in the drift fit (see slopePoint), kept with it
	loAt, lo               float64
	hiAt, hi               float64
	loSlack, hiSlack       float64 // slack of the bounds that set lo and hi
	loAnc, hiAnc           anchor  // the anchors of the bounds that set lo and hi (causal envelopes)
}

// segment is an immutable offset fit: θ(t) = mid + slope·(t − t0), true value within ±half at t0 (for a one-sided
// segment, mid is the bound itself and the estimate is biased toward it; see Offset). from..to is the span of data.
type segment struct {
	ok             bool
	oneSided       int8 // 0 two-sided; +1 only lower bounds (θ ≥ mid); −1 only upper bounds (θ ≤ mid)
	t0, mid, slope float64
	half           float64
	from, to       float64
	n              int
	extrapRate     float64
	k              float64 // 1 / (1 + slope), for at
	c0             float64 // (slope·t0 − mid)·k, for at
	settled        bool    // the drift is known: fitted from this window, or carried over a step
	minWidth       float64 // width of the narrowest two-sided bound in the window (+Inf without one)
	// slack is the slack (see bound) of the bounds that set the fit's sides: the true offset lies within
	// [mid − half − slack, mid + half + slack] on the sides the segment bounds. 0 for brackets and sync exchanges.
	slack float64
}

// at returns the offset that applies to a host reading obs (ms, host clock) and its uncertainty. The reading's
// reference time t satisfies t = obs − θ(t) with θ linear, so t = (obs − mid + slope·t0) / (1 + slope).
func (s *segment) at(obs float64) (theta, unc float64) {
	t := obs*s.k + s.c0 // = (obs − mid + slope·t0) / (1 + slope)
	unc = s.half
	if t > s.to {
		unc += (t - s.to) * s.extrapRate
	} else if t < s.from {
		unc += (s.from - t) * s.extrapRate
	}
	return obs - t, unc
}

// eval returns the offset and its uncertainty at reference time t (ms).
func (s segment) eval(t float64) (theta, unc float64) {
	theta = s.mid + s.slope*(t-s.t0)
	unc = s.half
	if t > s.to {
		unc += (t - s.to) * s.extrapRate
	} else if t < s.from {
		unc += (s.from - t) * s.extrapRate
	}
	return theta, unc
}

// window is the sliding-window estimator of one host's offset from one family of bounds. Not safe for concurrent
// use; hostState serialises it.
type window struct {
	cfg windowConfig
	// anchors, set for a causal envelope's window, re-evaluates the kept bounds' anchors at each refit (reanchor).
	anchors anchorLookup
	buckets []bucket
	latest  int64 // highest bucket index seen
	cur     segment
	// After a step, prev is the segment before it; it answers for times before prevUntil. Times between prevUntil and
	// stepAt are ambiguous (the step happened somewhere in there).
	prev           segment
	prevUntil      float64
	stepAt         float64
	lastConsistent float64
	pending        []bound // inconsistent bounds awaiting confirmation of a step
	envelopeRun    int     // consecutive completed envelope buckets whose extreme fell short of the fit
	dirty          bool    // a bound tightened a bucket since the last refit
	lastRefit      float64 // reference time (ms) of the bound that triggered the last refit
	steps          int
	samples        int
	lastSlopeKnown bool
	lastSlope      float64
}

func newWindow(cfg windowConfig) *window {
	return &window{cfg: cfg, buckets: make([]bucket, cfg.nBuckets), latest: math.MinInt64}
}

// consistent reports whether b agrees with the current fit within the step tolerance.
func (w *window) consistent(b bound) bool {
	if !w.cur.ok {
		return true
	}
	theta, unc := w.cur.eval(b.at)
	lo, hi := theta-unc-w.cfg.stepTolMs, theta+unc+w.cfg.stepTolMs
	switch w.cur.oneSided {
	case +1: // θ ≥ mid: only an upper bound below it contradicts (a lower bound above it just tightens)
		return b.hi >= lo
	case -1:
		return b.lo <= hi
	}
	return b.hi >= lo && b.lo <= hi
}

// add feeds one bound and reports whether anything a snapshot shows changed (a refit, a step, the pending set). An
// inconsistent two-sided bound is held in pending (the window is then suspect) until StepConfirm of them agree;
// one-sided (envelope) fits absorb upward moves and are restarted by envelopeStepped.
//
// With cfg.refitEveryMs set, a bound that tightens a bucket refits at once only when it opens a new bucket or the
// last refit is that long ago; otherwise the window is marked dirty and the next bound past the interval refits.
// Probes arrive ten times a second and tighten their bucket often while it is young: refitting on each cost more
// than all the records of that second.
func (w *window) add(b bound) (changed bool) { return w.addAnchored(b, nil) }

// addAnchored is add for a causal bound with its anchors (nil: none).
func (w *window) addAnchored(b bound, anc *anchors) (changed bool) {
	w.samples++
	if w.cur.ok && w.cur.oneSided == 0 && b.twoSided() && !w.consistent(b) {
		w.pending = append(w.pending, b)
		if !mutuallyConsistent(w.pending, w.cfg.stepTolMs) {
			w.pending = append(w.pending[:0], b) // the older ones were not a step together; keep the newest
		}
		if len(w.pending) < w.cfg.stepConfirm {
			return true
		}
		// Confirmed step: keep the old fit for stamps taken before it, restart the window with the new bounds.
		w.prev, w.prevUntil, w.stepAt = w.cur, w.lastConsistent, w.pending[0].at
		w.lastSlope, w.lastSlopeKnown = w.cur.slope, true
		pend := append([]bound(nil), w.pending...)
		w.reset()
		for _, p := range pend {
			w.insert(p, nil)
		}
		w.lastConsistent = pend[len(pend)-1].at
		w.steps++
		w.refitAt(b.at)
		return true
	}
	stepped := w.cur.ok && w.cur.oneSided != 0 && !b.twoSided() && w.envelopeStepped(b)
	if stepped {
		w.steps++
	}
	hadPending := len(w.pending) > 0
	w.pending = w.pending[:0]
	w.lastConsistent = max(w.lastConsistent, b.at)
	latest := w.latest
	if w.insert(b, anc) {
		w.dirty = true
	}
	if stepped || !w.cur.ok || w.latest != latest ||
		(w.dirty && (w.cfg.refitEveryMs == 0 || b.at-w.lastRefit >= w.cfg.refitEveryMs)) {
		w.refitAt(b.at)
		return true
	}
	return hadPending
}

// refitAt refits and records when.
func (w *window) refitAt(at float64) {
	w.refit()
	w.dirty, w.lastRefit = false, at
}

// envelopeMinSamples is how many bounds a completed envelope bucket needs before its extreme can signal a step
// (bounds that cannot move the bucket's extreme are skipped before they get here, so this counts improvements).
const envelopeMinSamples = 3

// envelopeStepped detects a step of an envelope-only host when b opens a new bucket. A lower envelope absorbs an
// upward step at once (the maximum rises), but a downward step leaves the old maximum in the window; so when
// two consecutive completed buckets, each with enough records, peak more than the step tolerance below the fit, the
// window restarts from those two buckets. (An upper envelope mirrors this.) A pause that slows every record of
// ten seconds looks the same, and costs only until the next fast records raise the envelope again.
func (w *window) envelopeStepped(b bound) bool {
	idx := int64(math.Floor(b.at / w.cfg.bucketMs))
	if w.latest == math.MinInt64 || idx <= w.latest {
		return false
	}
	k := &w.buckets[mod(w.latest, len(w.buckets))]
	if k.n < envelopeMinSamples {
		w.envelopeRun = 0
		return false
	}
	short := false
	if w.cur.oneSided > 0 {
		short = k.lo < w.cur.mid+w.cur.slope*(k.loAt-w.cur.t0)-w.cfg.stepTolMs
	} else {
		short = k.hi > w.cur.mid+w.cur.slope*(k.hiAt-w.cur.t0)+w.cfg.stepTolMs
	}
	if !short {
		w.envelopeRun = 0
		return false
	}
	w.envelopeRun++
	if w.envelopeRun < 2 {
		return false
	}
	keep := [2]bucket{*k, w.buckets[mod(w.latest-1, len(w.buckets))]}
	latest := w.latest
	// The slope fitted across the step is meaningless: the restarted envelope is unsettled until it has its own.
	w.lastSlope, w.lastSlopeKnown = 0, false
	w.reset()
	for _, kb := range keep {
		w.buckets[mod(kb.idx, len(w.buckets))] = kb
	}
	w.latest = latest
	w.envelopeRun = 0
	return true
}

// improves reports whether b would change its bucket (cheap pre-check for the per-message envelope path).
func (w *window) improves(b bound) bool {
	idx := int64(math.Floor(b.at / w.cfg.bucketMs))
	k := &w.buckets[mod(idx, len(w.buckets))]
	if k.n == 0 || k.idx != idx {
		return true
	}
	return b.lo > k.lo || b.hi < k.hi
}

// reanchorAt re-evaluates the extremes of the bucket of reference time at (ms) with their anchors' current
// estimates (see reanchor) and reports whether they moved.
func (w *window) reanchorAt(at float64) bool {
	idx := int64(math.Floor(at / w.cfg.bucketMs))
	k := &w.buckets[mod(idx, len(w.buckets))]
	if w.anchors == nil || k.n == 0 || k.idx != idx {
		return false
	}
	return w.reanchorBucket(k)
}

func (w *window) reset() {
	for i := range w.buckets {
		w.buckets[i] = bucket{}
	}
	w.latest = math.MinInt64
	w.cur = segment{}
	w.pending = w.pending[:0]
}

// insert puts b into its bucket; it reports whether anything the fit uses changed.
func (w *window) insert(b bound, anc *anchors) bool {
	idx := int64(math.Floor(b.at / w.cfg.bucketMs))
	if w.latest != math.MinInt64 && idx <= w.latest-int64(len(w.buckets)) {
		return false // older than the window
	}
	if idx > w.latest {
		w.latest = idx
	}
	k := &w.buckets[mod(idx, len(w.buckets))]
	if k.n == 0 || k.idx != idx {
		*k = bucket{idx: idx, bestAt: math.NaN(), lo: math.Inf(-1), hi: math.Inf(1), loAt: b.at, hiAt: b.at,
			firstAt: b.at, lastAt: b.at}
	}
	k.n++
	k.firstAt, k.lastAt = min(k.firstAt, b.at), max(k.lastAt, b.at)
	changed := false
	if b.twoSided() && (math.IsNaN(k.bestAt) || b.hi-b.lo < k.bestHi-k.bestLo) {
		h := (b.hi-b.lo)/2 + 0.5
		k.bestAt, k.bestLo, k.bestHi, k.bestW = b.at, b.lo, b.hi, 1/(h*h)
		changed = true
	}
	if b.lo > k.lo {
		k.lo, k.loAt, k.loSlack, k.loAnc = b.lo, b.at, b.slack, anchor{}
		if anc != nil {
			k.loAnc = anc.lo
		}
		changed = true
	}
	if b.hi < k.hi {
		k.hi, k.hiAt, k.hiSlack, k.hiAnc = b.hi, b.at, b.slack, anchor{}
		if anc != nil {
			k.hiAnc = anc.hi
		}
		changed = true
	}
	return changed
}

// refit recomputes the current segment from the buckets in the window: a drift slope by weighted least squares over
// each bucket's narrowest bracket (or, for envelopes, each bucket's extreme), then the intersection of every bucket's
// bounds carried to the newest time along that slope. It reads the buckets twice: once for their span and the fit's
// sums (scan), once to intersect their bounds along the fitted slope.
func (w *window) refit() {
	oldest := w.latest - int64(len(w.buckets)) + 1
	if w.anchors != nil {
		w.reanchor(oldest)
	}
	// Slope points' times are taken relative to the newest bucket: epoch milliseconds squared would cancel
	// catastrophically.
	tr := float64(w.latest) * w.cfg.bucketMs
	sp, sums := w.scan(oldest, tr)
	if sp.n == 0 {
		w.cur = segment{}
		return
	}
	if sp.nTwo == 0 {
		// No two-sided bound (a causal envelope's window): the slope points are the buckets' one-sided extremes.
		sums = w.extremeSums(oldest, tr)
	}
	slope, slopeErr, settled := w.fitSlope(sp, sums)
	w.cur = w.segmentAt(oldest, sp, slope, slopeErr, settled)
}

// windowSpan is what refit needs to know of the buckets in the window before fitting: how many hold bounds (n), how
// many of those hold a two-sided bound (nTwo), and the span of reference time (ms) their bounds cover.
type windowSpan struct {
	n, nTwo  int
	from, to float64
}

// slopeSums are the weighted sums of a least-squares line fit over points (t, y) with weights w: Σw, Σw·t, Σw·y,
// Σw·t², Σw·t·y and Σw·y², with every y taken relative to y0, the first point's, so that the sums of squares keep
// their precision when the offsets are large and their spread small.
type slopeSums struct {
	n                         int
	y0                        float64
	sw, st, sy, stt, sty, syy float64
}

func (s *slopeSums) add(t, y, wt float64) {
	if s.n == 0 {
		s.y0 = y
	}
	s.n++
	y -= s.y0
	s.sw += wt
	s.st += wt * t
	s.sy += wt * y
	s.stt += wt * t * t
	s.sty += wt * t * y
	s.syy += wt * y * y
}

// scan reads the buckets from oldest on once: how many hold bounds and the time those span, and the sums of their
// two-sided slope points (see slopePoint), times relative to tr (ms).
func (w *window) scan(oldest int64, tr float64) (windowSpan, slopeSums) {
	sp := windowSpan{from: math.Inf(1), to: math.Inf(-1)}
	var sums slopeSums
	for i := range w.buckets {
		k := &w.buckets[i]
		if k.n == 0 || k.idx < oldest {
			continue
		}
		sp.n++
		// Compares, not min and max: their NaN and signed-zero handling is a chain of instructions the loop carries,
		// and these times are finite.
		if k.firstAt < sp.from {
			sp.from = k.firstAt
		}
		if k.lastAt > sp.to {
			sp.to = k.lastAt
		}
		if !math.IsNaN(k.bestAt) {
			sp.nTwo++
			t, y, wt, _ := slopePoint(k, true)
			sums.add(t-tr, y, wt)
		}
	}
	return sp, sums
}

// extremeSums returns the sums of the one-sided slope points of the buckets from oldest on (a window without a
// two-sided bound), times relative to tr (ms).
func (w *window) extremeSums(oldest int64, tr float64) slopeSums {
	var sums slopeSums
	for i := range w.buckets {
		k := &w.buckets[i]
		if k.n == 0 || k.idx < oldest {
			continue
		}
		if t, y, wt, ok := slopePoint(k, false); ok {
			sums.add(t-tr, y, wt)
		}
	}
	return sums
}

// fitSlope fits the drift slope (a ratio, clamped to ±maxDrift) from the sums of the window's slope points, and
// returns with it slopeErr, the bound on its error, and whether it is settled: a slope that rests on at least a
// quarter of the window (or was carried over a step) is trusted to slopeErr, a younger one is not.
//
// The slope is the weighted least-squares one, b = Sty / Stt over the centred sums; its standard error is
// sqrt(RSS / (n − 2) / (Stt·Σw)) with the residual sum of squares RSS = Σw·(Syy − 2b·Sty + b²·Stt), Syy, Sty and Stt
// the centred second moments per unit weight (e.g. Draper and Smith, "Applied Regression Analysis", ch. 1).
func (w *window) fitSlope(sp windowSpan, s slopeSums) (slope, slopeErr float64, settled bool) {
	if w.lastSlopeKnown {
		slope = w.lastSlope
	}
	// Until a slope can be fitted the drift is unknown up to maxDrift; after, it is known to about two standard
	// errors of the weighted least-squares slope. Either way the bounds carried across the window move by that
	// much per ms of age, which widens the estimate's uncertainty.
	slopeErr = w.cfg.maxDrift
	// Settled: the slope rests on at least a quarter of the window (or carried over a step, or a reported offset).
	settled = w.lastSlopeKnown || sp.to-sp.from >= w.cfg.bucketMs*float64(len(w.buckets))/4
	if sp.n >= 3 && sp.to-sp.from >= 2*w.cfg.bucketMs {
		mt, my := s.st/s.sw, s.sy/s.sw
		if v := s.stt/s.sw - mt*mt; v > 0 {
			sty, syy := s.sty/s.sw-mt*my, s.syy/s.sw-my*my
			slope = sty / v
			rss := max(s.sw*(syy-2*slope*sty+slope*slope*v), 0)
			slopeErr = tQuantile(sp.n-2) * math.Sqrt(rss/float64(max(sp.n-2, 1))/(v*s.sw))
		}
	}
	slope = max(-w.cfg.maxDrift, min(w.cfg.maxDrift, slope))
	if !settled {
		// A young fit's slope says little, and its standard error less: the true drift is only known to lie within
		// ±maxDrift, so the slope used is off by at most its own size plus maxDrift.
		slopeErr = math.Abs(slope) + w.cfg.maxDrift
	}
	return slope, slopeErr, settled
}

// segmentAt builds the fit at the newest data time from the fitted slope: the intersection of every bucket's bounds
// carried there (intersect), widened by the slope's error over the window's span, since each carried bound is off by
// that error times its age.
func (w *window) segmentAt(oldest int64, sp windowSpan, slope, slopeErr float64, settled bool) segment {
	t0 := sp.to
	x := w.intersect(oldest, slope, t0)
	extrap := slopeErr
	if settled {
		slopeErr = min(slopeErr, w.cfg.maxDrift)
		extrap = min(slopeErr, w.cfg.extrapRate)
	}
	s := segment{ok: true, t0: t0, slope: slope, from: sp.from, to: sp.to, n: sp.n, extrapRate: extrap,
		k: 1 / (1 + slope), settled: settled, minWidth: x.minWidth}
	// Each bucket's bound is carried to t0 along the slope: off by the slope's error times its age, at most the span.
	driftUnc := slopeErr * (sp.to - sp.from)
	switch {
	case !math.IsInf(x.lo, 0) && !math.IsInf(x.hi, 0):
		s.mid, s.half, s.slack = (x.lo+x.hi)/2, math.Abs(x.hi-x.lo)/2+driftUnc, max(x.loSlack, x.hiSlack)
	case !math.IsInf(x.lo, 0):
		s.mid, s.oneSided, s.half, s.slack = x.lo, +1, driftUnc, x.loSlack
	default:
		s.mid, s.oneSided, s.half, s.slack = x.hi, -1, driftUnc, x.hiSlack
	}
	s.c0 = (s.slope*s.t0 - s.mid) * s.k
	return s
}

// intersection is the tightest pair of bounds on the offset at one time (ms; ±Inf where no bucket bounds that side),
// with the slack of the buckets that set them, and the width of the narrowest two-sided bound (+Inf without one).
type intersection struct {
	lo, hi           float64
	loSlack, hiSlack float64
	minWidth         float64
}

// intersect carries every bucket's lower and upper bound from oldest on to reference time t0 (ms) along slope and
// keeps the tightest of each: the offset at t0 lies within all of them at once.
func (w *window) intersect(oldest int64, slope, t0 float64) intersection {
	x := intersection{lo: math.Inf(-1), hi: math.Inf(1), minWidth: math.Inf(1)}
	for i := range w.buckets {
		k := &w.buckets[i]
		if k.n == 0 || k.idx < oldest {
			continue
		}
		if w := k.bestHi - k.bestLo; !math.IsNaN(k.bestAt) && w < x.minWidth {
			x.minWidth = w
		}
		if l := k.lo + slope*(t0-k.loAt); !math.IsInf(k.lo, 0) && l > x.lo {
			x.lo, x.loSlack = l, k.loSlack
		}
		if h := k.hi + slope*(t0-k.hiAt); !math.IsInf(k.hi, 0) && h < x.hi {
			x.hi, x.hiSlack = h, k.hiSlack
		}
	}
	return x
}

// reanchor re-evaluates the kept extremes of the buckets from oldest on with their anchors' current estimates. A
// causal bound is only as good as its anchor's estimate when it was made, and an anchor's first estimates (a broker's
// first probe brackets) may be off by several ms within their uncertainty; the largest lower bound of a bucket picks
// exactly such an error, and kept as it was it would bias the envelope for a whole window. Re-evaluated, each side
// moves by the change of its anchor's offset and its slack by the change of that offset's uncertainty (the slack is
// the anchor's uncertainty plus the stamps' quantisation, or for a two-sided bound the larger of its two sides', which
// stays a bound: a side's own part shrinks or grows by exactly that change). An anchor whose host no longer has an
// unambiguous two-sided estimate (expired, in a step's ambiguity) keeps the values it had.
func (w *window) reanchor(oldest int64) {
	for i := range w.buckets {
		k := &w.buckets[i]
		if k.n == 0 || k.idx < oldest {
			continue
		}
		w.reanchorBucket(k)
	}
}

// reanchorBucket re-evaluates one bucket's kept extremes (see reanchor) and reports whether they moved.
func (w *window) reanchorBucket(k *bucket) (moved bool) {
	lo, hi := k.lo, k.hi
	if !math.IsInf(k.lo, 0) {
		k.lo, k.loSlack = w.moveAnchor(&k.loAnc, k.lo, k.loSlack)
	}
	if !math.IsInf(k.hi, 0) {
		k.hi, k.hiSlack = w.moveAnchor(&k.hiAnc, k.hi, k.hiSlack)
	}
	return k.lo != lo || k.hi != hi
}

// moveAnchor returns a bound side v with slack sl re-evaluated with a's host's current estimate, and records that
// estimate in a.
func (w *window) moveAnchor(a *anchor, v, sl float64) (float64, float64) {
	if a.host == RefHost {
		return v, sl
	}
	theta, unc, ok := w.anchors(a.host, a.obs)
	if !ok {
		return v, sl
	}
	v, sl = v+(theta-a.theta), sl+(unc-a.unc)
	a.theta, a.unc = theta, unc
	return v, sl
}

// mutuallyConsistent reports whether all bounds overlap within tol (ignoring drift over their short span).
func mutuallyConsistent(bs []bound, tol float64) bool {
	lo, hi := math.Inf(-1), math.Inf(1)
	for _, b := range bs {
		lo, hi = max(lo, b.lo), min(hi, b.hi)
	}
	return lo <= hi+tol
}

func mod(i int64, n int) int {
	m := int(i % int64(n))
	if m < 0 {
		m += n
	}
	return m
}

// slopePoint returns the point a bucket contributes to the drift fit: its narrowest two-sided bound's midpoint when
// the window has two-sided bounds (weighted by the inverse square of its half-width), else its one-sided extreme.
func slopePoint(k *bucket, twoSided bool) (t, y, wt float64, ok bool) {
	switch {
	case twoSided && !math.IsNaN(k.bestAt):
		return k.bestAt, (k.bestLo + k.bestHi) / 2, k.bestW, true
	case twoSided:
		return 0, 0, 0, false
	case !math.IsInf(k.lo, 0):
		return k.loAt, k.lo, 1, true
	case !math.IsInf(k.hi, 0):
		return k.hiAt, k.hi, 1, true
	}
	return 0, 0, 0, false
}

// tQuantiles[d] is Student's t quantile 0.9995 with d degrees of freedom (a 99.9 % two-sided interval), d = 1..30.
var tQuantiles = [...]float64{0, 636.6, 31.60, 12.92, 8.610, 6.869, 5.959, 5.408, 5.041, 4.781, 4.587, 4.437, 4.318,
	4.221, 4.140, 4.073, 4.015, 3.965, 3.922, 3.883, 3.850, 3.819, 3.792, 3.768, 3.745, 3.725, 3.707, 3.690, 3.674,
	3.659, 3.646}

// tQuantile is how many standard errors of a least-squares slope fitted with d degrees of freedom make a 99.9 %
// bound on its error: the residuals estimate the noise, and from a handful of buckets that estimate is itself
// uncertain (Student's t; a normal 2σ left a young fit's bound short). 3.29, the normal quantile, beyond 30.
func tQuantile(d int) float64 {
	if d < 1 {
		d = 1
	}
	if d < len(tQuantiles) {
		return tQuantiles[d]
	}
	return 3.291
}
