package latency

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// checkInvariants asserts the correction's promises on one result: no negative stage, the partition stages sum to
// e2e, queue wait + processing = delivery, and no stage exceeds e2e.
func checkInvariants(t *testing.T, r Result, what string) {
	t.Helper()
	for s := Stage(0); s < NumStages; s++ {
		if v, ok := r.Stage(s); ok && (v < 0 || math.IsNaN(v)) {
			t.Fatalf("%s: stage %s = %v", what, s, v)
		}
	}
	e2e, hasE2E := r.Stage(StageE2E)
	in, hasIn := r.Stage(StageIngest)
	mi, hasMi := r.Stage(StageMirror)
	de, hasDe := r.Stage(StageDelivery)
	q, hasQ := r.Stage(StageQueueWait)
	pr, hasPr := r.Stage(StageProcessing)
	if hasQ && hasPr && hasDe && de != q+pr {
		t.Fatalf("%s: delivery %v != queue %v + processing %v", what, de, q, pr)
	}
	if hasE2E && hasIn && hasDe {
		sum := in + de
		if hasMi {
			sum += mi
		}
		if math.Abs(sum-e2e) > 1e-9*math.Max(1, e2e) {
			t.Fatalf("%s: stages sum %v != e2e %v", what, sum, e2e)
		}
	}
	if hasE2E {
		for s := Stage(0); s < StageE2E; s++ {
			if v, ok := r.Stage(s); ok && v > e2e+1e-9*math.Max(1, e2e) {
				t.Fatalf("%s: stage %s = %v > e2e %v", what, s, v, e2e)
			}
		}
	}
}

// TestPropertyRandomScenarios feeds random records with random clocks (some hosts known by reports, some by
// brackets, some unknown), random units, missing stamps and garbage, and checks the invariants on every result.
func TestPropertyRandomScenarios(t *testing.T) {
	seeds := 30
	if testing.Short() {
		seeds = 5
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		e := mustEngine(t, Config{})
		base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
		const nh = 6
		var ids [nh]HostID
		var off [nh]float64 // true offsets, ms
		for i := range ids {
			ids[i] = e.Host(string(rune('a' + i)))
			off[i] = (r.Float64()*2 - 1) * 10000
			switch r.IntN(3) {
			case 0: // reported, with an error up to its uncertainty
				u := r.Float64() * 20
				_ = e.ReportOffset(ids[i], msDur(off[i]+(r.Float64()*2-1)*u), msDur(u), base)
			case 1: // bracketed
				for k := 0; k < 20; k++ {
					_ = e.ObserveBracket(bracketAt(ids[i], base.Add(time.Duration(k)*time.Second), 1+r.Float64()*19, 1+r.Float64()*19, off[i]))
				}
			}
		}
		p := e.Path("g", "t", int32(seed))
		for k := 0; k < 2000; k++ {
			tp := timeToMs(base) + r.Float64()*60000
			times := [NumMoments]float64{Produce: tp}
			times[SourceAppend] = tp + r.ExpFloat64()*5
			times[Append] = times[SourceAppend] + r.ExpFloat64()*50
			times[Receive] = times[Append] + r.ExpFloat64()*30
			times[Processed] = times[Receive] + r.ExpFloat64()*10
			times[Commit] = times[Processed] + r.ExpFloat64()*1000
			var rec Record
			rec.Offset = int64(r.IntN(3000))
			for m := Moment(0); m < NumMoments; m++ {
				if r.IntN(4) == 0 {
					continue // absent
				}
				h := r.IntN(nh + 1) // nh means the reference clock
				v := times[m]
				host := RefHost
				if h < nh {
					v += off[h]
					host = ids[h]
				}
				st := Stamp{Host: host}
				switch r.IntN(10) {
				case 0:
					st.Value = NoTimestamp
				case 1:
					st.Value, st.Unit = int64(v*1e3), Millis // wrong unit
				case 2, 3, 4:
					st.Value, st.Unit = int64(v*1e6), Nanos
				default:
					st.Value, st.Unit = int64(v), Millis
				}
				rec.Stamps[m] = st
			}
			checkInvariants(t, p.Observe(rec), "random record")
		}
		snap := e.Snapshot()
		for s := Stage(0); s < NumStages; s++ {
			if q := snap.Live[s].Quantile(0); !math.IsNaN(q) && q < 0 {
				t.Fatalf("seed %d: live sketch %s has a negative value %v", seed, s, q)
			}
		}
	}
}

// FuzzObserve drives Observe with arbitrary stamps; it must never panic nor break the invariants.
func FuzzObserve(f *testing.F) {
	f.Add(int64(1795953600000), int64(1795953600020), int64(1795953599820), uint8(0), uint8(1), uint8(2), uint8(0), int64(1))
	f.Add(int64(-1), int64(0), int64(1795953600000000000), uint8(3), uint8(0), uint8(9), uint8(2), int64(-5))
	f.Fuzz(func(t *testing.T, p, a, c int64, hp, ha, hc, unit uint8, offset int64) {
		e := mustEngine(t, Config{})
		for _, n := range []string{"P", "B", "C"} {
			e.Host(n)
		}
		_ = e.ReportOffset(1, 2500*time.Millisecond, time.Millisecond, time.UnixMilli(1795953600000))
		var rec Record
		rec.Offset = offset
		rec.Stamps[Produce] = Stamp{Value: p, Host: HostID(hp % 5), Unit: Unit(unit % 4)}
		rec.Stamps[Append] = Stamp{Value: a, Host: HostID(ha % 5), Unit: Millis}
		rec.Stamps[Processed] = Stamp{Value: c, Host: HostID(hc % 5), Unit: Nanos}
		checkInvariants(t, e.Path("g", "t", 0).Observe(rec), "fuzzed record")
	})
}

