package latency

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestToMillis(t *testing.T) {
	tests := []struct {
		name string
		s    Stamp
		ms   float64
		why  Reason
	}{
		{name: "ms epoch", s: Stamp{Value: 1795953600000}, ms: 1795953600000},
		{name: "ns epoch declared ns", s: Stamp{Value: 1795953600000000000, Unit: Nanos}, ms: 1795953600000},
		{name: "µs epoch declared µs", s: Stamp{Value: 1795953600000000, Unit: Micros}, ms: 1795953600000},
		{name: "NO_TIMESTAMP", s: Stamp{Value: -1}, why: ReasonMissing},
		{name: "other negative", s: Stamp{Value: -42}, why: ReasonNegative},
		// A seconds value where ms was promised (e.g. a client writing time.Now().Unix()).
		{name: "seconds as ms", s: Stamp{Value: 1795953600}, why: ReasonSeconds},
		// Microseconds and nanoseconds where ms was promised: three and six orders too large.
		{name: "µs as ms", s: Stamp{Value: 1795953600000000}, why: ReasonMicros},
		{name: "ns as ms", s: Stamp{Value: 1795953600000000000}, why: ReasonNanos},
		// ns declared as µs is still three orders too large.
		{name: "ns as µs", s: Stamp{Value: 1795953600000000000, Unit: Micros}, why: ReasonNanos},
		// A tiny positive number is no epoch time at all (and not seconds after 1973 either).
		{name: "tiny", s: Stamp{Value: 12345}, why: ReasonTooOld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, why := ToMillis(tc.s)
			if why != tc.why || (why == ReasonOK && math.Abs(ms-tc.ms) > 1e-3) {
				t.Errorf("ToMillis(%+v) = %v, %v; want %v, %v", tc.s, ms, why, tc.ms, tc.why)
			}
		})
	}
}

func TestBoundsCheck(t *testing.T) {
	b := Bounds{MaxAge: 24 * time.Hour, MaxSkew: time.Hour}
	const anchor = 1795953600000.0
	h, d := float64(time.Hour/time.Millisecond), float64(24*time.Hour/time.Millisecond)
	tests := []struct {
		name string
		m    Moment
		ms   float64
		why  Reason
	}{
		{name: "produce a day before append", m: Produce, ms: anchor - d, why: ReasonOK},
		{name: "produce older than max age", m: Produce, ms: anchor - d - 1, why: ReasonTooOld},
		// Producer clock ahead: allowed up to MaxSkew, the part correction can fix.
		{name: "produce 1h after append", m: Produce, ms: anchor + h, why: ReasonOK},
		{name: "produce beyond skew", m: Produce, ms: anchor + h + 1, why: ReasonTooNew},
		// A replay processes old records: processed may be long after the append, not much before it.
		{name: "processed a day after", m: Processed, ms: anchor + d, why: ReasonOK},
		{name: "processed beyond age", m: Processed, ms: anchor + d + 1, why: ReasonTooNew},
		{name: "processed 1h before append", m: Processed, ms: anchor - h, why: ReasonOK},
		{name: "processed beyond skew before", m: Processed, ms: anchor - h - 1, why: ReasonTooOld},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if why := b.Check(tc.m, tc.ms, anchor); why != tc.why {
				t.Errorf("Check = %v, want %v", why, tc.why)
			}
		})
	}
}

