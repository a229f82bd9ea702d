package latency

import (
	"math"
	"math/bits"
)

// policy is Config's flagging policy in ms; driftMax is MaxDriftPPM as a fraction.
type policy struct{ tolMs, floorMs, ratio, driftMax float64 }

// accuracyFloorMs is the floor of the accuracy target max(2 ms, 2 % of the stage) (docs/latency.md). It replaces
// UncertaintyFloor for a cross-clock stage whose offset has no drift fit yet: such a stage is reported
// FlagUnsettled when its uncertainty could miss the target (information only; its interval says how wide it is).
const accuracyFloorMs = 2

// timeline is one record's valid stamps with their offsets, ready for correction.
type timeline struct {
	valid uint8 // bit per Moment
	obs   [NumMoments]float64
	host  [NumMoments]HostID
	res   [NumMoments]resolved
	q     [NumMoments]float64 // each stamp's quantisation: how far (ms) its true reading may lie from obs
}

// quantum is how far (ms) a stamp's true reading may lie from the value the engine reads it as: half a millisecond
// for a ms stamp (read as the middle of the millisecond it truncates); for a finer one 1 µs, which holds both a
// µs stamp's truncation and the resolution of a float64 of epoch milliseconds (2⁻¹² ms ≈ 0.24 µs until 2109), below
// which a ns stamp's digits are lost anyway.
func quantum(u Unit) float64 {
	if u == Millis || int(u) >= len(msPerUnit) {
		return 0.5
	}
	return 1e-3
}

func (tl *timeline) has(m Moment) bool { return tl.valid&(1<<m) != 0 }

// correct applies the offsets (corrected = observed − offset), flags what cannot be trusted, projects the timeline
// onto the nearest monotone one and fills out's stages. pol holds the flagging policy of Config.
//
// The projection is weighted isotonic regression by pool-adjacent-violators (Ayer et al., "An empirical distribution
// function for sampling with incomplete information", Ann. Math. Statist. 1955; Barlow et al. 1972) with weights
// 1/u² from each moment's offset uncertainty: violations within the uncertainty are resolved by moving the
// least-certain stamps most, so every stage is >= 0 and the stages telescope to end-to-end.
func correct(tl *timeline, pol policy, out *Result) {
	chain := tl.valid &^ (1 << Commit) // present moments in causal order, as bits
	end := Processed
	if tl.valid&(1<<Processed) == 0 && tl.valid&(1<<Commit) != 0 {
		chain |= 1 << Commit
		end = Commit
		out.Flags |= FlagCommitBound
	}
	c := &out.Corrected // corrected time per moment, valid where chain has its bit
	bad, viaFree, monotone := applyOffsets(tl, pol, chain, out)
	if !monotone {
		project(tl, chain, c)
	}
	first := Append // the first append: the source cluster's on a mirrored topic
	if chain&(1<<SourceAppend) != 0 {
		first = SourceAppend
	}
	var st [NumStages]float64
	has := stagesOf(chain, first, end, c, &st)
	if has&(1<<StageE2E) != 0 {
		out.Uncertainty = tl.res[Produce].unc + tl.res[end].unc
	}
	out.Stages, out.Has = st, has
	var r, dlo, dhi [NumMoments]float64 // each moment before the projection, and how far its truth may lie below and above
	boundInputs(tl, chain, &r, &dlo, &dhi)
	one := oneClockStages(tl, has, first, end)
	fillBounds(&out.bounds, has, &st, chain, first, end, &r, &dlo, &dhi, &tl.q, one, pol.driftMax)
	if bad != 0 || !monotone {
		var moved uint8
		out.Untrusted, moved = untrusted(tl, pol, c, bad, viaFree, first, end, has, &st)
		if moved != 0 {
			out.Flags |= FlagProjected
		}
	}
}

