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
	// Each stamp's host, its value in ms, and its host's offset there; the helpers are small enough for the
	// compiler to inline, which one function per stamp is not (three calls cost about 2 ns a record).
	// Per stamp: its host, its value in ms, its host's offset there. The helpers are small enough for the compiler
	// to inline; one function per stamp is not, and its three calls cost about 2 ns of a record's 80.
	sp, sa, sc := &st[Produce], &st[Append], &st[Processed]
	var tp, up, ta, ua, tc, uc float64
	var nsp, nsa, nsc bool
	hp := hs.at(sp.Host)
	p, ok := stampMs(sp)
	if hp == nil || !ok {
		return false
	}
	if sp.Host != RefHost {
		if tp, up, nsp, ok = hp.snap.Load().fastOffset(p); !ok {
			return false
		}
	}
	ha := hs.at(sa.Host)
	a, ok := stampMs(sa)
	if ha == nil || !ok {
		return false
	}
	if sa.Host != RefHost {
		if ta, ua, nsa, ok = ha.snap.Load().fastOffset(a); !ok {
			return false
		}
	}
	hc := hs.at(sc.Host)
	c, ok := stampMs(sc)
	if hc == nil || !ok {
		return false
	}
	if sc.Host != RefHost {
		if tc, uc, nsc, ok = hc.snap.Load().fastOffset(c); !ok {
			return false
		}
	}
	// Bounds.Check for produce (before the append: old up to MaxAge, ahead up to MaxSkew) and processed (the reverse).
	if p-a < -e.bounds.age || p-a > e.bounds.skew || c-a < -e.bounds.skew || c-a > e.bounds.age {
		return false
	}
	cp, ca, cc := p-tp, a-ta, c-tc
	ingest := ca - cp
	var fl Flags // FlagWide, FlagUnsettled: information only
	if !e.fastPair(ingest, up, ua, sp.Host == sa.Host, nsp || nsa, &fl) {
		return false
	}
	if st[Receive].Value == 0 {
		delivery := cc - ca
		if !e.fastPair(delivery, ua, uc, sa.Host == sc.Host, nsa || nsc, &fl) {
			return false
		}
		*res = Result{} // cleared in place: a composite literal here is built aside and copied
		res.Offset, res.SinceRewindMs, res.Uncertainty, res.Flags = r.Offset, math.NaN(), up+uc, fl
		res.Has = 1<<StageIngest | 1<<StageDelivery | 1<<StageE2E
		res.Stages[StageIngest], res.Stages[StageDelivery], res.Stages[StageE2E] = ingest, delivery, ingest+delivery
		res.Corrected[Produce], res.Corrected[Append], res.Corrected[Processed] = cp, ca, cc
		res.MomentUnc[Produce], res.MomentUnc[Append], res.MomentUnc[Processed] = up, ua, uc
		ip, ia, ic := sp.Host, sa.Host, sc.Host
		b := &res.bounds
		b.lazy, b.driftMax = true, e.pol.driftMax
		b.ms = bit(st[Produce].Unit == Millis, uint8(Produce)) | bit(st[Append].Unit == Millis, uint8(Append)) |
			bit(st[Processed].Unit == Millis, uint8(Processed))
		b.one = bit(ip == ia, uint8(StageIngest)) | bit(ia == ic, uint8(StageDelivery)) | bit(ip == ic, uint8(StageE2E))
		return true
	}
	sv := &st[Receive]
	hv := hs.at(sv.Host)
	v, ok := stampMs(sv)
	if hv == nil || !ok || v-a < -e.bounds.skew || v-a > e.bounds.age {
		return false
	}
	var tv, uv float64
	var nsv bool
	if sv.Host != RefHost {
		if tv, uv, nsv, ok = hv.snap.Load().fastOffset(v); !ok {
			return false
		}
	}
	cv := v - tv
	qw, pr := cv-ca, cc-cv
	if !e.fastPair(qw, ua, uv, sa.Host == sv.Host, nsa || nsv, &fl) ||
		!e.fastPair(pr, uv, uc, sv.Host == sc.Host, nsv || nsc, &fl) {
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
	ip, ia, iv, ic := sp.Host, sa.Host, sv.Host, sc.Host
	b := &res.bounds
	b.lazy, b.driftMax = true, e.pol.driftMax
	b.ms = bit(st[Produce].Unit == Millis, uint8(Produce)) | bit(st[Append].Unit == Millis, uint8(Append)) |
		bit(st[Receive].Unit == Millis, uint8(Receive)) | bit(st[Processed].Unit == Millis, uint8(Processed))
	b.one = bit(ip == ia, uint8(StageIngest)) | bit(ia == iv, uint8(StageQueueWait)) | bit(iv == ic, uint8(StageProcessing)) |
		bit(ia == ic, uint8(StageDelivery)) | bit(ip == ic, uint8(StageE2E))
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

// stampMs returns a stamp's value in ms on its own clock, a ms stamp taken as the middle of its millisecond
// (v + 0.5); ok is false for a unit it does not know or a value outside [minPlausibleMs, maxPlausibleMs) (every
// unit's factor is positive, so a value <= 0 fails too): the general path says why.
func stampMs(s *Stamp) (ms float64, ok bool) {
	// An unsigned compare: one test for a negative or too-large unit, and no bounds check below.
	if uint(s.Unit) >= uint(len(msPerUnit)) {
		return 0, false
	}
	ms = float64(s.Value) * msPerUnit[s.Unit]
	ok = ms >= minPlausibleMs && ms < maxPlausibleMs
	if s.Unit == Millis {
		ms += 0.5
	}
	return ms, ok
}

// fastOffset returns, for the straight-line path, the offset (ms) of the snapshot's host at its own reading ms and
// that offset's uncertainty, and whether the offset has no drift fit yet (uns); ok is false for anything the general
// path must look at: no two-sided estimate, a step in view, or a reading beyond the point where the window turned
// suspect.
func (sn *hostSnap) fastOffset(ms float64) (theta, unc float64, uns, ok bool) {
	theta, unc = sn.two.at(ms)
	return theta, unc, !sn.two.settled, sn.two.ok && !sn.prev.ok && ms-theta <= sn.suspectAt
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