func TestReplayTrackerRules(t *testing.T) {
	type step struct {
		commit  int64 // >= -1: observe this commit; -2: process offset
		offset  int64
		appendM float64
		want    Class
	}
	c := func(o int64) step { return step{commit: o} }
	p := func(o int64, want Class) step { return step{commit: -2, offset: o, appendM: 5000, want: want} }
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "in order is live", steps: []step{c(0), p(0, ClassLive), p(1, ClassLive), p(2, ClassLive)}},
		// A gap (seek forward, compaction) is still new data.
		{name: "skip forward is live", steps: []step{p(10, ClassLive), p(50, ClassLive)}},
		// Below the highest commit: only a rewind can bring it back.
		{name: "below commit is replay", steps: []step{p(9, ClassLive), c(10), p(5, ClassReplay)}},
		// Processed but never committed, then processed again: the rebalance tail.
		{name: "uncommitted tail is redelivery", steps: []step{p(9, ClassLive), c(8), p(8, ClassRedelivery), p(9, ClassRedelivery), p(10, ClassLive)}},
		// C30's small backward commit: boundary 5000, 4998 and 4999 are replays, 5000 is live.
		{name: "stale backward commit", steps: []step{p(4999, ClassLive), c(5000), c(4998), p(4998, ClassReplay), p(4999, ClassReplay), p(5000, ClassLive)}},
		// A new group (first seen without a commit at t=10000 ms) reading records appended before it: backfill.
		{name: "new group backfill", steps: []step{{commit: -1}, p(0, ClassBackfill), {commit: -2, offset: 1, appendM: 20000, want: ClassLive}}},
		// A group that had a commit when first seen is not new: old records are live (a real backlog).
		{name: "existing group backlog is live", steps: []step{c(0), p(0, ClassLive)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewReplayTracker()
			for i, s := range tc.steps {
				if s.commit >= -1 {
					tr.ObserveCommit(s.commit, 10000)
					continue
				}
				if got, _ := tr.Classify(s.offset, s.appendM, 30000); got != s.want {
					t.Errorf("step %d: offset %d class %v, want %v", i, s.offset, got, s.want)
				}
			}
		})
		// Restarts do not change history: a tracker restored, through the encoding, from a
		// checkpoint taken after any step classifies every later step as the one that ran through.
		t.Run(tc.name+"/restored after every step", func(t *testing.T) {
			for cut := range tc.steps {
				tr := NewReplayTracker()
				for i, s := range tc.steps {
					if i == cut {
						b, err := tr.Checkpoint().MarshalBinary()
						if err != nil {
							t.Fatal(err)
						}
						var c ReplayCheckpoint
						if err := c.UnmarshalBinary(b); err != nil {
							t.Fatal(err)
						}
						tr = NewReplayTracker()
						tr.Restore(c)
					}
					if s.commit >= -1 {
						tr.ObserveCommit(s.commit, 10000)
						continue
					}
					if got, _ := tr.Classify(s.offset, s.appendM, 30000); got != s.want {
						t.Errorf("restored before step %d: step %d offset %d class %v, want %v", cut, i, s.offset, got, s.want)
					}
				}
			}
		})
	}
}

// TestReplayCheckpointAcrossRestart: a group processed 0..99 and committed 100, then rewound to 0 (C30). A process
// that restarts in the middle of the replay, after offset 49, and restores the checkpoint keeps classifying 50..99 as
// replays measured from the rewind seen before the restart (t = 20 s); without it, 50 would be taken for new data
// (live) and so would the rest. Bytes that are not a checkpoint are refused.
func TestReplayCheckpointAcrossRestart(t *testing.T) {
	tr := NewReplayTracker()
	for o := int64(0); o < 100; o++ {
		tr.Classify(o, 1000, 10000)
	}
	tr.ObserveCommit(100, 15000)
	tr.ObserveCommit(0, 20000)
	for o := int64(0); o < 50; o++ {
		if c, at := tr.Classify(o, 1000, 21000); c != ClassReplay || at != 20000 {
			t.Fatalf("before the restart, offset %d: %v from %v, want a replay from 20000", o, c, at)
		}
	}
	b, err := tr.Checkpoint().MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var c ReplayCheckpoint
	if err := c.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	restored, fresh := NewReplayTracker(), NewReplayTracker()
	restored.Restore(c)
	for o := int64(50); o < 100; o++ {
		if cl, at := restored.Classify(o, 1000, 30000); cl != ClassReplay || at != 20000 {
			t.Fatalf("restored, offset %d: %v from %v, want a replay from 20000", o, cl, at)
		}
	}
	if cl, _ := fresh.Classify(50, 1000, 30000); cl != ClassLive {
		t.Fatalf("without the checkpoint offset 50 is %v; the test would prove nothing", cl)
	}
	if cl, _ := restored.Classify(100, 1000, 31000); cl != ClassLive {
		t.Errorf("offset 100 after the replay: %v, want live", cl)
	}
	for _, bad := range [][]byte{nil, b[:len(b)-1], append([]byte{2}, b[1:]...)} {
		if err := new(ReplayCheckpoint).UnmarshalBinary(bad); !errors.Is(err, ErrBadCheckpoint) {
			t.Errorf("UnmarshalBinary(%x) = %v, want ErrBadCheckpoint", bad, err)
		}
	}
}

