package latency

import (
	"math"
	"math/bits"
)

// prepareGeneral is the full validation and correction of one record.
func (e *Engine) prepareGeneral(hs hostTable, r *Record, res *Result) {
	*res = Result{Offset: r.Offset, Uncertainty: math.NaN(), SinceRewindMs: math.NaN()}
	var tl timeline
	var unit uint8 // bit per moment: a stamp ToMillis took for the wrong unit, decided against the anchor below
	var declared [NumMoments]float64
	var guess [NumMoments]Reason
	var host [NumMoments]HostID
	for m := Moment(0); m < NumMoments; m++ {
		s := r.Stamps[m]
		if !s.Present() {
			continue
		}
		host[m] = s.Host
		if s.Host != UnknownHost && hs.at(s.Host) == nil {
			host[m] = UnknownHost // a host that expired since its id was issued (or an id never issued): no known clock
		}
		ms, why := ToMillis(s)
		switch why {
		case ReasonOK:
		case ReasonSeconds, ReasonMicros, ReasonNanos:
			unit |= 1 << m
			declared[m], guess[m] = float64(s.Value)*msPerUnit[min(s.Unit, Nanos)], why
			continue
		default:
			res.Invalid[m] = why
			res.Flags |= FlagInvalidStamp
			continue
		}
		if s.Unit == Millis {
			// Kafka truncates to the millisecond (System.currentTimeMillis): the stamp stands for [v, v+1) ms, whose
			// midpoint is the unbiased estimate. Differences of two ms stamps are unchanged.
			ms += 0.5
		}
		tl.valid |= 1 << m
		tl.obs[m], tl.host[m], tl.q[m] = ms, host[m], quantum(s.Unit)
	}
	// Anchor the bounds on the append time (or the nearest thing to it) and reject stamps absurdly far from it.
	anchor := Moment(NumMoments)
	if tl.has(Append) {
		anchor = Append
	} else {
		for _, m := range [...]Moment{SourceAppend, Receive, Processed, Produce, Commit} {
			if tl.has(m) {
				anchor = m
				break
			}
		}
	}
	if anchor < NumMoments {
		for v := tl.valid &^ (1 << anchor); v != 0; v &= v - 1 {
			m := Moment(bits.TrailingZeros8(v))
			if why := e.bounds.check(m, tl.obs[m], tl.obs[anchor]); why != ReasonOK {
				tl.valid &^= 1 << m
				res.Invalid[m] = why
				res.Flags |= FlagInvalidStamp
			}
		}
	}
	for v := unit; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		ms, why, fixed := e.wrongUnit(m, declared[m], guess[m], anchor < NumMoments, tl.obs[min(anchor, NumMoments-1)])
		if fixed {
			tl.valid |= 1 << m
			tl.obs[m], tl.host[m], tl.q[m] = ms, host[m], quantum(Micros) // a µs or ns value: µs or finer
			res.UnitFixed[m] = why
			res.Flags |= FlagUnitCorrected
			continue
		}
		res.Invalid[m] = why
		res.Flags |= FlagInvalidStamp
	}
	e.resolve(hs, &tl)
	correct(&tl, e.pol, res)
}

// wrongUnit decides a stamp ToMillis took for one in the wrong unit (guess: its reason), declaredMs being its value
// read in its declared unit. The guess is confirmed only when the rescaled value agrees with the record's anchor
// (within Bounds), so a value whose rescaling still lies beyond the bounds is ReasonTooNew (ReasonTooOld for one
// that looks like seconds), not a unit error; a value far in the future as ms (beyond KIP-937's bound) whose µs
// or ns reading agrees with the anchor is the unit error. A confirmed µs or
// ns value is converted (its ms, fixed=true) when Config.FixUnits is on; seconds never are (they lost the
// milliseconds a stage needs). Without an anchor the guess stands and nothing is converted.
func (e *Engine) wrongUnit(m Moment, declaredMs float64, guess Reason, hasAnchor bool, anchorMs float64) (ms float64, why Reason, fixed bool) {
	switch {
	case !hasAnchor:
		return 0, guess, false
	case declaredMs >= maxPlausibleMs*1e3: // six orders too large
		ms = declaredMs / 1e6
	case declaredMs >= maxPlausibleMs: // three
		ms = declaredMs / 1e3
	default: // seconds: three orders too small
		ms = declaredMs * 1e3
	}
	if e.bounds.check(m, ms, anchorMs) != ReasonOK {
		if guess == ReasonSeconds {
			return 0, ReasonTooOld, false
		}
		return 0, ReasonTooNew, false
	}
	return ms, guess, guess != ReasonSeconds && e.cfg.FixUnits
}

