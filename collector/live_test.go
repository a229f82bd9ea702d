package collector

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

func TestLatencyBuckets(t *testing.T) {
	tests := []struct {
		name       string
		thresholds []time.Duration
		want       []float64
	}{
		// The default SLO (500 ms): a 1-2.5-5 series from 1 ms to 50 s; 0.5 is a boundary, as the rules need.
		{"default", nil, []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50}},
		// The first threshold sets the scale; the second is added as its own boundary, so le="0.3" exists too.
		{"two thresholds", []time.Duration{200 * time.Millisecond, 300 * time.Millisecond},
			[]float64{0.0004, 0.001, 0.002, 0.004, 0.01, 0.02, 0.04, 0.1, 0.2, 0.3, 0.4, 1, 2, 4, 10, 20}},
		// A threshold that is already a multiple of the first adds nothing.
		{"threshold on the scale", []time.Duration{time.Second, 2 * time.Second},
			[]float64{0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LatencyBuckets(tc.thresholds)
			if len(got) != len(tc.want) {
				t.Fatalf("LatencyBuckets(%v) = %v, want %v", tc.thresholds, got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("LatencyBuckets(%v) = %v, want %v", tc.thresholds, got, tc.want)
				}
			}
		})
	}
}

// TestLiveLatencyHistogram seeds the receipts path with live receipts of known end-to-end latency, a redelivery of
// one of them and a receipt whose stamps contradict the known clock offsets (skew-suspected): only the live ones
// are in tidemark_e2e_latency_seconds, in exactly the buckets their corrected latency falls in, and every
// observation that carried a trace has an exemplar with its trace id.
func TestLiveLatencyHistogram(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, truth.Add(10*time.Second))
	// Every clock's offset is known, as in TestReceiptsCorrectsC25: broker-1 at 0 ± 1.5 ms from probe brackets,
	// producer P1 at +2500 ms and consumer C1 at −300 ms, both synced to ±0.1 ms, over a minute of history.
	seedC25Clocks(t, deps, truth)
	sync := func(d time.Duration) instrument.ClockOffset {
		return instrument.ClockOffset{Offset: d, Uncertainty: 100 * time.Microsecond, Valid: true}
	}
	// receipt: a record produced at truth+at (true time), appended 20 ms later, received 8 ms before it was
	// processed, e2e after it was produced; each stamp as the skewed host's clock reads it.
	receipt := func(offset int64, at, e2e time.Duration, trace byte) instrument.Receipt {
		produced := truth.Add(at)
		r := instrument.Receipt{Group: "g", Topic: "orders", Partition: 0, Offset: offset,
			RecordTimestampMs: produced.Add(20 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
			ProduceNs: produced.Add(2500 * time.Millisecond).UnixNano(), ProduceHost: "P1", ProduceClock: sync(2500 * time.Millisecond),
			ReceiveNs:   produced.Add(e2e - 8*time.Millisecond - 300*time.Millisecond).UnixNano(),
			ProcessedNs: produced.Add(e2e - 300*time.Millisecond).UnixNano(), Host: "C1", Clock: sync(-300 * time.Millisecond)}
		if trace != 0 {
			r.TraceID, r.SpanID, r.HasTrace = [16]byte{trace}, [8]byte{trace}, true
		}
		return r
	}
	live := []instrument.Receipt{
		receipt(100, 0, 120*time.Millisecond, 1),
		receipt(101, 10*time.Millisecond, 240*time.Millisecond, 2),
		receipt(102, 20*time.Millisecond, 499*time.Millisecond, 3),  // just inside the SLO
		receipt(103, 30*time.Millisecond, 501*time.Millisecond, 4),  // just outside it
		receipt(104, 40*time.Millisecond, 3000*time.Millisecond, 0), // no trace: no exemplar
	}
	// Offset 101 processed again after 104 with no commit seen: the uncommitted tail handed out again, a redelivery
	// (its own class in storage), never live latency, however slow it is.
	redelivered := receipt(101, 10*time.Millisecond, 2*time.Second, 5)
	// Processed (C1, synced to ±0.1 ms) 50 ms before the append (broker-1, ±1.5 ms): impossible with the known
	// offsets, so the sample is skew-suspected and kept out of the live numbers.
	skewed := receipt(105, 50*time.Millisecond, 15*time.Millisecond, 6)
	skewed.ReceiveNs = skewed.ProcessedNs - int64(time.Millisecond)
	skewed.RecordTimestampMs += 50

	p := &Receipts{pathDeps: deps}
	recs := []kafka.Record{receiptRecord(t, 0, live...), receiptRecord(t, 1, redelivered), receiptRecord(t, 2, skewed)}
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "rc", Records: recs}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	// The seed does what it claims: rows 0-4 live and trusted, row 5 a redelivery, row 6 skew-suspected.
	rows := sink.rows[0].Latency
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7", len(rows))
	}
	for i, want := range []int64{120, 240, 499, 501, 3000} {
		if rows[i].Class != store.ClassLive || rows[i].E2EMs != want || rows[i].Valid&store.ValidE2E == 0 {
			t.Fatalf("row %d: class %v e2e %d valid %08b flags %b, want live %d ms", i, rows[i].Class, rows[i].E2EMs, rows[i].Valid, rows[i].Flags, want)
		}
		// Both ends synced to ±0.1 ms: the stored interval holds the estimate and is a fraction of a ms either side
		// (widened to the rounded estimate by at most half a ms).
		if lo, hi := rows[i].StageBound(store.BoundE2E); rows[i].Bounded&store.ValidE2E == 0 ||
			lo > float64(want) || hi < float64(want) || float64(want)-lo > 0.75 || hi-float64(want) > 0.75 {
			t.Fatalf("row %d: e2e %d ms within [%v, %v] (bounded %04b), want a sub-ms interval around it", i, want, lo, hi, rows[i].Bounded)
		}
	}
	if rows[5].Class != store.ClassRedelivery {
		t.Fatalf("row 5 class %v, want redelivery", rows[5].Class)
	}
	if rows[6].Flags&uint32(latency.FlagSkewSuspected) == 0 {
		t.Fatalf("row 6 flags %b, want skew-suspected", rows[6].Flags)
	}

	// Exactly the five live samples, cumulative per bucket: 0.12 and 0.24 in le=0.25, 0.499 in le=0.5, 0.501 in
	// le=1, 3.0 in le=5. The sum is theirs to within float rounding of the corrected moments.
	want := `
# HELP tidemark_e2e_latency_seconds Corrected end-to-end latency (processed - produce, reference clock) of live receipts only: no replays, backfills or commit-bounded samples, none whose e2e rests on a skew-suspected or unsettled clock pair. Exemplars carry the trace id.
# TYPE tidemark_e2e_latency_seconds histogram
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.001"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.0025"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.005"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.01"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.025"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.05"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.1"} 0
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.25"} 2
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.5"} 3
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="1"} 4
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="2.5"} 4
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="5"} 5
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="10"} 5
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="25"} 5
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="50"} 5
tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="+Inf"} 5
tidemark_e2e_latency_seconds_sum{group="g",topic="orders"} SUM
tidemark_e2e_latency_seconds_count{group="g",topic="orders"} 5
`
	m := histogram(t, deps.metrics.E2ELatency)
	if sum := m.GetSampleSum(); sum < 4.36-1e-6 || sum > 4.36+1e-6 {
		t.Fatalf("sum %v, want 4.36", sum)
	}
	want = strings.Replace(want, "SUM", strconv.FormatFloat(m.GetSampleSum(), 'g', -1, 64), 1)
	if err := testutil.CollectAndCompare(deps.metrics.E2ELatency, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// Exemplars: the traced sample of each bucket it landed in (the first of two in le=0.25, as one per bucket per
	// second is kept), none for the untraced 3 s sample.
	ex := map[float64]string{}
	for _, b := range m.GetBucket() {
		if e := b.GetExemplar(); e != nil {
			ex[b.GetUpperBound()] = e.GetLabel()[0].GetName() + "=" + e.GetLabel()[0].GetValue()
		}
	}
	wantEx := map[float64]string{
		0.25: "trace_id=01000000000000000000000000000000",
		0.5:  "trace_id=03000000000000000000000000000000",
		1:    "trace_id=04000000000000000000000000000000",
	}
	if len(ex) != len(wantEx) {
		t.Fatalf("exemplars %v, want %v", ex, wantEx)
	}
	for k, v := range wantEx {
		if ex[k] != v {
			t.Fatalf("exemplars %v, want %v", ex, wantEx)
		}
	}
	// Stages: the five live samples' processing (8 ms each) and nothing of the redelivery or the skewed sample.
	if n := testutil.CollectAndCount(deps.metrics.StageLatency, "tidemark_stage_latency_seconds"); n != 3 {
		t.Fatalf("%d stage series, want ingest, queue_wait, processing", n)
	}
	proc := histogram(t, deps.metrics.StageLatency.WithLabelValues("processing", "g", "orders").(prometheus.Histogram))
	if proc.GetSampleCount() != 5 || proc.GetBucket()[3].GetCumulativeCount() != 5 || proc.GetBucket()[2].GetCumulativeCount() != 0 {
		t.Fatalf("processing histogram %v", proc)
	}
}

