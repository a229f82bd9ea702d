package latency

import (
	"sync"
	"testing"
	"time"
)

// TestConcurrentUse runs one goroutine per path, a prober feeding brackets, a commit poller and a snapshot reader
// at once; run with -race it checks the locking the Engine documents. Every record must still be accounted.
func TestConcurrentUse(t *testing.T) {
	e := mustEngine(t, Config{})
	base := at("2026-11-29T12:00:00Z")
	b := e.Host("B1")
	for i := 0; i < 50; i++ {
		_ = e.ObserveBracket(bracketAt(b, base.Add(time.Duration(i)*100*time.Millisecond), 1, 1, 250))
	}
	const paths, perPath = 4, 500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() { // prober
		defer wg.Done()
		for i := 50; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_ = e.ObserveBracket(bracketAt(b, base.Add(time.Duration(i)*100*time.Millisecond), 1, 1, 250))
		}
	}()
	wg.Add(1)
	go func() { // snapshot reader and commit poller
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = e.Snapshot()
			_ = e.Offsets(base)
			e.ObserveCommit(CommitObservation{Group: "g", Topic: "t", Partition: 0, Offset: 10, At: base})
		}
	}()
	var workers sync.WaitGroup
	for p := 0; p < paths; p++ {
		workers.Add(1)
		go func(p int) {
			defer workers.Done()
			path := e.Path("g", "t", int32(p))
			prod := e.Host("P" + string(rune('0'+p))) // envelope host: updated from this goroutine
			for i := 0; i < perPath; i++ {
				tr := base.Add(time.Duration(i) * time.Millisecond)
				var r Record
				r.Offset = int64(i)
				r.Stamps[Produce] = MillisStamp(prod, tr.Add(-3*time.Millisecond).UnixMilli()+1000)
				r.Stamps[Append] = MillisStamp(b, tr.Add(250*time.Millisecond).UnixMilli())
				r.Stamps[Processed] = TimeStamp(RefHost, tr.Add(4*time.Millisecond))
				checkInvariants(t, path.Observe(r), "concurrent record")
			}
		}(p)
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if got := e.Snapshot().Totals.Records; got != paths*perPath {
		t.Errorf("records accounted %d, want %d", got, paths*perPath)
	}
}
