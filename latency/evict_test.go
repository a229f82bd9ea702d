package latency

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"
)

// TestEnginePathsBounded: paths idle for the TTL are evicted (a record or a commit counts as use), and creating a
// path while MaxPaths exist evicts the least recently used eighth first; commits never evict (the lag exporter
// reports every group of the cluster), they are dropped at the bound instead.
func TestEnginePathsBounded(t *testing.T) {
	e, err := NewEngine(Config{MaxPaths: 17})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	host := e.Host("c1")
	observe := func(group string) {
		var r Record
		r.Offset = 1
		r.Stamps[Processed] = Stamp{Value: t0.UnixNano(), Host: host, Unit: Nanos}
		e.Path(group, "orders", 0).Observe(r)
	}
	for i := range 8 {
		observe(fmt.Sprint("early", i))
	}
	if n := e.EvictIdle(t0, time.Minute); n != 0 { // sets the clock; paths used before count from now
		t.Fatalf("first EvictIdle evicted %d", n)
	}
	observe("early0") // used again at t0 + 0
	e.EvictIdle(t0.Add(30*time.Second), time.Minute)
	for i := range 8 {
		observe(fmt.Sprint("late", i)) // used at t0 + 30 s
	}
	e.ObserveCommit(CommitObservation{Group: "committer", Topic: "orders", Partition: 0, Offset: 5, At: t0})
	if paths, _ := e.PathStats(); paths != 17 {
		t.Fatalf("%d paths, want 17", paths)
	}
	// At the bound: a commit of a new path is dropped, a record's new path evicts the least recently used eighth (2
	// of 17: two of the early ones, stamped t0, the tick when they were last used).
	if e.ObserveCommit(CommitObservation{Group: "another", Topic: "orders", Partition: 0, Offset: 5, At: t0}) {
		t.Fatal("a commit created a path at the bound")
	}
	observe("new")
	paths, evicted := e.PathStats()
	if paths != 16 || evicted != 2 {
		t.Fatalf("%d paths, %d evicted; want 16 and 2", paths, evicted)
	}
	if e.RemovePath("late0", "orders", 0) == false {
		t.Fatal("a recently used path was evicted")
	}
	// 70 s after t0: the six early paths left, used at t0, are idle for over a minute; the late ones and the
	// committer (a commit is use too) were used at t0 + 30 s.
	if n := e.EvictIdle(t0.Add(70*time.Second), time.Minute); n != 6 {
		t.Fatalf("idle eviction removed %d, want 6", n)
	}
	if !e.RemovePath("committer", "orders", 0) {
		t.Fatal("the path kept alive by commits was evicted")
	}
	for i := 1; i < 8; i++ {
		if !e.RemovePath(fmt.Sprint("late", i), "orders", 0) {
			t.Fatalf("late%d was evicted", i)
		}
	}
}

