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
		hp, ha, hc := st[Produce].Host, st[Append].Host, st[Processed].Host
		b := &res.bounds
		b.lazy, b.driftMax = true, e.pol.driftMax
		b.ms = bit(st[Produce].Unit == Millis, uint8(Produce)) | bit(st[Append].Unit == Millis, uint8(Append)) |
			bit(st[Processed].Unit == Millis, uint8(Processed))
		b.one = bit(hp == ha, uint8(StageIngest)) | bit(ha == hc, uint8(StageDelivery)) | bit(hp == hc, uint8(StageE2E))
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
	hp, ha, hv, hc := st[Produce].Host, st[Append].Host, st[Receive].Host, st[Processed].Host
	b := &res.bounds
	b.lazy, b.driftMax = true, e.pol.driftMax
	b.ms = bit(st[Produce].Unit == Millis, uint8(Produce)) | bit(st[Append].Unit == Millis, uint8(Append)) |
		bit(st[Receive].Unit == Millis, uint8(Receive)) | bit(st[Processed].Unit == Millis, uint8(Processed))
	b.one = bit(hp == ha, uint8(StageIngest)) | bit(ha == hv, uint8(StageQueueWait)) | bit(hv == hc, uint8(StageProcessing)) |
		bit(ha == hc, uint8(StageDelivery)) | bit(hp == hc, uint8(StageE2E))
	return true
}

// bit returns 1<<n when c holds, else 0. With the fields res.bounds.lazy, ms, one and driftMax it is all the
// straight-line path records for its intervals: Result.StageBounds computes them on demand from those and the
// corrected moments and their uncertainties (the timeline is monotone and every offset two-sided), exactly as the
// general path's fillBounds does at once (TestFastPathMatchesGeneral).
func bit(c bool, n uint8) uint8 {
	if c {
		return 1 << n
	}
	return 0
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
	// The flags are set without branches: whether a pair is wide depends on each record's own stage, which a
	// branch predictor cannot foresee.
	u, limit := ux+uy, e.pol.ratio*stage
	var uf, wf Flags
	if uns && u > max(limit, accuracyFloorMs) {
		uf = FlagUnsettled
	}
	if u > max(limit, e.pol.floorMs) {
		wf = FlagWide
	}
	*fl |= uf | wf
	return true
}