// applyOffsets writes each chain moment's corrected time (observed − offset) and offset uncertainty into out, flags
// unknown and envelope offsets, and checks each pair of consecutive moments (checkPair). bad has bit m when the pair
// ending at m was flagged, viaFree when that pair has an end whose offset is unknown or ambiguous; monotone reports
// whether the corrected times are in causal order.
func applyOffsets(tl *timeline, pol policy, chain uint8, out *Result) (bad, viaFree uint8, monotone bool) {
	c := &out.Corrected
	monotone = true
	prev := Moment(NumMoments)
	for v := chain; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		r := &tl.res[m]
		c[m] = tl.obs[m] - r.theta
		out.MomentUnc[m] = r.unc
		switch r.kind {
		case KindUnknown:
			out.MomentUnc[m] = math.Inf(1)
			out.Flags |= FlagOffsetUnknown
		case KindEnvelope:
			out.Flags |= FlagEnvelope
		}
		if prev < NumMoments {
			if checkPair(tl, pol, prev, m, c[m]-c[prev], out) {
				bad |= 1 << m
				if tl.res[prev].free() || r.free() {
					viaFree |= 1 << m
				}
			}
			if c[m] < c[prev] {
				monotone = false
			}
		}
		prev = m
	}
	return bad, viaFree, monotone
}

// stagesOf writes into st the stages the corrected moments c of chain yield (first: the first append, end: processed
// or the commit) and returns them as bits. Where ingest and delivery (and mirror on a mirrored topic) are all present,
// end-to-end is their sum, so that the stages add up to it exactly.
func stagesOf(chain uint8, first, end Moment, c *[NumMoments]float64, st *[NumStages]float64) (has uint8) {
	const (
		bP  = 1 << Produce
		bSA = 1 << SourceAppend
		bA  = 1 << Append
		bR  = 1 << Receive
	)
	bE := uint8(1) << end
	if chain&bP != 0 && chain&(1<<first) != 0 {
		st[StageIngest], has = c[first]-c[Produce], has|1<<StageIngest
	}
	if chain&bSA != 0 && chain&bA != 0 {
		st[StageMirror], has = c[Append]-c[SourceAppend], has|1<<StageMirror
	}
	if chain&bA != 0 {
		switch {
		case chain&bR != 0:
			st[StageQueueWait], has = c[Receive]-c[Append], has|1<<StageQueueWait
			if chain&bE != 0 {
				st[StageProcessing] = c[end] - c[Receive]
				st[StageDelivery] = st[StageQueueWait] + st[StageProcessing]
				has |= 1<<StageProcessing | 1<<StageDelivery
			}
		case chain&bE != 0:
			st[StageDelivery], has = c[end]-c[Append], has|1<<StageDelivery
		}
	}
	if chain&bP != 0 && chain&bE != 0 {
		const full = 1<<StageIngest | 1<<StageDelivery
		switch {
		case has&full == full && first == Append:
			st[StageE2E] = st[StageIngest] + st[StageDelivery]
		case has&full == full && has&(1<<StageMirror) != 0:
			st[StageE2E] = st[StageIngest] + st[StageMirror] + st[StageDelivery]
		default:
			st[StageE2E] = c[end] - c[Produce]
		}
		has |= 1 << StageE2E
	}
	return has
}

// boundInputs writes, for each chain moment, its corrected time before the projection (r) and how far its true time
// may lie below (dlo) and above (dhi) it: offset uncertainty plus quantisation, +Inf on a side its offset does not
// bound (unknown or ambiguous offsets on both; a one-sided envelope on the side it leaves open).
func boundInputs(tl *timeline, chain uint8, r, dlo, dhi *[NumMoments]float64) {
	for v := chain; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		rm := &tl.res[m]
		r[m] = tl.obs[m] - rm.theta
		d := rm.unc + tl.q[m]
		dlo[m], dhi[m] = d, d
		switch {
		case rm.free():
			dlo[m], dhi[m] = math.Inf(1), math.Inf(1)
		case rm.side > 0: // an earlier moment's host bounded from below: its true time is at most r + d
			dlo[m] = math.Inf(1)
		case rm.side < 0:
			dhi[m] = math.Inf(1)
		}
	}
}

