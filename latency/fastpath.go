package latency

import "math"

// prepareFast handles the common record in a straight line: produce, append, optionally receive, and processed
// stamps, all valid and within bounds, on hosts that are the reference or have a two-sided estimate with no step in
// view, whose corrected timeline is already monotone. A cross-clock pair wider than max(floor, ratio × stage) or,
// resting on an unsettled offset, than the warm-up target is marked FlagWide or FlagUnsettled here as the general
// path would (information only), so that a collector's first 30 s do not all take the slow path. It then
// writes exactly what prepareGeneral would (TestFastPathMatchesGeneral holds it to that) and reports true; any other
// record makes it report false, having written nothing the general path does not overwrite.
//
// It exists because the general path's loops and cases cost about three times the arithmetic on records that need
// none of them (docs/latency.md, throughput).
func (e *Engine) prepareFast(hs hostTable, r *Record, res *Result) bool {
	st := &r.Stamps
	if st[SourceAppend].Value != 0 || st[Commit].Value != 0 {
		return false
	}
	p, tp, up, nsp, ok := fastStamp(hs, &st[Produce])
	if !ok {
		return false
	}
	a, ta, ua, nsa, ok := fastStamp(hs, &st[Append])
	if !ok {
		return false
	}
	c, tc, uc, nsc, ok := fastStamp(hs, &st[Processed])
	// Bounds.Check for produce (before the append: old up to MaxAge, ahead up to MaxSkew) and processed (the reverse).
	if !ok || p-a < -e.bounds.age || p-a > e.bounds.skew || c-a < -e.bounds.skew || c-a > e.bounds.age {
		return false
	}
	cp, ca, cc := p-tp, a-ta, c-tc
	ingest := ca - cp
	var fl Flags // FlagWide, FlagUnsettled: information only
	if !e.fastPair(ingest, up, ua, st[Produce].Host == st[Append].Host, nsp || nsa, &fl) {
		return false
	}
	if st[Receive].Value == 0 {
		delivery := cc - ca
		if !e.fastPair(delivery, ua, uc, st[Append].Host == st[Processed].Host, nsa || nsc, &fl) {
			return false
		}
		*res = Result{} // cleared in place: a composite literal here is built aside and copied
		res.Offset, res.SinceRewindMs, res.Uncertainty, res.Flags = r.Offset, math.NaN(), up+uc, fl
		res.Has = 1<<StageIngest | 1<<StageDelivery | 1<<StageE2E
		res.Stages[StageIngest], res.Stages[StageDelivery], res.Stages[StageE2E] = ingest, delivery, ingest+delivery
		res.Corrected[Produce], res.Corrected[Append], res.Corrected[Processed] = cp, ca, cc
		res.MomentUnc[Produce], res.MomentUnc[Append], res.MomentUnc[Processed] = up, ua, uc
		// Intervals as fillBounds computes them (same operations in the same order): each moment's truth within
		// its corrected time ± (uncertainty + quantisation), tightened by causal order.
		qp, qa, qc := quantum(st[Produce].Unit), quantum(st[Append].Unit), quantum(st[Processed].Unit)
		dp, da, dc := up+qp, ua+qa, uc+qc
		loA, loC := max(cp-dp, ca-da), 0.0
		loC = max(loA, cc-dc)
		hiA := min(cc+dc, ca+da)
		hiP := min(hiA, cp+dp)
		e.fastStage(res, StageIngest, st[Produce].Host, st[Append].Host, ingest, ca-cp, qp, qa, cp-dp, hiP, loA, hiA)
		e.fastStage(res, StageDelivery, st[Append].Host, st[Processed].Host, delivery, cc-ca, qa, qc, loA, hiA, loC, cc+dc)
		e.fastStage(res, StageE2E, st[Produce].Host, st[Processed].Host, res.Stages[StageE2E], cc-cp, qp, qc, cp-dp, hiP, loC, cc+dc)
		return true
	}
	v, tv, uv, nsv, ok := fastStamp(hs, &st[Receive])
	if !ok || v-a < -e.bounds.skew || v-a > e.bounds.age {
		return false
	}
	cv := v - tv
	qw, pr := cv-ca, cc-cv
	if !e.fastPair(qw, ua, uv, st[Append].Host == st[Receive].Host, nsa || nsv, &fl) ||
		!e.fastPair(pr, uv, uc, st[Receive].Host == st[Processed].Host, nsv || nsc, &fl) {
		return false
	}
	delivery := qw + pr
	*res = Result{}
	res.Offset, res.SinceRewindMs, res.Uncertainty, res.Flags = r.Offset, math.NaN(), up+uc, fl
	res.Has = 1<<StageIngest | 1<<StageQueueWait | 1<<StageProcessing | 1<<StageDelivery | 1<<StageE2E
	res.Stages[StageIngest], res.Stages[StageQueueWait], res.Stages[StageProcessing] = ingest, qw, pr
	res.Stages[StageDelivery], res.Stages[StageE2E] = delivery, ingest+delivery
	res.Corrected[Produce], res.Corrected[Append], res.Corrected[Receive], res.Corrected[Processed] = cp, ca, cv, cc
	res.MomentUnc[Produce], res.MomentUnc[Append], res.MomentUnc[Receive], res.MomentUnc[Processed] = up, ua, uv, uc
	qp, qa, qv, qc := quantum(st[Produce].Unit), quantum(st[Append].Unit), quantum(st[Receive].Unit),
		quantum(st[Processed].Unit)
	dp, da, dv, dc := up+qp, ua+qa, uv+qv, uc+qc
	loA := max(cp-dp, ca-da)
	loV := max(loA, cv-dv)
	loC := max(loV, cc-dc)
	hiV := min(cc+dc, cv+dv)
	hiA := min(hiV, ca+da)
	hiP := min(hiA, cp+dp)
	hp, ha, hv, hc := st[Produce].Host, st[Append].Host, st[Receive].Host, st[Processed].Host
	e.fastStage(res, StageIngest, hp, ha, ingest, ca-cp, qp, qa, cp-dp, hiP, loA, hiA)
	e.fastStage(res, StageQueueWait, ha, hv, qw, cv-ca, qa, qv, loA, hiA, loV, hiV)
	e.fastStage(res, StageProcessing, hv, hc, pr, cc-cv, qv, qc, loV, hiV, loC, cc+dc)
	e.fastStage(res, StageDelivery, ha, hc, delivery, cc-ca, qa, qc, loA, hiA, loC, cc+dc)
	e.fastStage(res, StageE2E, hp, hc, res.Stages[StageE2E], cc-cp, qp, qc, cp-dp, hiP, loC, cc+dc)
	return true
}