// resolve looks up every valid stamp's offset, feeding causal-envelope bounds first for hosts that have no
// two-sided estimate.
func (e *Engine) resolve(hs hostTable, tl *timeline) {
	var unknown uint8
	for v := tl.valid; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		if tl.host[m] == RefHost {
			tl.res[m].kind = KindReference // theta, unc 0: the zero timeline
			continue
		}
		if tl.host[m] == UnknownHost {
			tl.res[m].kind = KindUnknown // never enveloped: no clock to keep a window for
			continue
		}
		h := hs.at(tl.host[m])
		if h == nil { // expired since prepareGeneral looked
			tl.host[m], tl.res[m].kind = UnknownHost, KindUnknown
			continue
		}
		if s := h.snap.Load(); s.two.ok {
			s.lookup(tl.obs[m], &tl.res[m])
		} else {
			tl.res[m].kind = KindUnknown
			unknown |= 1 << m
		}
	}
	if unknown == 0 {
		return
	}
	// Causal envelope: a stamp on a host without a two-sided estimate is bounded by the nearest stamp of a known
	// host on each side: produce <= append means host − ref >= obs − ref(later); the later-side case mirrors it.
	for m := Moment(0); m < Commit; m++ {
		if !tl.has(m) || tl.res[m].kind != KindUnknown || tl.host[m] == UnknownHost {
			continue
		}
		if h := hs.at(tl.host[m]); h != nil {
			e.envelope(h, tl, m)
		}
	}
}

// envelope bounds moment m's offset on host h (which has no two-sided estimate) by the nearest stamps of known hosts
// after and before it in the record, feeds that bound to h's envelope window when it tightens or moves it, and
// resolves m from the window when it has an estimate.
func (e *Engine) envelope(h *hostState, tl *timeline, m Moment) {
	lo, hi, at, slack := math.Inf(-1), math.Inf(1), math.NaN(), 0.0
	var anc anchors
	// The bounds use the anchors' estimates, not their worst cases: widening by the anchor's uncertainty would
	// bias the envelope by that much on every record. What the truth may lie beyond them (the anchor's offset
	// uncertainty, both stamps' quantisation) rides along as the bound's slack, which the stated interval adds.
	for k := m + 1; k < NumMoments; k++ {
		if tl.has(k) && known(&tl.res[k]) && tl.host[k] != tl.host[m] {
			ref := tl.obs[k] - tl.res[k].theta
			lo, at, slack = tl.obs[m]-ref, ref, tl.res[k].unc+tl.q[k]+tl.q[m]
			anc.lo = anchor{host: tl.host[k], obs: tl.obs[k], theta: tl.res[k].theta, unc: tl.res[k].unc}
			break
		}
	}
	for k := int(m) - 1; k >= 0; k-- {
		if tl.has(Moment(k)) && known(&tl.res[k]) && tl.host[k] != tl.host[m] {
			ref := tl.obs[k] - tl.res[k].theta
			hi = tl.obs[m] - ref
			anc.hi = anchor{host: tl.host[k], obs: tl.obs[k], theta: tl.res[k].theta, unc: tl.res[k].unc}
			u := tl.res[k].unc + tl.q[k] + tl.q[m]
			if math.IsNaN(at) {
				at = ref
			}
			slack = math.Max(slack, u)
			break
		}
	}
	if math.IsNaN(at) {
		return
	}
	b := bound{at: at, lo: lo, hi: hi, slack: slack}
	// The host's newest snapshot: an earlier stamp of the same host in this record may just have moved its
	// envelope, and both stamps must be corrected with one fit (their difference is one clock's).
	s := h.snap.Load()
	idx := int64(math.Floor(at / e.env.bucketMs))
	// The window also re-evaluates the newest bucket's extremes when their anchors' estimates have moved since
	// the fit was made (a few times a second at most: an anchor's fit changes when it refits).
	if dl, dh := e.anchorShift(&s.envLoAnc), e.anchorShift(&s.envHiAnc); s.envIdx != idx || b.lo > s.envLo ||
		b.hi < s.envHi || dl != 0 || dh != 0 {
		h.addEnv(b, &anc)
		s = h.snap.Load()
	}
	if s.env.ok {
		s.lookup(tl.obs[m], &tl.res[m])
	}
}

// anchorAt is the envelope windows' anchorLookup: the host's current estimate for a reading obs (ms) on its clock,
// when it is the reference or has an unambiguous two-sided estimate (what resolve anchors envelopes on).
func (e *Engine) anchorAt(host HostID, obs float64) (theta, unc float64, ok bool) {
	if host == RefHost {
		return 0, 0, true
	}
	h := (*e.hosts.Load()).at(host)
	if h == nil {
		return 0, 0, false
	}
	var r resolved
	h.snap.Load().lookup(obs, &r)
	if !known(&r) {
		return 0, 0, false
	}
	return r.theta, r.unc, true
}

// anchorShift returns how far a's host's offset estimate for its reading has moved since a recorded it (0 for the
// reference, or when the host no longer has an estimate to anchor on).
func (e *Engine) anchorShift(a *anchor) float64 {
	if a.host == RefHost {
		return 0
	}
	theta, _, ok := e.anchorAt(a.host, a.obs)
	if !ok {
		return 0
	}
	return theta - a.theta
}

// known reports whether a resolved offset can anchor an envelope: two-sided or the reference, and unambiguous.
func known(r *resolved) bool {
	return !r.ambiguous && (r.kind == KindReference || r.kind >= KindReported)
}