// oneClockStages returns, as bits, the stages of has between two stamps of one clock corrected with one fit.
func oneClockStages(tl *timeline, has uint8, first, end Moment) (one uint8) {
	for v := has; v != 0; v &= v - 1 {
		s := Stage(bits.TrailingZeros8(v))
		if x, y := stageEnds(s, first, end); sameClock(tl.host[x], tl.host[y]) && tl.res[x].before == tl.res[y].before {
			one |= 1 << s
		}
	}
	return one
}

// fillBounds sets b's interval of every stage in has, st holding the stages' values (docs/latency.md,
// "Intervals"). r holds each
// chain moment's corrected time before the projection, dlo and dhi how far its true time may lie below and above it
// (offset uncertainty plus quantisation; +Inf on a side the offset does not bound), q each stamp's quantisation.
//
// Causal order tightens each moment: its true time is at least every earlier moment's lower end and at most every
// later moment's upper end, so it lies in [L_m, H_m] with L_m = max_{k≤m}(r_k − dlo_k), H_m = min_{k≥m}(r_k + dhi_k).
// A stage x → y across two clocks is then in [max(0, L_y − H_x), H_y − L_x]; moments of unknown offset have
// infinite dlo and dhi and so take no part, which is why an end-to-end never depends on the broker between its ends
// beyond what that broker's own interval allows. A stage between two stamps of one clock carries none of its
// offset (the stages in one, whose two stamps one clock took and one fit corrected: a detected step between them
// makes them two offsets): it is the stamps' difference within MaxDriftPPM × |stage| plus both quantisations. Each
// interval is finally widened to hold the estimate (the projection may place it at the edge), which keeps it a
// bound; on a monotone timeline lower ≤ estimate ≤ upper already (every moment lies within its own interval).
func fillBounds(b *stageBounds, has uint8, st *[NumStages]float64, chain uint8, first, end Moment,
	r, dlo, dhi, q *[NumMoments]float64, one uint8, driftMax float64) {
	var lo, hi [NumMoments]float64
	run := math.Inf(-1)
	for v := chain; v != 0; v &= v - 1 {
		m := bits.TrailingZeros8(v)
		run = max(run, r[m]-dlo[m])
		lo[m] = run
	}
	run = math.Inf(1)
	for m := int(NumMoments) - 1; m >= 0; m-- {
		if chain&(1<<m) != 0 {
			run = min(run, r[m]+dhi[m])
			hi[m] = run
		}
	}
	for ; has != 0; has &= has - 1 {
		s := Stage(bits.TrailingZeros8(has))
		x, y := stageEnds(s, first, end)
		v := st[s]
		var l, u float64
		if one&(1<<s) != 0 {
			d := driftMax*math.Abs(r[y]-r[x]) + q[x] + q[y]
			l, u = (r[y]-r[x])-d, (r[y]-r[x])+d
		} else {
			l, u = lo[y]-hi[x], hi[y]-lo[x]
		}
		// The hull of both ends and the estimate: l > u only where the stamps' own intervals disagree by less than
		// SkewTolerance (more would have been flagged), and the truth then lies between them.
		b.lower[s], b.upper[s] = max(0, min(l, u, v)), max(l, u, v)
	}
}

