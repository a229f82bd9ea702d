package main

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/sim"
)

type tpResult struct {
	pipeline, baseline float64 // stamps per second
	// baselineFloats is the baseline started from three precomputed ms floats per record instead of the records
	// themselves: what the unit conversion and the wider input cost it (reported beside the ratio, not in it).
	baselineFloats float64
	// ratios and floatRatios are each round's pipeline ÷ baseline stamps/s (baseline CPU ÷ pipeline CPU).
	ratios, floatRatios     []float64
	records, rounds, chunks int
}

// throughput measures, in one run, stamps/s through the whole pipeline (brackets and sync exchanges fed in their
// order, then per record: validation, offset lookup, correction, classification, sketch inserts) against a naive
// baseline that reads the same decoded records (latency.Record: three stamps with their units), converts each stamp
// to ms, subtracts, and makes the same three sketch inserts per record (into per-partition sketches, as the
// pipeline's are per path): the only work the baseline leaves out is Tidemark's. The same baseline started from
// three precomputed floats per record is measured as well and reported beside the ratio. All see the records of the
// synced scenario with produce, append and processed stamps. Each side is timed by the CPU time of its (locked) OS
// thread, not the wall clock, so that being descheduled counts against none. The sides alternate on chunks of about
// 4,096 records (the pipeline's events up to the chunk's last record, then each baseline over the same records, the
// order rotating), so that all three see the same machine: on a shared host one side's pass can cost twice another's
// of the same work, and passes timed apart, or a best pass picked per side, compare the neighbours' load, not the
// code. Each round sums every chunk's time per side; a round's ratio is baseline CPU ÷ pipeline CPU.
func throughput() (tpResult, error) {
	sc := sim.Scenarios()[1]
	sc.Name, sc.WithReceive = "throughput", false
	f, err := sim.Generate(sc)
	if err != nil {
		return tpResult{}, err
	}
	// Convert once, outside the timed loops: every side starts from decoded inputs (the pipeline from engine-typed
	// observations in arrival order, the baseline from the same records, the floats baseline from three floats per
	// record).
	type naive struct {
		p, a, c float64
		part    int32
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
	chunks := cutChunks(events, chunkRecords)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rounds = 15
	ratios := make([]float64, 0, rounds)
	floatRatios := make([]float64, 0, rounds)
	var sumPipe, sumBase, sumFloats time.Duration
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
		// Baselines: one set of sketches per partition, as the pipeline keeps them per path, fresh per round as the
		// pipeline's engine is.
		skBase, err := partitionSketches(sc.Partitions, e.Config().RelativeAccuracy)
		if err != nil {
			return tpResult{}, err
		}
		skFloats, err := partitionSketches(sc.Partitions, e.Config().RelativeAccuracy)
		if err != nil {
			return tpResult{}, err
		}
		live := 0
		var res latency.Result
		pipeline := func(c chunk) error {
			for _, ev := range events[c.ev0:c.ev1] {
				var err error
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
					return fmt.Errorf("throughput feed: %w", err)
				}
			}
			return nil
		}
		// Skewed clocks make about half the naive values negative; the sketch refuses those at once, which would
		// flatter the baselines, so they insert magnitudes: the same insert work as the pipeline.
		baseline := func(c chunk) {
			for i := c.rec0; i < c.rec1; i++ {
				st := &recs[i].Stamps
				p, a, c := stampMs(st[latency.Produce]), stampMs(st[latency.Append]), stampMs(st[latency.Processed])
				ps := &skBase[parts[i]]
				ps[0].Add(math.Abs(a - p))
				ps[1].Add(math.Abs(c - a))
				ps[2].Add(math.Abs(c - p))
			}
		}
		floats := func(c chunk) {
			for _, r := range raw[c.rec0:c.rec1] {
				ps := &skFloats[r.part]
				ps[0].Add(math.Abs(r.a - r.p))
				ps[1].Add(math.Abs(r.c - r.a))
				ps[2].Add(math.Abs(r.c - r.p))
			}
		}
		runtime.GC()
		var tPipe, tBase, tFloats time.Duration
		for k, c := range chunks {
			// The three sides take turns going first, so that none always follows the same one.
			for j := 0; j < 3; j++ {
				t0 := threadCPU()
				switch (k + j) % 3 {
				case 0:
					if err := pipeline(c); err != nil {
						return tpResult{}, err
					}
					tPipe += threadCPU() - t0
				case 1:
					baseline(c)
					tBase += threadCPU() - t0
				case 2:
					floats(c)
					tFloats += threadCPU() - t0
				}
			}
		}
		if live == 0 {
			return tpResult{}, fmt.Errorf("throughput feed: no live records")
		}
		ratios = append(ratios, tBase.Seconds()/tPipe.Seconds())
		floatRatios = append(floatRatios, tFloats.Seconds()/tPipe.Seconds())
		sumPipe, sumBase, sumFloats = sumPipe+tPipe, sumBase+tBase, sumFloats+tFloats
	}
	stamps := float64(3*len(recs)) * rounds
	return tpResult{pipeline: stamps / sumPipe.Seconds(), baseline: stamps / sumBase.Seconds(),
		baselineFloats: stamps / sumFloats.Seconds(), ratios: ratios, floatRatios: floatRatios,
		records: len(recs), rounds: rounds, chunks: len(chunks)}, nil
}

// event is one observation of the throughput feed: its kind and its index in the slice of its kind.
type event struct {
	kind sim.ObsKind
	i    int32
}

// chunkRecords is about how many records the sides alternate on.
const chunkRecords = 4096

// chunk is events[ev0:ev1], holding records[rec0:rec1].
type chunk struct{ ev0, ev1, rec0, rec1 int }

// cutChunks cuts events, in order, after every per-th record and at the end: every event lies in exactly one chunk,
// every chunk but the last holds per records.
func cutChunks(events []event, per int) []chunk {
	var chunks []chunk
	c, n := chunk{}, 0
	for i, ev := range events {
		if ev.kind == sim.ObsRecord {
			n++
		}
		if n == per || i == len(events)-1 {
			c.ev1, c.rec1 = i+1, c.rec0+n
			chunks = append(chunks, c)
			c, n = chunk{ev0: i + 1, rec0: c.rec1}, 0
		}
	}
	return chunks
}

// partitionSketches returns one set of three sketches per partition.
func partitionSketches(partitions int, accuracy float64) ([][3]*latency.Sketch, error) {
	sk := make([][3]*latency.Sketch, partitions)
	for p := range sk {
		for i := range sk[p] {
			var err error
			if sk[p][i], err = latency.NewSketch(accuracy); err != nil {
				return nil, err
			}
		}
	}
	return sk, nil
}

// msPerUnit converts a stamp's value to ms by its unit, as the engine does.
var msPerUnit = [...]float64{latency.Millis: 1, latency.Micros: 1e-3, latency.Nanos: 1e-6}

// stampMs is a stamp in ms (0 for a unit it does not know).
func stampMs(st latency.Stamp) float64 {
	if int(st.Unit) >= len(msPerUnit) {
		return 0
	}
	return float64(st.Value) * msPerUnit[st.Unit]
}

// threadCPU returns the CPU time (user + system) consumed by the calling OS thread, in ns; the caller has locked
// itself to its thread. POSIX CLOCK_THREAD_CPUTIME_ID (getrusage's RUSAGE_THREAD counts in µs, too coarse for a
// chunk of ~100 µs).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(time.Now().UnixNano()) // fall back to wall time
	}
	return time.Duration(ts.Nano())
}

func msTime(ms float64) time.Time {
	return time.Unix(0, int64(ms*1e6))
}