func TestPAV(t *testing.T) {
	tests := []struct {
		name string
		y, w []float64
		want []float64
	}{
		{name: "monotone unchanged", y: []float64{1, 2, 3}, w: []float64{1, 1, 1}, want: []float64{1, 2, 3}},
		{name: "one violation pooled", y: []float64{1, 3, 2}, w: []float64{1, 1, 1}, want: []float64{1, 2.5, 2.5}},
		// The heavier (more certain) point moves less: (3·1 + 1·2)/4... weights 3 and 1 → (3·3 + 1·2)/4 = 2.75.
		{name: "weighted", y: []float64{3, 2}, w: []float64{3, 1}, want: []float64{2.75, 2.75}},
		{name: "cascade", y: []float64{4, 3, 2, 1}, w: []float64{1, 1, 1, 1}, want: []float64{2.5, 2.5, 2.5, 2.5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			y := append([]float64(nil), tc.y...)
			pav(y, tc.w)
			for i := range y {
				if math.Abs(y[i]-tc.want[i]) > 1e-12 {
					t.Fatalf("pav(%v) = %v, want %v", tc.y, y, tc.want)
				}
			}
		})
	}
}

func TestCorrectFlagsAndBlame(t *testing.T) {
	const P, B, C HostID = 1, 2, 3
	known := func(theta, unc float64) resolved { return resolved{theta: theta, unc: unc, kind: KindSynced} }
	unknown := resolved{kind: KindUnknown}
	tests := []struct {
		name               string
		produce, app, proc float64 // observed, ms
		rp, rb, rc         resolved
		flagged            bool // skew-suspected
		wide               bool
		blamed             []HostID
		ingest, delivery   float64
	}{
		// Offsets known and consistent: nothing flagged.
		{name: "clean", produce: 1000, app: 1020, proc: 1120, rp: known(0, 1), rb: known(0, 1), rc: known(0, 1),
			ingest: 20, delivery: 100},
		// Producer unknown and its stamp after the append: the producer is blamed; the projection moves the unknown
		// stamp (weight ~0) onto the known append, so ingest is 0 and delivery keeps its 100 ms.
		{name: "unknown producer ahead", produce: 1100, app: 1020, proc: 1120, rp: unknown, rb: known(0, 1), rc: known(0, 1),
			flagged: true, blamed: []HostID{P}, ingest: 0, delivery: 100},
		// A violation within the uncertainties is not skew: it is projected away (weights 1/(u²+0.25)).
		{name: "violation within uncertainty", produce: 1021, app: 1020, proc: 1120, rp: known(0, 2), rb: known(0, 2), rc: known(0, 1),
			ingest: 0, delivery: 99.5},
		// Uncertainty 6+1 ms over a 5 ms stage and over the 5 ms floor: wide, reported, not skew (nobody blamed).
		{name: "uncertainty above stage and floor", produce: 1015, app: 1020, proc: 1120, rp: known(0, 6), rb: known(0, 1), rc: known(0, 1),
			wide: true, ingest: 5, delivery: 100},
		// A broker step in progress (ambiguous) is blamed on the broker.
		{name: "ambiguous broker", produce: 1000, app: 1020, proc: 1120, rp: known(0, 1), rb: resolved{kind: KindBracketed, ambiguous: true}, rc: known(0, 1),
			flagged: true, blamed: []HostID{B}, ingest: 20, delivery: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tl timeline
			tl.valid = 1<<Produce | 1<<Append | 1<<Processed
			tl.obs[Produce], tl.obs[Append], tl.obs[Processed] = tc.produce, tc.app, tc.proc
			tl.host[Produce], tl.host[Append], tl.host[Processed] = P, B, C
			tl.res[Produce], tl.res[Append], tl.res[Processed] = tc.rp, tc.rb, tc.rc
			var r Result
			correct(&tl, policy{tolMs: 2, floorMs: 5, ratio: 0.02}, &r)
			if got := r.Flags&FlagSkewSuspected != 0; got != tc.flagged {
				t.Errorf("flagged %v, want %v", got, tc.flagged)
			}
			if got := r.Flags&FlagWide != 0; got != tc.wide {
				t.Errorf("wide %v, want %v", got, tc.wide)
			}
			if tc.wide && r.Untrusted != 0 {
				t.Errorf("a wide record has untrusted stages %b: wideness is no reason to leave a stage out", r.Untrusted)
			}
			if r.NumSkewHosts != len(tc.blamed) {
				t.Errorf("blamed %v, want %v", r.SkewHosts[:r.NumSkewHosts], tc.blamed)
			}
			for i, h := range tc.blamed {
				if i < r.NumSkewHosts && r.SkewHosts[i] != h {
					t.Errorf("blamed %v, want %v", r.SkewHosts[:r.NumSkewHosts], tc.blamed)
				}
			}
			in, _ := r.Stage(StageIngest)
			de, _ := r.Stage(StageDelivery)
			e2e, _ := r.Stage(StageE2E)
			if math.Abs(in-tc.ingest) > 0.01 || math.Abs(de-tc.delivery) > 0.01 || e2e != in+de {
				t.Errorf("ingest %v delivery %v e2e %v; want %v, %v and e2e = their sum", in, de, e2e, tc.ingest, tc.delivery)
			}
		})
	}
}