// untrusted returns the stages (bits of has) that cannot be trusted, and of those the ones that only the projection
// made untrusted (moved). A stage whose two ends one clock stamped is trusted unless the projection changed it: its
// offsets cancel, whatever their uncertainty. A cross-clock stage is untrusted when an end's offset is unknown or
// ambiguous, when it spans a flagged pair of two known stamps, when it spans a pair flagged only because of an
// unknown stamp in between and its own two ends violate their order beyond their uncertainty directly, or when the
// projection moved one of its end points beyond that end's own uncertainty (plus SkewTolerance): it was moved
// because of another pair, further than that end's clock can be wrong, and its value is then the projection's, not
// the stamps'. Wideness is never a reason.
func untrusted(tl *timeline, pol policy, c *[NumMoments]float64, bad, viaFree uint8, first, end Moment, has uint8,
	st *[NumStages]float64) (out, moved uint8) {
	for s := Stage(0); s < NumStages; s++ {
		if has&(1<<s) == 0 {
			continue
		}
		x, y := stageEnds(s, first, end)
		rx, ry := tl.obs[x]-tl.res[x].theta, tl.obs[y]-tl.res[y].theta // before the projection
		if sameClock(tl.host[x], tl.host[y]) {
			if raw := ry - rx; raw >= 0 && math.Abs((c[y]-c[x])-raw) <= 1e-9*math.Max(1, raw) {
				continue
			}
			out |= 1 << s
			if bad&spanBits(x, y) == 0 {
				moved |= 1 << s
			}
			continue
		}
		span := spanBits(x, y)
		if tl.res[x].free() || tl.res[y].free() || bad&^viaFree&span != 0 ||
			(viaFree&span != 0 && violated(tl, pol, x, y, ry-rx)) {
			out |= 1 << s
			continue
		}
		if math.Abs(c[x]-rx) > tl.res[x].unc+tl.q[x]+pol.tolMs || math.Abs(c[y]-ry) > tl.res[y].unc+tl.q[y]+pol.tolMs {
			out |= 1 << s
			moved |= 1 << s
		}
	}
	return out, moved
}

// violated applies checkPair's order rule, without flagging or blaming, to two known stamps a < b of different
// clocks that are not consecutive (an unknown stamp lies between them): stage is c_b − c_a before the projection.
func violated(tl *timeline, pol policy, a, b Moment, stage float64) bool {
	return -stage > tl.res[a].unc+tl.res[b].unc+pol.tolMs
}

// sameClock reports whether two stamps were read on one clock: the same host, and not UnknownHost (two stamps of
// unknown hosts may be two different clocks).
func sameClock(a, b HostID) bool { return a == b && a != UnknownHost }

// stageEnds returns the moments a stage runs between; first is the first append (SourceAppend on a mirrored topic),
// end is Processed or, commit-bounded, Commit.
func stageEnds(s Stage, first, end Moment) (x, y Moment) {
	switch s {
	case StageIngest:
		return Produce, first
	case StageMirror:
		return SourceAppend, Append
	case StageQueueWait:
		return Append, Receive
	case StageProcessing:
		return Receive, end
	case StageDelivery:
		return Append, end
	}
	return Produce, end
}

// spanBits returns the moments in (x, y] as bits: the pairs, named by their later moment, that a stage x → y spans.
func spanBits(x, y Moment) uint8 { return uint8(1)<<(y+1) - uint8(1)<<(x+1) }

// stageUnc is the uncertainty (ms) of the stage between moments a and b, of length stage ms. Stamped by two hosts,
// it is the sum of their offset uncertainties (each is a hard bound, so the worst cases add). Stamped by one host,
// its offset cancels in the difference whatever its uncertainty (even unknown); only the clock's rate error over
// the stage remains, at most MaxDriftPPM × |stage|.
func stageUnc(tl *timeline, pol policy, a, b Moment, stage float64) float64 {
	if sameClock(tl.host[a], tl.host[b]) {
		return pol.driftMax * math.Abs(stage)
	}
	return tl.res[a].unc + tl.res[b].unc
}

