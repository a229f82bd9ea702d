package latency

import (
	"fmt"
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
