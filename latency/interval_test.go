package latency

import (
	"math"
	"testing"
	"time"
)

// TestStageIntervals: every present stage carries [Lower, Upper] on the reference clock, propagated from the offsets
// of exactly the clocks it spans. Producer ±3 ms, broker ±1 ms, consumer ±2 ms (reported, offsets 0), ms stamps
// (±0.5 ms each): produce 0.5, append 20.5, receive 60.5, processed 70.5 ms as read. Each moment's truth lies within
// its reading ± (uncertainty + 0.5), tightened by order: produce [−3, 4] (at most the append's upper end... here its
// own 4), append [19, 22], receive [58, 63], processed [68, 73]. A cross-clock stage x → y is [L_y − H_x, H_y − L_x];
// processing (one clock) is its 10 ms ± (100 ppm × 10 ms + 2 × 0.5 ms). The drift allowance since the reports adds
// up to 100 ppm × 70 ms = 0.007 ms per end.
func TestStageIntervals(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	for h, u := range map[string]time.Duration{"P1": 3 * time.Millisecond, "B1": time.Millisecond, "C1": 2 * time.Millisecond} {
		if err := e.ReportOffset(e.Host(h), 0, u, base); err != nil {
			t.Fatal(err)
		}
	}
	var r Record
	r.Offset = 1
	r.Stamps[Produce] = MillisStamp(e.Host("P1"), ms(base))
	r.Stamps[Append] = MillisStamp(e.Host("B1"), ms(base.Add(20*time.Millisecond)))
	r.Stamps[Receive] = MillisStamp(e.Host("C1"), ms(base.Add(60*time.Millisecond)))
	r.Stamps[Processed] = MillisStamp(e.Host("C1"), ms(base.Add(70*time.Millisecond)))
	res := e.Path("g", "t", 0).Observe(r)
	tests := []struct {
		name   string
		s      Stage
		lo, hi float64
	}{
		{"ingest: append [19, 22] after produce [−3, 4]", StageIngest, 15, 25},
		{"queue wait: receive [58, 63] after append [19, 22]", StageQueueWait, 36, 44},
		{"processing: one clock, its offset cancels", StageProcessing, 10 - 1.001, 10 + 1.001},
		{"delivery: processed [68, 73] after append", StageDelivery, 46, 54},
		{"e2e: processed after produce, the broker's offset takes no part", StageE2E, 64, 76},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi, ok := res.StageBounds(tc.s)
			if !ok || math.Abs(lo-tc.lo) > 0.02 || math.Abs(hi-tc.hi) > 0.02 { // 0.02: the drift allowance since the reports
				t.Fatalf("StageBounds(%v) = [%v, %v] (%v), want [%v, %v]", tc.s, lo, hi, ok, tc.lo, tc.hi)
			}
			if v := res.Stages[tc.s]; v < lo || v > hi || res.Width(tc.s) != hi-lo {
				t.Fatalf("estimate %v outside [%v, %v] or width %v", v, lo, hi, res.Width(tc.s))
			}
		})
	}
	if res.Flags&^FlagWide != 0 || !res.Live {
		t.Errorf("flags %b live %v: a wide record is live", res.Flags, res.Live)
	}
	if _, _, ok := res.StageBounds(StageMirror); ok {
		t.Error("an absent stage has an interval")
	}
}