// histogram returns the one histogram c collects.
func histogram(t *testing.T, c prometheus.Collector) *dto.Histogram {
	t.Helper()
	ch := make(chan prometheus.Metric, 4)
	c.Collect(ch)
	close(ch)
	var out *dto.Histogram
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		if out != nil {
			t.Fatal("more than one series")
		}
		out = d.GetHistogram()
	}
	if out == nil {
		t.Fatal("no series")
	}
	return out
}

func TestLiveObservePerStageTrust(t *testing.T) {
	m := NewMetrics(nil)
	var h liveHistograms
	s := h.get(m, "g", "orders", time.Now())
	has := uint8(1<<latency.StageIngest | 1<<latency.StageQueueWait | 1<<latency.StageDelivery | 1<<latency.StageProcessing | 1<<latency.StageE2E)
	res := latency.Result{Class: latency.ClassLive, Flags: latency.FlagSkewSuspected, Has: has,
		Untrusted: 1<<latency.StageQueueWait | 1<<latency.StageDelivery | 1<<latency.StageE2E}
	res.Stages[latency.StageIngest], res.Stages[latency.StageQueueWait], res.Stages[latency.StageProcessing] = 3, 40, 7
	res.Stages[latency.StageE2E] = 50
	s.observe(&res, nil, time.Now())
	// A commit-bounded record and a replay feed nothing, trusted or not.
	bound := res
	bound.Flags, bound.Untrusted = latency.FlagCommitBound, 0
	s.observe(&bound, nil, time.Now())
	replay := res
	replay.Class, replay.Flags, replay.Untrusted = latency.ClassReplay, 0, 0
	s.observe(&replay, nil, time.Now())

	count := func(stage string) uint64 {
		return histogram(t, m.StageLatency.WithLabelValues(stage, "g", "orders").(prometheus.Histogram)).GetSampleCount()
	}
	if n := count("processing"); n != 1 {
		t.Errorf("processing: %d samples, want 1 (same-host stage of a skew-suspected record)", n)
	}
	if n := count("ingest"); n != 1 {
		t.Errorf("ingest: %d samples, want 1", n)
	}
	if n := count("queue_wait"); n != 0 {
		t.Errorf("queue_wait: %d samples, want 0 (rests on the suspect pair)", n)
	}
	if n := histogram(t, m.E2ELatency.WithLabelValues("g", "orders").(prometheus.Histogram)).GetSampleCount(); n != 0 {
		t.Errorf("e2e: %d samples, want 0", n)
	}
}

