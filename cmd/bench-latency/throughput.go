package main

import (
	"fmt"
	"math"
	"runtime"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/sim"
)

type tpResult struct {
	pipeline, baseline float64 // stamps per second
	records, rounds    int
}

// throughput measures, in one run, stamps/s through the whole pipeline (brackets and sync exchanges fed in their
// order, then per record: validation, offset lookup, correction, classification, sketch inserts) against a naive
// baseline doing three subtractions and the same three sketch inserts per record (into per-partition sketches, as
// the pipeline's are per path). Both see the same records of the
// synced scenario with produce, append and processed stamps. Each side is timed by the CPU time of its (locked) OS
// thread, not the wall clock, so that being descheduled on a shared machine counts against neither; best of several
// alternated rounds, the baseline repeated so that both sides run for comparable time.
func throughput() (tpResult, error) {
	sc := sim.Scenarios()[1]
	sc.Name, sc.WithReceive = "throughput", false
	f, err := sim.Generate(sc)
	if err != nil {
		return tpResult{}, err
	}
	// Convert once, outside the timed loops: both sides start from decoded, compact inputs (the pipeline from
	// engine-typed observations in arrival order, the baseline from three floats per record).
	type naive struct {
		p, a, c float64
		part    int32
	}
	type event struct {
		kind sim.ObsKind
		i    int32 // index into the slice of its kind
	}
	var (
		events   []event
		recs     []latency.Record
		parts    []int32
		brackets []latency.Bracket
		syncs    []latency.SyncExchange
		commits  []latency.CommitObservation
		raw      []naive
	)
	for _, o := range f.Obs {
		switch o.Kind {
		case sim.ObsBracket:
			events = append(events, event{o.Kind, int32(len(brackets))})
			brackets = append(brackets, latency.Bracket{Host: latency.HostID(o.Host + 1), Send: msTime(o.Send), RemoteMs: o.Remote, Ack: msTime(o.Ack)})
			continue
		case sim.ObsSync:
			events = append(events, event{o.Kind, int32(len(syncs))})
			syncs = append(syncs, latency.SyncExchange{Host: latency.HostID(o.Host + 1), T1: msTime(o.T1), T2: msTime(o.T2), T3: msTime(o.T3), T4: msTime(o.T4)})
			continue
		case sim.ObsCommit:
			events = append(events, event{o.Kind, int32(len(commits))})
			commits = append(commits, latency.CommitObservation{Partition: int32(o.Partition), Offset: o.Offset, At: msTime(o.At)})
			continue
		}
		events = append(events, event{o.Kind, int32(len(recs))})
		var r latency.Record
		r.Offset = o.Offset
		for m, st := range o.Stamps {
			if st.Value != 0 {
				r.Stamps[m] = latency.Stamp{Value: st.Value, Host: latency.HostID(st.Host + 1), Unit: st.Unit}
			}
		}
		recs = append(recs, r)
		parts = append(parts, int32(o.Partition))
		ms := func(st sim.Stamp) float64 {
			if st.Unit == latency.Nanos {
				return float64(st.Value) / 1e6
			}
			return float64(st.Value)
		}
		raw = append(raw, naive{ms(o.Stamps[latency.Produce]), ms(o.Stamps[latency.Append]), ms(o.Stamps[latency.Processed]), int32(o.Partition)})
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rounds, baseReps = 15, 4
	best := func(cur, d time.Duration) time.Duration {
		if cur == 0 || d < cur {
			return d
		}
		return cur
	}
	var tPipe, tBase time.Duration
	for round := 0; round < rounds; round++ {
		// Pipeline: a fresh engine per round, host ids in the order sim.Run would issue them (RefHost is 0).
		e, err := latency.NewEngine(latency.Config{})
		if err != nil {
			return tpResult{}, err
		}
		for _, n := range f.Hosts {
			e.Host(n)
		}
		paths := make([]*latency.Path, sc.Partitions)
		for p := range paths {
			paths[p] = e.Path("bench", "t", int32(p))
		}
		live := 0
		var res latency.Result
		runtime.GC()
		t0 := threadCPU()
		for _, ev := range events {
			switch ev.kind {
			case sim.ObsBracket:
				err = e.ObserveBracket(brackets[ev.i])
			case sim.ObsSync:
				err = e.ObserveSync(syncs[ev.i])
			case sim.ObsCommit:
				c := &commits[ev.i]
				paths[c.Partition].ObserveCommit(c.Offset, c.At)
			case sim.ObsRecord:
				if paths[parts[ev.i]].ObserveInto(&recs[ev.i], &res); res.Live {
					live++
				}
			}
			if err != nil {
				return tpResult{}, fmt.Errorf("throughput feed: %w", err)
			}
		}
		tPipe = best(tPipe, threadCPU()-t0)
		if live == 0 {
			return tpResult{}, fmt.Errorf("throughput feed: no live records")
		}

		// Baseline: three subtractions and the same three sketch inserts per record, into the same sketches: one
		// set per partition, as the pipeline keeps them per path.
		sk := make([][3]*latency.Sketch, sc.Partitions)
		for p := range sk {
			for i := range sk[p] {
				if sk[p][i], err = latency.NewSketch(e.Config().RelativeAccuracy); err != nil {
					return tpResult{}, err
				}
			}
		}
		runtime.GC()
		t0 = threadCPU()
		for rep := 0; rep < baseReps; rep++ {
			for _, r := range raw {
				// Skewed clocks make about half the naive values negative; the sketch refuses those at once, which would
				// flatter the baseline, so it inserts magnitudes: the same insert work as the pipeline.
				ps := &sk[r.part]
				ps[0].Add(math.Abs(r.a - r.p))
				ps[1].Add(math.Abs(r.c - r.a))
				ps[2].Add(math.Abs(r.c - r.p))
			}
		}
		tBase = best(tBase, (threadCPU()-t0)/baseReps)
	}
	stamps := float64(3 * len(recs))
	return tpResult{pipeline: stamps / tPipe.Seconds(), baseline: stamps / tBase.Seconds(), records: len(recs), rounds: rounds}, nil
}

// threadCPU returns the CPU time (user + system) consumed by the calling OS thread; the caller has locked itself to
// its thread. Linux's RUSAGE_THREAD.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return time.Duration(time.Now().UnixNano()) // fall back to wall time
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rusageThread is RUSAGE_THREAD from <sys/resource.h> (Linux).
const rusageThread = 1

func msTime(ms float64) time.Time {
	return time.Unix(0, int64(ms*1e6))
}