// project replaces the corrected times c of the chain's moments by the nearest monotone timeline (weighted least
// squares) in which a run of consecutive moments stamped by one host keeps its own gaps: that host's offset cancels
// in them, so they are exact whatever its uncertainty, and only the run as a whole may move. A run whose own clock
// went backwards (a negative gap) is split there and projected like stamps of different hosts.
//
// Rigid runs reduce to plain isotonic regression: with run k starting at y_k, spanning len_k, and L_k the summed
// spans of the runs before it, the order constraints y_k + len_k <= y_{k+1} are exactly z_k <= z_{k+1} for
// z_k = y_k − L_k. Each run weighs the sum of its stamps' weights 1/(u² + 0.25).
//
// A run whose offset is unknown or ambiguous is free: its uncorrected reading says nothing about where it lies on
// the reference clock, so it takes no part in the weighted fit (it must not pull the known stamps, however
// uncertain they are) and then moves only as far as order requires: to the nearest end of the interval the
// projected known runs around it allow, never into the middle of it. Consecutive free runs are first made monotone
// among themselves (unweighted pool-adjacent-violators; the clamped solution of that is the bounded isotonic fit).
func project(tl *timeline, chain uint8, c *[NumMoments]float64) {
	var rs runs
	rs.cut(tl, chain, c)
	rs.fitKnown()
	rs.fitFree()
	rs.place(chain, c)
}

// runs is project's working set: the chain cut into rigid runs (index k < n), each with its position z_k in the
// shifted coordinates of the isotonic fit, its weight, its span, its first moment and whether it is free.
type runs struct {
	n          int
	z, w, span [NumMoments]float64
	nfree      [NumMoments]float64 // free stamps per run: a free run's weight
	free       [NumMoments]bool
	first      [NumMoments]Moment
	runOf      [NumMoments]int // run index per moment
}

// cut splits the chain into runs (a new run at every change of clock and wherever one clock went backwards),
// weighs them, and shifts each run's start by the summed spans of the runs before it (z_k = y_k − L_k).
func (rs *runs) cut(tl *timeline, chain uint8, c *[NumMoments]float64) {
	n := -1
	var prev Moment = NumMoments
	for v := chain; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		r := &tl.res[m]
		if n < 0 || !sameClock(tl.host[m], tl.host[prev]) || c[m] < c[prev] {
			n++
			rs.first[n], rs.z[n], rs.w[n], rs.span[n], rs.free[n], rs.nfree[n] = m, c[m], 0, 0, true, 0
		}
		// A run is free when all its stamps are; its weight is its known stamps' (or, free, how many it has).
		if r.free() {
			rs.nfree[n]++
		} else {
			if rs.free[n] {
				rs.free[n], rs.w[n] = false, 0
			}
			rs.w[n] += 1 / (r.unc*r.unc + 0.25)
		}
		if rs.free[n] {
			rs.w[n] = rs.nfree[n]
		}
		rs.span[n] = c[m] - c[rs.first[n]]
		rs.runOf[m] = n
		prev = m
	}
	rs.n = n + 1
	var lens float64 // summed spans of the runs before run k
	for k := 0; k < rs.n; k++ {
		rs.z[k] -= lens
		lens += rs.span[k]
	}
}

// fitKnown fits the known runs by weighted pool-adjacent-violators, without the free ones.
func (rs *runs) fitKnown() {
	var fz, fw [NumMoments]float64
	var fixed [NumMoments]int
	nf := 0
	for k := 0; k < rs.n; k++ {
		if !rs.free[k] {
			fz[nf], fw[nf], fixed[nf] = rs.z[k], rs.w[k], k
			nf++
		}
	}
	pav(fz[:nf], fw[:nf])
	for i := 0; i < nf; i++ {
		rs.z[fixed[i]] = fz[i]
	}
}

// fitFree makes each gap of free runs between two known ones (or the chain's ends) monotone among themselves, then
// clamps it between the fitted known runs around it.
func (rs *runs) fitFree() {
	lo := math.Inf(-1)
	for k := 0; k < rs.n; {
		if !rs.free[k] {
			lo = rs.z[k]
			k++
			continue
		}
		j := k
		for j < rs.n && rs.free[j] {
			j++
		}
		hi := math.Inf(1)
		if j < rs.n {
			hi = rs.z[j]
		}
		pav(rs.z[k:j], rs.w[k:j])
		for i := k; i < j; i++ {
			rs.z[i] = math.Min(math.Max(rs.z[i], lo), hi)
		}
		k = j
	}
}