// BenchmarkLiveObserve measures one live receipt's cost in the histograms (e2e with a trace, four stages) against
// a plain Observe of the e2e value alone, in the same run: the ratio is what the hot path pays for the live metrics.
func BenchmarkLiveObserve(b *testing.B) {
	m := NewMetrics(nil)
	var h liveHistograms
	s := h.get(m, "g", "orders", time.Now())
	res := latency.Result{Class: latency.ClassLive, Live: true, Has: 1<<latency.StageIngest | 1<<latency.StageQueueWait | 1<<latency.StageProcessing | 1<<latency.StageE2E}
	res.Stages[latency.StageIngest], res.Stages[latency.StageQueueWait], res.Stages[latency.StageProcessing] = 3, 40, 7
	res.Stages[latency.StageE2E] = 50
	trace := make([]byte, 16)
	now := time.Now()
	b.Run("live", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.observe(&res, trace, now.Add(time.Duration(i)*time.Microsecond))
		}
	})
	b.Run("baseline_one_observe", func(b *testing.B) {
		o := m.E2ELatency.WithLabelValues("g", "baseline")
		for i := 0; i < b.N; i++ {
			o.Observe(0.05)
		}
	})
}

// TestLiveSeriesBoundedAndSwept: at most max (group, topic) pairs get histograms (a further pair gets none, for the
// caller to count), and a pair not observed for the idle TTL loses its series in the registry, making room.
func TestLiveSeriesBoundedAndSwept(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	h := liveHistograms{max: 2}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	res := latency.Result{Class: latency.ClassLive, Live: true, Has: 1<<latency.StageE2E | 1<<latency.StageProcessing}
	res.Stages[latency.StageE2E], res.Stages[latency.StageProcessing] = 20, 5
	a, b := h.get(m, "g1", "t", t0), h.get(m, "g2", "t", t0)
	if a == nil || b == nil {
		t.Fatal("pairs under the bound got no series")
	}
	if c := h.get(m, "g3", "t", t0); c != nil {
		t.Fatal("a third pair got series past max 2")
	}
	a.observe(&res, nil, t0)
	b.observe(&res, nil, t0.Add(50*time.Second))
	// Histograms registered (each is len(buckets)+3 exposed series).
	histograms := func() int {
		n, _ := testutil.GatherAndCount(reg, "tidemark_e2e_latency_seconds", "tidemark_stage_latency_seconds")
		return n
	}
	if n := histograms(); n != 4 {
		t.Fatalf("%d histograms for two pairs observed in e2e and processing, want 4", n)
	}
	if n := h.sweep(m, t0.Add(70*time.Second), time.Minute); n != 1 {
		t.Fatalf("swept %d pairs, want 1 (g1, idle 70 s)", n)
	}
	if n := histograms(); n != 2 {
		t.Fatalf("%d histograms after the sweep, want g2's 2", n)
	}
	if v := testutil.ToFloat64(m.LiveLabelSets); v != 1 {
		t.Fatalf("live label sets %v, want 1", v)
	}
	if c := h.get(m, "g3", "t", t0.Add(70*time.Second)); c == nil {
		t.Fatal("no room for a new pair after the sweep")
	}
}

