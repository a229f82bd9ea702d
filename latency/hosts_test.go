package latency

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// skewedRecord is a record whose processed stamp, on host, reads 100 ms before its produce stamp on the reference
// clock: with host's reported offset 0 ± 1 ms that order violation is far beyond the uncertainty, so the record is
// skew-suspected and host is blamed.
func skewedRecord(host HostID, offset int64, at time.Time) Record {
	var r Record
	r.Offset = offset
	r.Stamps[Produce] = TimeStamp(RefHost, at)
	r.Stamps[Processed] = TimeStamp(host, at.Add(-100*time.Millisecond))
	return r
}

// heapMB is the live heap after a collection, in MB.
func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc) / (1 << 20)
}

// TestHostFloodBounded: receipts that each name a new host (pod churn, a hostile writer) cost memory per live host,
// bounded by MaxHosts, not per host ever seen nor per (path × host): past the bound the least recently used hosts
// are evicted and counted, every record is still processed, and a path's skew blame keeps at most a handful of
// names.
func TestHostFloodBounded(t *testing.T) {
	const maxHosts, paths, flood = 64, 50, 12000
	e, err := NewEngine(Config{MaxHosts: maxHosts, NoSketches: true})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ps := make([]*Path, paths)
	for i := range ps {
		ps[i] = e.Path(fmt.Sprint("g", i), "orders", 0)
	}
	feed := func(from, to int) {
		for i := from; i < to; i++ {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			h := e.Host(fmt.Sprintf("pod-%06d", i))
			if err := e.ReportOffset(h, 0, time.Millisecond, at); err != nil {
				t.Fatal(err)
			}
			res := ps[i%paths].Observe(skewedRecord(h, int64(i), at))
			if res.Flags&FlagSkewSuspected == 0 || res.NumSkewHosts != 1 || res.SkewHosts[0] != h {
				t.Fatalf("record %d: flags %b, blamed %v; want skew suspected on host %d", i, res.Flags, res.SkewHosts[:res.NumSkewHosts], h)
			}
		}
	}
	feed(0, 2000)
	before := heapMB()
	feed(2000, flood)
	after := heapMB()
	// Each host keeps two windows (~5 KB); unbounded, 10,000 more hosts hold ~50 MB, and every path's blame grew
	// with the highest host id it saw. Bounded, the heap does not grow with the flood.
	if after-before > 2 {
		t.Errorf("heap grew %.1f MB over %d new hosts (%.1f → %.1f MB), want < 2 MB: host state is not bounded", after-before, flood-2000, before, after)
	}
	hosts, evicted := e.HostStats()
	if hosts > maxHosts+1 || hosts < maxHosts/2 {
		t.Errorf("%d hosts held, want at most MaxHosts %d + the reference and at least half of it", hosts, maxHosts)
	}
	if want := uint64(flood + 1 - hosts); evicted != want {
		t.Errorf("%d hosts evicted, want %d (every host created and no longer held)", evicted, want)
	}
	if n := len(e.Offsets(t0)); n != hosts {
		t.Errorf("Offsets lists %d hosts, want the %d held", n, hosts)
	}
	s := e.Snapshot()
	if s.Totals.Records != flood || s.Totals.SkewSuspected != flood {
		t.Errorf("records %d, skew suspected %d; want %d each: a record of an evicted host is still processed", s.Totals.Records, s.Totals.SkewSuspected, flood)
	}
	var blamed uint64
	for _, p := range s.Paths {
		if len(p.SkewSuspected) > maxSkewHosts+1 {
			t.Errorf("path %s blames %d names, want at most %d and %q", p.Group, len(p.SkewSuspected), maxSkewHosts, OtherHosts)
		}
		for _, n := range p.SkewSuspected {
			blamed += n
		}
	}
	if blamed != flood {
		t.Errorf("blame sums to %d, want %d", blamed, flood)
	}
	runtime.KeepAlive(ps)
}