// TestEngineWithoutSketches: with Config.NoSketches a path keeps no sketches, classifies and counts exactly as with
// them (live records, a rewind and its replay, commit-bounded and skew-suspected records), and costs a small
// fraction of the memory of a path with sketches.
func TestEngineWithoutSketches(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// stream feeds one path: 100 live records, a reset to offset 50 and its replay, then live records stamped by a
	// broker whose clock nothing has measured (placed by the causal envelope: wide, still live), then live records
	// known only up to the group's commit (commit-bounded).
	stream := func(e *Engine) ([]Result, PathSnapshot) {
		p := e.Path("g", "orders", 0)
		broker := e.Host("broker-1")
		var out []Result
		rec := func(off int64, processed time.Time, withBroker bool) {
			var r Record
			r.Offset = off
			r.Stamps[Produce] = TimeStamp(RefHost, t0.Add(time.Duration(off)*time.Millisecond))
			if withBroker {
				r.Stamps[Append] = MillisStamp(broker, t0.Add(time.Duration(off)*time.Millisecond-time.Hour).UnixMilli())
			}
			if off >= 110 {
				r.Stamps[Commit] = TimeStamp(RefHost, processed)
			} else {
				r.Stamps[Processed] = TimeStamp(RefHost, processed)
			}
			out = append(out, p.Observe(r))
		}
		for off := int64(0); off < 100; off++ {
			rec(off, t0.Add(time.Duration(off)*time.Millisecond+20*time.Millisecond), false)
		}
		p.ObserveCommit(100, t0.Add(time.Second))
		p.ObserveCommit(50, t0.Add(2*time.Second)) // reset: offsets 50-99 again are a replay
		for off := int64(50); off < 120; off++ {
			rec(off, t0.Add(3*time.Second+time.Duration(off)*time.Millisecond), off >= 100 && off < 110)
		}
		return out, p.Snapshot()
	}
	with, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	without, err := NewEngine(Config{NoSketches: true})
	if err != nil {
		t.Fatal(err)
	}
	wantRes, wantSnap := stream(with)
	gotRes, gotSnap := stream(without)
	if len(gotRes) != len(wantRes) {
		t.Fatalf("%d results, want %d", len(gotRes), len(wantRes))
	}
	for i := range wantRes {
		if fmt.Sprint(gotRes[i]) != fmt.Sprint(wantRes[i]) {
			t.Fatalf("result %d without sketches %+v, with %+v", i, gotRes[i], wantRes[i])
		}
	}
	if gotSnap.Counters != wantSnap.Counters || gotSnap.Replay != wantSnap.Replay {
		t.Fatalf("without sketches: counters %+v replay %+v; with: %+v %+v", gotSnap.Counters, gotSnap.Replay,
			wantSnap.Counters, wantSnap.Replay)
	}
	// The stream fed every kind of sketch of the engine that keeps them, and none of the other's.
	c := wantSnap.Counters
	if c.Classes[ClassLive] != 120 || c.Classes[ClassReplay] != 50 || c.Envelope != 10 || c.CommitBound != 10 ||
		wantSnap.Live[StageE2E].Count() != 110 || wantSnap.SinceRewind.Count() != 50 || wantSnap.E2EUpperBound.Count() != 10 {
		t.Fatalf("the stream does not exercise the sketches: counters %+v, live e2e %v, since rewind %v, e2e bound %v",
			c, wantSnap.Live[StageE2E].Count(), wantSnap.SinceRewind.Count(), wantSnap.E2EUpperBound.Count())
	}
	for i, s := range gotSnap.Live {
		if s.Count() != 0 {
			t.Fatalf("stage %d sketch of a NoSketches path holds %v values", i, s.Count())
		}
	}
	if gotSnap.SinceRewind.Count() != 0 || gotSnap.E2EUpperBound.Count() != 0 {
		t.Fatal("a NoSketches path kept replay or commit-bound sketches")
	}

	// Memory: bytes allocated for 1000 paths of 50 records each, their e2e spread over 1 ms to 10 s as a real
	// path's are over time, with and without sketches.
	perPath := func(cfg Config) float64 {
		e, err := NewEngine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		groups := make([]string, 1000)
		for i := range groups {
			groups[i] = fmt.Sprint("g", i)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for _, g := range groups {
			p := e.Path(g, "orders", 0)
			for k := range 50 {
				var r Record
				r.Offset = int64(k)
				r.Stamps[Produce] = TimeStamp(RefHost, t0)
				r.Stamps[Processed] = TimeStamp(RefHost, t0.Add(time.Duration(math.Pow(10, 4*float64(k)/49)*float64(time.Millisecond))))
				p.Observe(r)
			}
		}
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / float64(len(groups))
	}
	sketched, bare := perPath(Config{}), perPath(Config{NoSketches: true})
	t.Logf("bytes allocated per path of 50 records: %.0f with sketches, %.0f without", sketched, bare)
	if bare*5 > sketched {
		t.Fatalf("a path without sketches allocates %.0f bytes, with sketches %.0f: want under a fifth", bare, sketched)
	}
}