// TestLiveE2EBound: every e2e sample observed in tidemark_e2e_latency_seconds has its interval's ends observed in
// tidemark_e2e_latency_bound_seconds (end lower and upper); an unbounded upper end is observed as +Inf and counted,
// never dropped; the bound series are swept with the pair's other series.
func TestLiveE2EBound(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	var h liveHistograms
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := h.get(m, "g", "orders", t0)
	res := latency.Result{Class: latency.ClassLive, Live: true, Has: 1 << latency.StageE2E}
	res.Stages[latency.StageE2E] = 100
	res.MomentUnc[latency.Produce], res.MomentUnc[latency.Processed] = 3, 2 // e2e within [95, 105] ms
	s.observe(&res, nil, t0)
	open := res
	open.Stages[latency.StageE2E] = 40
	open.MomentUnc[latency.Produce] = math.Inf(1) // the producer's offset unknown: [0, +Inf)
	s.observe(&open, nil, t0)
	skewed := res // untrusted e2e: in neither histogram
	skewed.Untrusted = 1 << latency.StageE2E
	s.observe(&skewed, nil, t0)

	lower := histogram(t, m.E2EBound.WithLabelValues("lower", "g", "orders").(prometheus.Histogram))
	upper := histogram(t, m.E2EBound.WithLabelValues("upper", "g", "orders").(prometheus.Histogram))
	est := histogram(t, m.E2ELatency.WithLabelValues("g", "orders").(prometheus.Histogram))
	if est.GetSampleCount() != 2 || lower.GetSampleCount() != 2 || upper.GetSampleCount() != 2 {
		t.Fatalf("counts: estimate %d lower %d upper %d, want 2 each", est.GetSampleCount(), lower.GetSampleCount(), upper.GetSampleCount())
	}
	if sum := lower.GetSampleSum(); math.Abs(sum-0.095) > 1e-12 {
		t.Errorf("lower sum %v, want 0.095 (0.095 + 0)", sum)
	}
	if sum := upper.GetSampleSum(); !math.IsInf(sum, 1) {
		t.Errorf("upper sum %v, want +Inf (one unbounded upper end)", sum)
	}
	// Bucket le=0.1: lower holds 0.095 and 0; upper holds neither 0.105 nor +Inf.
	for _, b := range lower.GetBucket() {
		if b.GetUpperBound() == 0.1 && b.GetCumulativeCount() != 2 {
			t.Errorf("lower le=0.1: %d, want 2", b.GetCumulativeCount())
		}
	}
	for _, b := range upper.GetBucket() {
		if b.GetUpperBound() == 0.1 && b.GetCumulativeCount() != 0 {
			t.Errorf("upper le=0.1: %d, want 0", b.GetCumulativeCount())
		}
	}
	if v := testutil.ToFloat64(m.E2EUnbounded.WithLabelValues("g", "orders")); v != 1 {
		t.Errorf("unbounded %v, want 1", v)
	}
	if n := h.sweep(m, t0.Add(2*time.Minute), time.Minute); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	if n, err := testutil.GatherAndCount(reg, "tidemark_e2e_latency_bound_seconds", "tidemark_e2e_latency_unbounded_total"); err != nil || n != 0 {
		t.Fatalf("%d bound series after the sweep (%v), want 0", n, err)
	}
}