func TestConfigDefaultsAndValidate(t *testing.T) {
	var c Config
	c.SetDefaults()
	want := Config{ReferenceHost: "collector", Bounds: Bounds{MaxAge: 400 * 24 * time.Hour, MaxSkew: time.Hour},
		Window: 2 * time.Minute, WindowBuckets: 24, EnvelopeWindow: time.Minute, EnvelopeBuckets: 12, MaxDriftPPM: 100,
		StepTolerance: 5 * time.Millisecond, StepConfirm: 3, SkewTolerance: 2 * time.Millisecond,
		UncertaintyFloor: 5 * time.Millisecond, UncertaintyRatio: 0.02, RelativeAccuracy: 0.01, MaxPaths: 20000,
		MaxHosts: 10000}
	if c != want {
		t.Fatalf("defaults\n got %+v\nwant %+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []struct {
		name string
		mod  func(*Config)
	}{
		{"window under a second", func(c *Config) { c.Window = time.Millisecond }},
		{"one bucket", func(c *Config) { c.WindowBuckets = 1 }},
		{"negative drift", func(c *Config) { c.MaxDriftPPM = -1 }},
		{"accuracy 1", func(c *Config) { c.RelativeAccuracy = 1 }},
		{"negative floor", func(c *Config) { c.UncertaintyFloor = -time.Millisecond }},
		{"ratio above 1", func(c *Config) { c.UncertaintyRatio = 2 }},
		{"zero confirm", func(c *Config) { c.StepConfirm = -1 }},
		{"no paths", func(c *Config) { c.MaxPaths = -1 }},
		{"no hosts", func(c *Config) { c.MaxHosts = -1 }},
		{"more hosts than an id addresses", func(c *Config) { c.MaxHosts = MaxHostsLimit + 1 }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			c := want
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, ErrConfig) {
				t.Errorf("Validate() = %v, want ErrConfig", err)
			}
			if _, err := NewEngine(c); err == nil {
				t.Errorf("NewEngine accepted %s", tc.name)
			}
		})
	}
}

// TestSameHostStageNotFlagged: a stage whose two stamps one host made carries none of that host's offset
// uncertainty, so neither an unknown nor a huge uncertainty on the consumer may flag receive → processed.
func TestSameHostStageNotFlagged(t *testing.T) {
	const B, C HostID = 2, 3
	pol := policy{tolMs: 2, floorMs: 5, ratio: 0.02, driftMax: 100e-6}
	tests := []struct {
		name       string
		withAppend bool
		rc         resolved
		app        float64 // observed append, ms (when withAppend)
		flagged    bool    // the record as a whole (append → receive crosses clocks): skew-suspected, unsettled or wide
		processing float64
		trusted    bool // processing fit for live percentiles
		qwTrusted  bool // queue wait fit for live percentiles: only an unknown offset keeps it out, never width
	}{
		// Unsettled (no drift fit yet), ±3 ms: append → receive (±3.5 ms) misses the 2 ms warm-up target and is
		// reported unsettled, yet kept with its interval; receive → processed is not unsettled at all.
		{name: "unsettled offset", withAppend: true, app: 900, rc: resolved{theta: 7, unc: 3, kind: KindReported, unsettled: true}, flagged: true, processing: 4, trusted: true, qwTrusted: true},
		// With an append the record is flagged (append → receive crosses an unknown clock) yet processing stays
		// exact and trusted: the projection moves receive and processed together only if they must pool.
		{name: "unknown offset, record flagged", withAppend: true, app: 900, rc: resolved{kind: KindUnknown}, flagged: true, processing: 4, trusted: true},
		// The unknown consumer's receive reads 10 ms before the append and its processed 6 ms before it: the
		// projection must move both, and moves them together (one clock, one offset), so processing keeps its 4 ms
		// and queue wait becomes 0. A stamp-by-stamp projection would have pooled processed too (processing 0).
		{name: "unknown offset, consumer behind the append", withAppend: true, app: 1010, rc: resolved{kind: KindUnknown}, flagged: true, processing: 4, trusted: true},
		// ±50 ms on a 100 ms queue wait: a wide record, every stage kept with its interval.
		{name: "uncertain offset, record flagged", withAppend: true, app: 900, rc: resolved{unc: 50, kind: KindReported}, flagged: true, processing: 4, trusted: true, qwTrusted: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tl timeline
			tl.valid = 1<<Receive | 1<<Processed
			tl.obs[Receive], tl.obs[Processed] = 1000, 1004
			tl.host[Receive], tl.host[Processed] = C, C
			tl.res[Receive], tl.res[Processed] = tc.rc, tc.rc
			if tc.withAppend {
				tl.valid |= 1 << Append
				tl.obs[Append], tl.host[Append], tl.res[Append] = tc.app, B, resolved{unc: 0.5, kind: KindBracketed}
			}
			var r Result
			correct(&tl, pol, &r)
			if got := r.Flags&(FlagSkewSuspected|FlagUnsettled|FlagWide) != 0; got != tc.flagged {
				t.Errorf("record flagged %v (flags %b), want %v", got, r.Flags, tc.flagged)
			}
			if v, ok := r.Stage(StageProcessing); !ok || math.Abs(v-tc.processing) > 1e-9 {
				t.Errorf("processing %v (present %v), want %v", v, ok, tc.processing)
			}
			if got := r.Trusted(StageProcessing); got != tc.trusted {
				t.Errorf("processing trusted %v, want %v (untrusted %b)", got, tc.trusted, r.Untrusted)
			}
			checkInvariants(t, r, tc.name)
			if tc.withAppend && r.Trusted(StageQueueWait) != tc.qwTrusted {
				t.Errorf("queue wait trusted %v, want %v (flags %b)", r.Trusted(StageQueueWait), tc.qwTrusted, r.Flags)
			}
		})
	}
}