// fastStage sets the interval of stage s from x to y as fillBounds does: v is its value, raw the difference of its
// ends' corrected times (the fast path's timeline is monotone and never projected), qx and qy its ends' quantisation, [lox, hix] and
// [loy, hiy] its ends' causally tightened intervals.
func (e *Engine) fastStage(res *Result, s Stage, hx, hy HostID, v, raw, qx, qy, lox, hix, loy, hiy float64) {
	var l, u float64
	if hx == hy {
		d := e.pol.driftMax*math.Abs(raw) + qx + qy
		l, u = raw-d, raw+d
	} else {
		l, u = loy-hix, hiy-lox
	}
	res.Lower[s], res.Upper[s] = max(0, min(l, v)), max(u, v) // fillBounds' hull: l ≤ v ≤ u on a monotone timeline
}

// fastStamp converts and resolves one stamp for prepareFast: ms (with the half-millisecond of a ms stamp), the
// offset and its uncertainty, and whether the offset has no drift fit yet (uns); ok is false for anything the general
// path must look at.
func fastStamp(hs hostTable, s *Stamp) (ms, theta, unc float64, uns, ok bool) {
	// An unsigned compare: one test for a negative or too-large unit, and no bounds check below. A value <= 0 fails
	// the plausibility test (every unit's factor is positive). A stale or unknown host id is the general path's.
	h := hs.at(s.Host)
	if uint(s.Unit) >= uint(len(msPerUnit)) || h == nil {
		return 0, 0, 0, false, false
	}
	ms = float64(s.Value) * msPerUnit[s.Unit]
	if !(ms >= minPlausibleMs && ms < maxPlausibleMs) {
		return 0, 0, 0, false, false
	}
	if s.Unit == Millis {
		ms += 0.5
	}
	if s.Host == RefHost {
		return ms, 0, 0, false, true
	}
	sn := h.snap.Load()
	if !sn.two.ok || sn.prev.ok {
		return 0, 0, 0, false, false
	}
	theta, unc = sn.two.at(ms)
	if ms-theta > sn.suspectAt {
		return 0, 0, 0, false, false
	}
	return ms, theta, unc, !sn.two.settled, true
}

// fastPair is checkPair for a pair of a monotone timeline that must not be skew-suspected: it reports false when the
// stage is negative (the general path decides it). A cross-host pair whose uncertainty exceeds max(floor, ratio ×
// stage) sets FlagWide in *fl, and one with an unsettled end (uns) beyond the warm-up target max(2 ms, ratio ×
// stage) FlagUnsettled.
func (e *Engine) fastPair(stage, ux, uy float64, sameHost, uns bool, fl *Flags) bool {
	if stage < 0 {
		return false
	}
	if sameHost {
		return true
	}
	u, limit := ux+uy, e.pol.ratio*stage
	if uns && u > limit && u > accuracyFloorMs {
		*fl |= FlagUnsettled
	}
	if limit < e.pol.floorMs {
		limit = e.pol.floorMs
	}
	if u > limit {
		*fl |= FlagWide
	}
	return true
}