// FuzzDecodeSketch checks the decoder of stored sketch states: arbitrary bytes give an error or a usable sketch,
// never a panic. When a decoded sketch's re-encoding decodes too, the counts agree. (A crafted input can decode into
// a sketch whose re-encoding the library then rejects with its bin-index panic, recovered as ErrCorruptSketch; real
// sketches, built by Add, round-trip: TestSketchRoundTrip.)
func FuzzDecodeSketch(f *testing.F) {
	s, _ := NewSketch(0.01)
	for i := 1; i < 100; i++ {
		s.Add(float64(i))
	}
	f.Add(s.Encode(nil))
	f.Add([]byte{})
	f.Add([]byte{0x02, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeSketch(b)
		if err != nil {
			return
		}
		d.Quantile(0.5)
		d2, err := DecodeSketch(d.Encode(nil))
		if errors.Is(err, ErrCorruptSketch) {
			return
		}
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		// Counts are float sums; re-encoding may add them in another order.
		if c1, c2 := d.Count(), d2.Count(); math.Abs(c1-c2) > 1e-9*math.Abs(c1) && !(math.IsNaN(c1) && math.IsNaN(c2)) {
			t.Fatalf("count %v after round trip, was %v", c2, c1)
		}
	})
}

func TestSketchRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	s, _ := NewSketch(0.01)
	for i := 0; i < 10000; i++ {
		s.Add(r.ExpFloat64() * 50)
	}
	s.Add(0)
	d, err := DecodeSketch(s.Encode(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if a, b := s.Quantile(q), d.Quantile(q); a != b {
			t.Errorf("q%v: %v after round trip, was %v", q, b, a)
		}
	}
	if s.Count() != d.Count() || d.Count() != 10001 {
		t.Errorf("count %v after round trip, was %v", d.Count(), s.Count())
	}
	m := d.Copy()
	if err := m.Merge(s); err != nil || m.Count() != 20002 {
		t.Errorf("merge: count %v, err %v; want 20002", m.Count(), err)
	}
}

// TestProjectKeepsSameHostGaps: on random timelines, the projection is monotone, keeps every gap between
// consecutive stamps of one host that did not run backwards, and, when every stamp has its own host, equals plain
// pool-adjacent-violators over the known stamps, with each gap of unknown stamps made monotone among themselves
// and then clamped between the known stamps around it (an unknown stamp moves only as far as order requires).
func TestProjectKeepsSameHostGaps(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	for iter := 0; iter < 20000; iter++ {
		var tl timeline
		chain := uint8(r.IntN(1<<Commit)) | 1<<Processed
		distinct := iter%4 == 0
		var c, orig [NumMoments]float64
		for m := Moment(0); m < Commit; m++ {
			if chain&(1<<m) == 0 {
				continue
			}
			tl.host[m] = HostID(r.IntN(2) + 1)
			if distinct {
				tl.host[m] = HostID(m + 1)
			}
			tl.res[m] = resolved{unc: r.Float64() * 10, kind: KindReported}
			if r.IntN(5) == 0 {
				tl.res[m].kind = KindUnknown
			}
			c[m] = r.Float64() * 100
		}
		orig = c
		project(&tl, chain, &c)
		prev := Moment(NumMoments)
		var ky, kw []float64 // known stamps
		var ms []Moment
		for m := Moment(0); m < Commit; m++ {
			if chain&(1<<m) == 0 {
				continue
			}
			ms = append(ms, m)
			if tl.res[m].kind != KindUnknown {
				ky, kw = append(ky, orig[m]), append(kw, 1/(tl.res[m].unc*tl.res[m].unc+0.25))
			}
			if prev < NumMoments {
				if c[m] < c[prev]-1e-9 {
					t.Fatalf("iter %d: not monotone at %v: %v", iter, m, c)
				}
				if tl.host[m] == tl.host[prev] && orig[m] >= orig[prev] &&
					math.Abs((c[m]-c[prev])-(orig[m]-orig[prev])) > 1e-9 {
					t.Fatalf("iter %d: same-host gap %v→%v changed from %v to %v", iter, prev, m, orig[m]-orig[prev], c[m]-c[prev])
				}
			}
			prev = m
		}
		if !distinct {
			continue
		}
		pav(ky, kw)
		want := map[Moment]float64{}
		ki := 0
		lo := math.Inf(-1)
		for i := 0; i < len(ms); {
			if tl.res[ms[i]].kind != KindUnknown {
				want[ms[i]], lo = ky[ki], ky[ki]
				ki++
				i++
				continue
			}
			j := i
			var gy, gw []float64
			for j < len(ms) && tl.res[ms[j]].kind == KindUnknown {
				gy, gw = append(gy, orig[ms[j]]), append(gw, 1)
				j++
			}
			hi := math.Inf(1)
			if ki < len(ky) {
				hi = ky[ki]
			}
			pav(gy, gw)
			for k := i; k < j; k++ {
				want[ms[k]] = math.Min(math.Max(gy[k-i], lo), hi)
			}
			i = j
		}
		for _, m := range ms {
			if math.Abs(c[m]-want[m]) > 1e-9 {
				t.Fatalf("iter %d: distinct hosts: project %v, want %v", iter, c, want)
			}
		}
	}
}