// TestSameHostClockBackwardsFlagged: one clock reading processed 10 ms before receive ran backwards; that is
// flagged and blamed on the host, and the projected (changed) processing is not trusted.
func TestSameHostClockBackwardsFlagged(t *testing.T) {
	const C HostID = 3
	var tl timeline
	tl.valid = 1<<Receive | 1<<Processed
	tl.obs[Receive], tl.obs[Processed] = 1010, 1000
	tl.host[Receive], tl.host[Processed] = C, C
	tl.res[Receive], tl.res[Processed] = resolved{unc: 1, kind: KindSynced}, resolved{unc: 1, kind: KindSynced}
	var r Result
	correct(&tl, policy{tolMs: 2, floorMs: 5, ratio: 0.02, driftMax: 100e-6}, &r)
	if r.Flags&FlagSkewSuspected == 0 || r.NumSkewHosts != 1 || r.SkewHosts[0] != C {
		t.Fatalf("flags %b blamed %v, want skew-suspected on host %d", r.Flags, r.SkewHosts[:r.NumSkewHosts], C)
	}
	if v, _ := r.Stage(StageProcessing); v != 0 || r.Trusted(StageProcessing) {
		t.Errorf("processing %v trusted %v, want 0 and untrusted", v, r.Trusted(StageProcessing))
	}
}

// TestReportOffsetBeyondMaxSkew: a claimed offset beyond the max skew (a forged or corrupt receipt) is refused and
// leaves the host's estimate as it was; one inside the bound is taken.
func TestReportOffsetBeyondMaxSkew(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := e.Host("qc1")
	at := time.Unix(1_795_953_600, 0)
	if err := e.ReportOffset(h, time.Hour+time.Millisecond, time.Microsecond, at); !errors.Is(err, ErrImplausibleOffset) {
		t.Fatalf("offset 1h0m0.001s: err = %v, want ErrImplausibleOffset", err)
	}
	if err := e.ReportOffset(h, -time.Hour-time.Millisecond, time.Microsecond, at); !errors.Is(err, ErrImplausibleOffset) {
		t.Fatalf("offset -1h0m0.001s: err = %v, want ErrImplausibleOffset", err)
	}
	o, err := e.Offset(h, at)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindUnknown {
		t.Fatalf("after refused reports the offset is %+v, want unknown", o)
	}
	if err := e.ReportOffset(h, 150*time.Millisecond, time.Millisecond, at); err != nil {
		t.Fatalf("offset 150ms: %v", err)
	}
	if o, _ = e.Offset(h, at); o.Kind != KindReported || o.Offset != 150*time.Millisecond {
		t.Fatalf("after a report of 150ms the offset is %+v, want reported 150ms", o)
	}
}