// TestExpiredHostStartsFresh: a host idle for EvictIdle's time is forgotten. Its id goes stale and resolves to
// nothing, even after another host takes its slot, so neither its offset nor its skew blame passes to that host;
// a record still carrying the stale id is processed with an unknown clock (flagged, uncorrected); and the same name
// coming back starts afresh under a new id, its offset estimated anew.
func TestExpiredHostStartsFresh(t *testing.T) {
	e, err := NewEngine(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	e.EvictIdle(t0, time.Minute) // sets the engine's clock
	a := e.Host("pod-a")
	if err := e.ReportOffset(a, 50*time.Millisecond, time.Millisecond, t0); err != nil {
		t.Fatal(err)
	}
	path := e.Path("g", "orders", 0)
	path.Observe(skewedRecord(a, 1, t0.Add(50*time.Millisecond))) // read on a's clock: 50 ms ahead
	if o, err := e.Offset(a, t0); err != nil || o.Kind != KindReported || o.Offset != 50*time.Millisecond {
		t.Fatalf("offset of pod-a: %+v, %v; want reported 50ms", o, err)
	}
	keep := e.Host("keeper")
	e.EvictIdle(t0.Add(40*time.Second), time.Minute)
	e.Host("keeper") // used at t0 + 40 s
	// At t0 + 70 s pod-a (last used at t0) is idle for over a minute; keeper (t0 + 40 s) is not.
	e.EvictIdle(t0.Add(70*time.Second), time.Minute)
	if hosts, evicted := e.HostStats(); hosts != 2 || evicted != 1 {
		t.Fatalf("%d hosts, %d evicted; want the reference and keeper, 1 evicted", hosts, evicted)
	}
	for _, o := range e.Offsets(t0) {
		if o.Host == "pod-a" {
			t.Fatalf("Offsets still lists the expired host: %+v", o)
		}
	}
	if e.HostName(keep) != "keeper" {
		t.Fatal("keeper was forgotten")
	}
	b := e.Host("pod-b") // takes pod-a's slot
	if uint32(b)&hostSlotMask != uint32(a)&hostSlotMask || b == a {
		t.Fatalf("pod-b got id %d, want pod-a's slot (%d) under a new generation", b, a)
	}
	if _, err := e.Offset(a, t0); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Offset of the stale id: %v, want ErrUnknownHost", err)
	}
	if err := e.ReportOffset(a, time.Millisecond, time.Millisecond, t0); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("ReportOffset on the stale id: %v, want ErrUnknownHost", err)
	}
	if e.HostName(a) != "" {
		t.Errorf("stale id names %q, want nothing", e.HostName(a))
	}
	if o, _ := e.Offset(b, t0); o.Kind != KindUnknown || o.Host != "pod-b" {
		t.Errorf("pod-b's offset: %+v, want unknown: nothing of pod-a's estimate carries over", o)
	}
	// A record still carrying pod-a's id: processed, its processed stamp on an unknown clock, blamed on no host.
	res := path.Observe(skewedRecord(a, 2, t0.Add(70*time.Second)))
	if res.Flags&FlagOffsetUnknown == 0 || res.NumSkewHosts != 0 {
		t.Errorf("record with a stale id: flags %b, blamed %v; want offset unknown and no host blamed", res.Flags, res.SkewHosts[:res.NumSkewHosts])
	}
	s := path.Snapshot()
	if s.SkewSuspected["pod-a"] != 1 || s.SkewSuspected["pod-b"] != 0 || s.Counters.Records != 2 {
		t.Errorf("blame %v over %d records; want pod-a's record still pod-a's, none on pod-b, both records counted", s.SkewSuspected, s.Counters.Records)
	}
	// pod-a comes back: a new id and no estimate until it reports again.
	a2 := e.Host("pod-a")
	if a2 == a || a2 == b {
		t.Fatalf("pod-a came back as %d, want an id neither its old %d nor pod-b's %d", a2, a, b)
	}
	if o, _ := e.Offset(a2, t0.Add(70*time.Second)); o.Kind != KindUnknown {
		t.Errorf("pod-a after expiry: %+v, want its offset unknown until estimated anew", o)
	}
	if hosts, _ := e.HostStats(); hosts != 4 {
		t.Errorf("%d hosts, want 4 (reference, keeper, pod-b, pod-a)", hosts)
	}
}

// TestReferenceHostNeverEvicted: the reference clock is neither expired nor evicted at the bound.
func TestReferenceHostNeverEvicted(t *testing.T) {
	e, err := NewEngine(Config{MaxHosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	e.EvictIdle(t0, time.Second)
	for i := range 10 {
		e.Host(fmt.Sprint("h", i))
	}
	e.EvictIdle(t0.Add(time.Hour), time.Second)
	if e.Host("collector") != RefHost || e.HostName(RefHost) != "collector" {
		t.Fatal("the reference host was evicted")
	}
	if hosts, evicted := e.HostStats(); hosts != 1 || evicted != 10 {
		t.Fatalf("%d hosts, %d evicted; want the reference alone, 10 evicted", hosts, evicted)
	}
}