// place moves every moment of the chain with its run: run k starts at z_k + L_k and keeps its internal gaps.
func (rs *runs) place(chain uint8, c *[NumMoments]float64) {
	var orig [NumMoments]float64
	copy(orig[:], c[:])
	var lens float64
	var start [NumMoments]float64
	for k := 0; k < rs.n; k++ {
		start[k] = rs.z[k] + lens
		lens += rs.span[k]
	}
	for v := chain; v != 0; v &= v - 1 {
		m := Moment(bits.TrailingZeros8(v))
		k := rs.runOf[m]
		c[m] = start[k] + (orig[m] - orig[rs.first[k]])
	}
}

// checkPair flags and blames the consecutive moments a < b (on the corrected timeline, stage = c_b − c_a) when they
// are invalid (an offset unknown or ambiguous, an order violated beyond the uncertainty), and reports whether it
// flagged them. A valid pair whose uncertainty exceeds max(floor, ratio × stage) is marked FlagWide, and one resting
// on an unsettled offset beyond the warm-up target FlagUnsettled: information, never a reason to leave it out. Only
// a pair across two clocks can carry offset uncertainty; a pair on one clock is flagged only when that clock ran
// backwards.
func checkPair(tl *timeline, pol policy, a, b Moment, stage float64, out *Result) bool {
	ha, hb := tl.host[a], tl.host[b]
	u := stageUnc(tl, pol, a, b, stage)
	if sameClock(ha, hb) {
		if -stage > u+pol.tolMs { // one clock went backwards between two of its own stamps: that host is broken
			out.Flags |= FlagSkewSuspected
			out.blame(ha)
			return true
		}
		return false
	}
	ra, rb := &tl.res[a], &tl.res[b]
	if !(ra.kind == KindUnknown || rb.kind == KindUnknown || ra.ambiguous || rb.ambiguous || -stage > u+pol.tolMs) {
		if u > math.Max(pol.floorMs, pol.ratio*stage) {
			out.Flags |= FlagWide
		}
		if (ra.unsettled || rb.unsettled) && u > math.Max(accuracyFloorMs, pol.ratio*stage) {
			out.Flags |= FlagUnsettled
		}
		return false
	}
	out.Flags |= FlagSkewSuspected
	riskA, riskB := risk(ra), risk(rb)
	switch {
	case riskA > riskB:
		out.blame(ha)
	case riskB > riskA:
		out.blame(hb)
	case isBrokerMoment(a) && !isBrokerMoment(b):
		out.blame(hb)
	default:
		out.blame(ha)
	}
	return true
}

// risk orders two hosts for blame: unknown or ambiguous offsets first, then the larger uncertainty.
func risk(r *resolved) float64 {
	if r.kind == KindUnknown || r.ambiguous {
		return math.Inf(1)
	}
	return r.unc
}

func isBrokerMoment(m Moment) bool { return m == Append || m == SourceAppend }

// pav replaces y by its weighted isotonic (non-decreasing) regression in place (pool adjacent violators).
func pav(y, w []float64) {
	n := len(y)
	if n < 2 {
		return
	}
	// Blocks as (value, weight, length) on a small stack; n <= NumMoments.
	var bv, bw [NumMoments]float64
	var bl [NumMoments]int
	k := 0
	for i := 0; i < n; i++ {
		bv[k], bw[k], bl[k] = y[i], w[i], 1
		k++
		for k > 1 && bv[k-2] > bv[k-1] {
			nw := bw[k-2] + bw[k-1]
			bv[k-2] = (bv[k-2]*bw[k-2] + bv[k-1]*bw[k-1]) / nw
			bw[k-2] = nw
			bl[k-2] += bl[k-1]
			k--
		}
	}
	i := 0
	for b := 0; b < k; b++ {
		for j := 0; j < bl[b]; j++ {
			y[i] = bv[b]
			i++
		}
	}
}
