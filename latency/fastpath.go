package latency

import "math"

// prepareFast handles the common record in a straight line: produce, append, optionally receive, and processed
// stamps, all valid and within bounds, on hosts that are the reference or have a settled two-sided estimate with no
// step in view, whose corrected timeline is already monotone and whose uncertainties pass the flag policy. It then
// writes exactly what prepareGeneral would (TestFastPathMatchesGeneral holds it to that) and reports true; any other
// record makes it report false, having written nothing the general path does not overwrite.
//
// It exists because the general path's loops and cases cost about three times the arithmetic on records that need
// none of them (docs/latency.md, throughput).
func (e *Engine) prepareFast(hs []*hostState, r *Record, res *Result) bool {
	st := &r.Stamps
	if st[SourceAppend].Value != 0 || st[Commit].Value != 0 {
		return false
	}
	p, tp, up, ok := fastStamp(hs, &st[Produce])
	if !ok {
		return false
	}
	a, ta, ua, ok := fastStamp(hs, &st[Append])
	if !ok {
		return false
	}
	c, tc, uc, ok := fastStamp(hs, &st[Processed])
	// Bounds.Check for produce (before the append: old up to MaxAge, ahead up to MaxSkew) and processed (the reverse).
	if !ok || p-a < -e.bounds.age || p-a > e.bounds.skew || c-a < -e.bounds.skew || c-a > e.bounds.age {
		return false
	}
	cp, ca, cc := p-tp, a-ta, c-tc
	ingest := ca - cp
	if !e.fastPair(ingest, up, ua, st[Produce].Host == st[Append].Host) {
		return false
	}
	if st[Receive].Value == 0 {
		delivery := cc - ca
		if !e.fastPair(delivery, ua, uc, st[Append].Host == st[Processed].Host) {
			return false
		}
		*res = Result{} // cleared in place: a composite literal here is built aside and copied
		res.Offset, res.SinceRewindMs, res.Uncertainty = r.Offset, math.NaN(), up+uc
		res.Has = 1<<StageIngest | 1<<StageDelivery | 1<<StageE2E
		res.Stages[StageIngest], res.Stages[StageDelivery], res.Stages[StageE2E] = ingest, delivery, ingest+delivery
		res.Corrected[Produce], res.Corrected[Append], res.Corrected[Processed] = cp, ca, cc
		return true
	}
	v, tv, uv, ok := fastStamp(hs, &st[Receive])
	if !ok || v-a < -e.bounds.skew || v-a > e.bounds.age {
		return false
	}
	cv := v - tv
	qw, pr := cv-ca, cc-cv
	if !e.fastPair(qw, ua, uv, st[Append].Host == st[Receive].Host) ||
		!e.fastPair(pr, uv, uc, st[Receive].Host == st[Processed].Host) {
		return false
	}
	delivery := qw + pr
	*res = Result{}
	res.Offset, res.SinceRewindMs, res.Uncertainty = r.Offset, math.NaN(), up+uc
	res.Has = 1<<StageIngest | 1<<StageQueueWait | 1<<StageProcessing | 1<<StageDelivery | 1<<StageE2E
	res.Stages[StageIngest], res.Stages[StageQueueWait], res.Stages[StageProcessing] = ingest, qw, pr
	res.Stages[StageDelivery], res.Stages[StageE2E] = delivery, ingest+delivery
	res.Corrected[Produce], res.Corrected[Append], res.Corrected[Receive], res.Corrected[Processed] = cp, ca, cv, cc
	return true
}

// fastStamp converts and resolves one stamp for prepareFast: ms (with the half-millisecond of a ms stamp), the
// offset and its uncertainty; ok is false for anything the general path must look at.
func fastStamp(hs []*hostState, s *Stamp) (ms, theta, unc float64, ok bool) {
	if s.Value <= 0 || s.Unit > Nanos || s.Host < 0 || int(s.Host) >= len(hs) {
		return 0, 0, 0, false
	}
	ms = float64(s.Value) * msPerUnit[s.Unit]
	if !(ms >= minPlausibleMs && ms < maxPlausibleMs) {
		return 0, 0, 0, false
	}
	if s.Unit == Millis {
		ms += 0.5
	}
	if s.Host == RefHost {
		return ms, 0, 0, true
	}
	sn := hs[s.Host].snap.Load()
	if !sn.two.ok || sn.prev.ok || !sn.two.settled {
		return 0, 0, 0, false
	}
	theta, unc = sn.two.at(ms)
	if ms-theta > sn.suspectAt {
		return 0, 0, 0, false
	}
	return ms, theta, unc, true
}

// fastPair is correct's pair check for a stage that must pass without a flag: non-negative (monotone), and, across
// two hosts, an uncertainty within max(floor, ratio × stage).
func (e *Engine) fastPair(stage, ux, uy float64, sameHost bool) bool {
	if stage < 0 {
		return false
	}
	if sameHost {
		return true
	}
	limit := e.pol.ratio * stage
	if limit < e.pol.floorMs {
		limit = e.pol.floorMs
	}
	return ux+uy <= limit
}