// TestE2EIndependentOfUnknownBroker: producer and consumer both well known (reported ±1 and ±2 ms),
// the append stamped by a broker whose clock is not known. The end-to-end does not depend on that broker: it is
// trusted, fed to the live percentiles, and its interval is the two known ends' (e2e 100 ms ± (1 + 2 + 2 × 0.5) ms).
func TestE2EIndependentOfUnknownBroker(t *testing.T) {
	tests := []struct {
		name string
		// broker returns the append stamp's host: UnknownHost when the partition's leader is not known, or a named
		// broker nothing has measured (it is then placed between its two known neighbours by the causal envelope).
		broker func(e *Engine) HostID
		// stagesOut: ingest and delivery rest on an append whose clock is not placed at all: kept out. Their
		// intervals still hold by causal order alone: [0, 104], nothing longer than the end-to-end's upper end.
		stagesOut bool
	}{
		{"leader not known", func(*Engine) HostID { return UnknownHost }, true},
		// The envelope places it from this very record: every stage kept, the record live.
		{"broker never measured", func(e *Engine) HostID { return e.Host("B-new") }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := at("2026-11-29T12:00:00Z")
			e := mustEngine(t, Config{})
			p, c := e.Host("P"), e.Host("C")
			reportAt(t, e, p, 0, 1, base)
			reportAt(t, e, c, 0, 2, base.Add(100*time.Millisecond))
			var r Record
			r.Offset = 1
			r.Stamps[Produce] = MillisStamp(p, ms(base))
			r.Stamps[Append] = MillisStamp(tc.broker(e), ms(base.Add(30*time.Millisecond)))
			r.Stamps[Processed] = MillisStamp(c, ms(base.Add(100*time.Millisecond)))
			path := e.Path("g", "t", 0)
			res := path.Observe(r)
			if !res.Trusted(StageE2E) {
				t.Fatalf("e2e between two known clocks untrusted (flags %b, untrusted %b)", res.Flags, res.Untrusted)
			}
			wantStageMs(t, res, StageE2E, 100)
			if lo, hi, _ := res.StageBounds(StageE2E); math.Abs(lo-96) > 0.05 || math.Abs(hi-104) > 0.05 {
				t.Errorf("e2e interval [%v, %v], want [96, 104]", lo, hi)
			}
			for _, s := range []Stage{StageIngest, StageDelivery} {
				lo, hi, _ := res.StageBounds(s)
				if res.Trusted(s) == tc.stagesOut {
					t.Errorf("%s trusted %v, want kept out: %v", s, res.Trusted(s), tc.stagesOut)
				}
				if tc.stagesOut && (lo != 0 || math.Abs(hi-104) > 0.05) {
					t.Errorf("%s interval [%v, %v], want [0, 104]", s, lo, hi)
				}
			}
			snap := path.Snapshot()
			want := 1.0
			if tc.stagesOut {
				want = 0
			}
			if snap.Live[StageE2E].Count() != 1 || snap.Live[StageIngest].Count() != want || snap.Live[StageDelivery].Count() != want {
				t.Errorf("live samples e2e %v ingest %v delivery %v, want 1, %v, %v", snap.Live[StageE2E].Count(),
					snap.Live[StageIngest].Count(), snap.Live[StageDelivery].Count(), want, want)
			}
		})
	}
}

// TestEnvelopeBoundHoldsTruth: a consumer 300 ms behind the reference, placed only by the causal envelope against a
// broker whose reported offset is −0.4 ± 0.5 ms (true 0). Every record is processed 0.01 ms after its append, both
// stamped in ms. The tightest bound obs_C − (obs_A − θ̂_B) is −300.4 ms: below the truth by the broker's estimate
// error (0.4 ms, within its ±0.5) and the two stamps' truncation. The stated interval adds the bound's slack (the
// anchor's uncertainty and both stamps' quantisation, 0.5 + 0.5 + 0.5 ms), so its upper end is −299.4 ms: it holds
// −300, and so does every stage interval of the records.
func TestEnvelopeBoundHoldsTruth(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	b, c := e.Host("B"), e.Host("c-behind")
	reportAt(t, e, b, -0.4, 0.5, base)
	path := e.Path("g", "t", 0)
	const truth = -300.0 // ms, consumer − reference
	var last time.Time
	for i := 0; i < 50; i++ {
		app := base.Add(time.Duration(i)*10*time.Millisecond + 50*time.Microsecond) // true append, reference clock
		proc := app.Add(10 * time.Microsecond)
		var r Record
		r.Offset = int64(i)
		r.Stamps[Produce] = TimeStamp(RefHost, app.Add(-time.Millisecond))
		r.Stamps[Append] = MillisStamp(b, ms(app)) // θ_B = 0
		r.Stamps[Processed] = MillisStamp(c, ms(proc.Add(-300*time.Millisecond)))
		res := path.Observe(r)
		for s, want := range map[Stage]float64{StageDelivery: 0.01, StageE2E: 1.01} {
			if lo, hi, _ := res.StageBounds(s); want < lo || want > hi {
				t.Fatalf("record %d: %s interval [%v, %v] misses the true %v ms", i, s, lo, hi, want)
			}
		}
		last = proc
	}
	o, err := e.Offset(c, last)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindEnvelope || o.Lower != -Unbounded {
		t.Fatalf("offset %+v, want an envelope open below", o)
	}
	if up := durMs(o.Upper); up < truth {
		t.Errorf("upper bound %v ms excludes the true offset %v ms", up, truth)
	}
	if off := durMs(o.Offset); math.Abs(off-(-300.4)) > 0.01 {
		t.Errorf("the bound itself %v ms, want −300.4 (the estimate keeps the unwidened bound)", off)
	}
}
