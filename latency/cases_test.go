package latency

import (
	"math"
	"testing"
	"time"
)

func mustEngine(t *testing.T, cfg Config) *Engine {
	t.Helper()
	e, err := NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func wantStage(t *testing.T, r Result, s Stage, want float64) {
	t.Helper()
	got, ok := r.Stage(s)
	if !ok {
		t.Errorf("stage %s absent, want %v ms", s, want)
		return
	}
	if math.Abs(got-want) > 1e-6 {
		t.Errorf("stage %s = %v ms, want %v ms", s, got, want)
	}
}

func wantNoStage(t *testing.T, r Result, s Stage) {
	t.Helper()
	if v, ok := r.Stage(s); ok {
		t.Errorf("stage %s = %v ms, want absent", s, v)
	}
}

// C25: producer clock 2.5 s ahead, consumer 300 ms behind.
func TestC25ProducerClockAhead(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	rec := func(e *Engine) Record {
		var r Record
		r.Offset = 1
		r.Stamps[Produce] = MillisStamp(e.Host("P1"), ms(base.Add(2500*time.Millisecond)))
		r.Stamps[Append] = MillisStamp(e.Host("B1"), ms(base.Add(20*time.Millisecond)))
		r.Stamps[Processed] = MillisStamp(e.Host("C1"), ms(base.Add(-180*time.Millisecond)))
		return r
	}
	t.Run("naive values are negative", func(t *testing.T) {
		e := mustEngine(t, Config{})
		r := rec(e)
		p, a, c := r.Stamps[Produce].Value, r.Stamps[Append].Value, r.Stamps[Processed].Value
		if a-p != -2480 || c-a != -200 || c-p != -2680 {
			t.Fatalf("naive = %d, %d, %d; want -2480, -200, -2680", a-p, c-a, c-p)
		}
	})
	t.Run("offsets supplied", func(t *testing.T) {
		e := mustEngine(t, Config{})
		for h, off := range map[string]time.Duration{"P1": 2500 * time.Millisecond, "B1": 0, "C1": -300 * time.Millisecond} {
			if err := e.ReportOffset(e.Host(h), off, 0, base); err != nil {
				t.Fatal(err)
			}
		}
		p := e.Path("g", "t", 0)
		res := p.Observe(rec(e))
		wantStage(t, res, StageIngest, 20)
		wantStage(t, res, StageDelivery, 100)
		wantStage(t, res, StageE2E, 120)
		if res.Flags&FlagSkewSuspected != 0 || !res.Live {
			t.Errorf("flags %b live %v: want unflagged live sample", res.Flags, res.Live)
		}
		if n := p.Snapshot().Live[StageE2E].Count(); n != 1 {
			t.Errorf("live e2e sketch count = %v, want 1", n)
		}
	})
	t.Run("offsets unknown", func(t *testing.T) {
		e := mustEngine(t, Config{})
		p := e.Path("g", "t", 0)
		res := p.Observe(rec(e))
		// No negative value is recorded: the monotone projection pools all three stamps, so every stage is 0.
		wantStage(t, res, StageIngest, 0)
		wantStage(t, res, StageDelivery, 0)
		wantStage(t, res, StageE2E, 0)
		if res.Flags&FlagSkewSuspected == 0 || res.Flags&FlagOffsetUnknown == 0 || res.Live {
			t.Errorf("flags %b live %v: want skew suspected, offset unknown, not live", res.Flags, res.Live)
		}
		s := e.Snapshot()
		if n := s.Live[StageE2E].Count(); n != 0 {
			t.Errorf("live e2e sketch count = %v, want 0 (excluded from percentiles)", n)
		}
		// P1 is blamed for produce->append (both ends unknown: the broker stamp is the anchor). C1's append->process
		// is negative too, so C1 is counted as well; B1 is never blamed.
		if got := s.SkewSuspected["P1"]; got != 1 {
			t.Errorf(`clock_skew_suspected_total{host="P1"} = %d, want 1`, got)
		}
		if got := s.SkewSuspected["C1"]; got != 1 {
			t.Errorf(`clock_skew_suspected_total{host="C1"} = %d, want 1`, got)
		}
		if got := s.SkewSuspected["B1"]; got != 0 {
			t.Errorf(`clock_skew_suspected_total{host="B1"} = %d, want 0`, got)
		}
	})
}

// C27: a record without a timestamp (-1).
func TestC27MissingTimestamp(t *testing.T) {
	e := mustEngine(t, Config{})
	p := e.Path("g", "legacy", 0)
	processed := int64(1795953600000) // 2026-11-29T12:00:00.000Z
	if naive := processed - NoTimestamp; naive != 1795953600001 {
		t.Fatalf("naive = %d", naive)
	}
	var r Record
	r.Offset = 10
	r.Stamps[Produce] = MillisStamp(RefHost, NoTimestamp) // CreateTime topic: the record timestamp is the produce stamp
	r.Stamps[Processed] = MillisStamp(RefHost, processed)
	res := p.Observe(r)
	wantNoStage(t, res, StageIngest)
	wantNoStage(t, res, StageE2E)
	if res.Invalid[Produce] != ReasonMissing {
		t.Errorf("invalid reason = %v, want missing", res.Invalid[Produce])
	}
	s := e.Snapshot()
	if got := s.Totals.Invalid[Produce][ReasonMissing]; got != 1 {
		t.Errorf("missing_timestamp_total = %d, want 1", got)
	}
	if n := s.Live[StageE2E].Count() + s.Live[StageIngest].Count(); n != 0 {
		t.Errorf("live samples = %v, want 0", n)
	}
}

// C28: mirrored topic with LogAppendTime on the target.
func TestC28MirrorStages(t *testing.T) {
	day := "2026-11-29T"
	e := mustEngine(t, Config{})
	prod, src, tgt, cons := e.Host("P"), e.Host("S-broker"), e.Host("T-broker"), e.Host("C")
	for _, h := range []HostID{prod, src, tgt, cons} {
		if err := e.ReportOffset(h, 0, 0, at(day+"10:00:00Z")); err != nil { // clocks accurate
			t.Fatal(err)
		}
	}
	full := func() Record {
		var r Record
		r.Stamps[Produce] = MillisStamp(prod, ms(at(day+"10:00:00.000Z")))     // event_ts header
		r.Stamps[SourceAppend] = MillisStamp(src, ms(at(day+"10:00:00.040Z"))) // src_append_ts header
		r.Stamps[Append] = MillisStamp(tgt, ms(at(day+"10:00:05.000Z")))       // record timestamp, LOG_APPEND_TIME
		r.Stamps[Processed] = MillisStamp(cons, ms(at(day+"10:00:05.200Z")))
		return r
	}
	t.Run("all headers", func(t *testing.T) {
		res := e.Path("g", "mirrored", 0).Observe(full())
		wantStage(t, res, StageIngest, 40)
		wantStage(t, res, StageMirror, 4960)
		wantStage(t, res, StageDelivery, 200)
		wantStage(t, res, StageE2E, 5200)
	})
	t.Run("no event_ts header", func(t *testing.T) {
		r := full()
		r.Stamps[Produce] = Stamp{}
		res := e.Path("g", "mirrored", 1).Observe(r)
		wantNoStage(t, res, StageIngest)
		wantNoStage(t, res, StageE2E) // reporting 200 ms as e2e would be the failure
		wantStage(t, res, StageMirror, 4960)
		wantStage(t, res, StageDelivery, 200)
	})
	t.Run("target CreateTime preserving source time", func(t *testing.T) {
		var r Record
		r.Stamps[Produce] = MillisStamp(prod, ms(at(day+"10:00:00.000Z"))) // record.timestamp, CREATE_TIME
		r.Stamps[Processed] = MillisStamp(cons, ms(at(day+"10:00:05.200Z")))
		res := e.Path("g", "mirrored", 2).Observe(r)
		wantStage(t, res, StageE2E, 5200)
		wantNoStage(t, res, StageDelivery) // not labelled consumer lag
		wantNoStage(t, res, StageMirror)   // the mirror share is not attributable
	})
}

// C30: reset to earliest after being caught up, then processing at 2000 rec/s.
func TestC30ReplayAfterReset(t *testing.T) {
	e := mustEngine(t, Config{})
	p := e.Path("g", "orders", 0)
	reset := at("2026-11-29T12:00:00Z")
	recTs := func(k int64) time.Time { return at("2026-11-22T12:00:00Z").Add(time.Duration(k-1000000) * time.Second) }
	record := func(k int64, processed time.Time) Record {
		var r Record
		r.Offset = k
		r.Stamps[Produce] = TimeStamp(RefHost, recTs(k))
		r.Stamps[Processed] = TimeStamp(RefHost, processed)
		return r
	}
	// Caught up: record 1604799 processed just before, commit 1604800.
	if res := p.Observe(record(1604799, reset.Add(-time.Second))); res.Class != ClassLive {
		t.Fatalf("pre-reset record class %v, want live", res.Class)
	}
	p.ObserveCommit(1604800, reset.Add(-500*time.Millisecond))
	p.ObserveCommit(1000000, reset) // operator resets to earliest: the commit decreases by 604800
	st := p.Replay()
	if !st.Replaying || st.BoundaryOffset != 1604800 || !st.RewindObserved {
		t.Fatalf("after reset: %+v, want replaying with boundary 1604800", st)
	}
	// 2000 rec/s from the reset: the n-th record after it (n from 1) finishes at (n-1)/2000 s, so record 1,604,800,
	// the 604,801st, finishes at 302.4 s as the case states.
	finish := func(k int64) time.Time { return reset.Add(time.Duration(k-1000000) * time.Second / 2000) }
	var first, last Result
	for k := int64(1000000); k < 1604800; k++ {
		res := p.Observe(record(k, finish(k)))
		if res.Class != ClassReplay {
			t.Fatalf("offset %d class %v, want replay", k, res.Class)
		}
		if k == 1000000 {
			first = res
		}
		last = res
	}
	if first.SinceRewindMs != 0 || math.Abs(last.SinceRewindMs-302399.5) > 1e-6 {
		t.Errorf("since rewind = %v, %v ms; want 0, 302399.5", first.SinceRewindMs, last.SinceRewindMs)
	}
	snap := p.Snapshot()
	if got := snap.Counters.Classes[ClassReplay]; got != 604800 {
		t.Errorf("replayed_records_total = %d, want 604800", got)
	}
	if got := snap.Live[StageE2E].Count(); got != 1 { // only the pre-reset record
		t.Errorf("live e2e samples = %v, want 1 (replays add none)", got)
	}
	// Record 1604800 (ts 12:00:00) is the 604,801st: processed at 12:05:02.4, live e2e 302.4 s.
	res := p.Observe(record(1604800, finish(1604800)))
	if res.Class != ClassLive || !finish(1604800).Equal(at("2026-11-29T12:05:02.4Z")) {
		t.Fatalf("record 1604800: class %v at %v, want live at 12:05:02.4", res.Class, finish(1604800))
	}
	wantStage(t, res, StageE2E, 302400)
	if !p.Replay().Replaying {
		t.Error("replay cleared before the commit reached the boundary")
	}
	p.ObserveCommit(1604801, finish(1604800))
	if p.Replay().Replaying {
		t.Error("replay=1 still set after committed >= 1604800")
	}

	t.Run("small backward commit", func(t *testing.T) {
		p := e.Path("g", "stale", 0)
		base := at("2026-11-29T13:00:00Z")
		p.Observe(record(4999, base))
		p.ObserveCommit(5000, base.Add(time.Second))
		p.ObserveCommit(4998, base.Add(2*time.Second)) // a stale member's late commit
		if st := p.Replay(); !st.Replaying || st.BoundaryOffset != 5000 {
			t.Fatalf("state %+v, want replaying, boundary 5000", st)
		}
		for _, k := range []int64{4998, 4999} {
			if res := p.Observe(record(k, base.Add(3*time.Second))); res.Class != ClassReplay {
				t.Errorf("offset %d class %v, want replay", k, res.Class)
			}
		}
		if got := p.Snapshot().Counters.Classes[ClassReplay]; got != 2 {
			t.Errorf("replayed = %d, want 2", got)
		}
	})
}

// C19, latency side: the last processed offset 999 means the next position is 1000, so lag from telemetry is 0.
func TestC19ProcessedNext(t *testing.T) {
	e := mustEngine(t, Config{})
	p := e.Path("g", "t", 7)
	var r Record
	r.Offset = 999
	r.Stamps[Processed] = TimeStamp(RefHost, at("2026-11-29T12:00:00Z"))
	p.Observe(r)
	p.ObserveCommit(1000, at("2026-11-29T12:00:01Z"))
	st := p.Replay()
	const hw = 1000
	if lag := hw - st.ProcessedNext; lag != 0 {
		t.Errorf("lag from last-processed telemetry = %d, want 0 (HW - (last+1))", lag)
	}
	if lag := hw - st.Committed; lag != 0 {
		t.Errorf("lag from commit = %d, want 0", lag)
	}
	// The next record, 1000, is new: live, not a duplicate.
	r.Offset = 1000
	if res := p.Observe(r); res.Class != ClassLive {
		t.Errorf("offset 1000 class %v, want live", res.Class)
	}
}

// Item 1 of the issue: the group's commit time bounds the processed time when no processed stamp exists (the tap
// path). Delivery and e2e then end at the commit, are flagged as upper bounds and kept out of live percentiles.
func TestCommitBoundsProcessed(t *testing.T) {
	e := mustEngine(t, Config{})
	p := e.Path("g", "t", 0)
	base := at("2026-11-29T12:00:00Z")
	var r Record
	r.Stamps[Produce] = TimeStamp(RefHost, base)
	r.Stamps[Append] = TimeStamp(RefHost, base.Add(20*time.Millisecond))
	r.Stamps[Commit] = TimeStamp(RefHost, base.Add(1020*time.Millisecond)) // the next commit seen after the record
	res := p.Observe(r)
	wantStage(t, res, StageIngest, 20)
	wantStage(t, res, StageDelivery, 1000)
	wantStage(t, res, StageE2E, 1020)
	if res.Flags&FlagCommitBound == 0 || res.Live {
		t.Errorf("flags %b live %v: want commit-bound and not live", res.Flags, res.Live)
	}
	s := p.Snapshot()
	if s.E2EUpperBound.Count() != 1 || s.Live[StageE2E].Count() != 0 || s.Counters.CommitBound != 1 {
		t.Errorf("upper-bound sketch %v, live %v, counter %d; want 1, 0, 1", s.E2EUpperBound.Count(), s.Live[StageE2E].Count(), s.Counters.CommitBound)
	}
}

func TestFlushAndRemovePath(t *testing.T) {
	e := mustEngine(t, Config{})
	base := at("2026-11-29T12:00:00Z")
	p := e.Path("g", "t", 0)
	rec := func(off int64, e2e time.Duration) Record {
		var r Record
		r.Offset = off
		r.Stamps[Produce] = TimeStamp(RefHost, base)
		r.Stamps[Processed] = TimeStamp(RefHost, base.Add(e2e))
		return r
	}
	p.Observe(rec(0, 10*time.Millisecond))
	p.Observe(rec(1, 20*time.Millisecond))
	first := e.Flush()
	if n := first.Live[StageE2E].Count(); n != 2 {
		t.Fatalf("first interval: %v samples, want 2", n)
	}
	p.Observe(rec(2, 30*time.Millisecond))
	second := e.Flush()
	// The second interval holds only the third record; counters stay cumulative.
	if n, q := second.Live[StageE2E].Count(), second.Live[StageE2E].Quantile(1); n != 1 || math.Abs(q-30)/30 > 0.01 {
		t.Errorf("second interval: %v samples, max %v; want 1 sample of 30 ms", n, q)
	}
	if second.Totals.Records != 3 || first.Live[StageE2E].Count() != 2 {
		t.Errorf("records %d (want 3 cumulative); first interval changed to %v", second.Totals.Records, first.Live[StageE2E].Count())
	}
	if !e.RemovePath("g", "t", 0) || e.RemovePath("g", "t", 0) {
		t.Error("RemovePath: want true once, then false")
	}
	if s := e.Snapshot(); len(s.Paths) != 0 || s.Totals.Records != 0 {
		t.Errorf("after removal: %d paths, %d records; want none", len(s.Paths), s.Totals.Records)
	}
}
