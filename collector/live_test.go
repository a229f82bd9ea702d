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
# HELP tidemark_e2e_latency_seconds Corrected end-to-end latency (processed - produce, reference clock) of live receipts only: no replays, backfills or commit-bounded samples, none whose e2e is invalid (an end's clock not placed, an order violated beyond the uncertainty); a wide interval is no reason to leave one out. Exemplars carry the trace id.
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
	// Stages: the five live samples' processing (8 ms each), nothing of the redelivery, and of the skewed sample
	// only its processing (1 ms, in le=0.001; one clock's two stamps: valid whatever the violated pair next to it).
	if n := testutil.CollectAndCount(deps.metrics.StageLatency, "tidemark_stage_latency_seconds"); n != 3 {
		t.Fatalf("%d stage series, want ingest, queue_wait, processing", n)
	}
	proc := histogram(t, deps.metrics.StageLatency.WithLabelValues("processing", "g", "orders").(prometheus.Histogram))
	if proc.GetSampleCount() != 6 || proc.GetBucket()[3].GetCumulativeCount() != 6 || proc.GetBucket()[0].GetCumulativeCount() != 1 ||
		proc.GetBucket()[2].GetCumulativeCount() != 1 {
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

// unknownAppends knows no partition leader: every LogAppendTime stamp is on latency.UnknownHost.
type unknownAppends struct{}

func (unknownAppends) AppendLeader(context.Context, string, int32, int64) int32 { return -1 }
func (unknownAppends) Placed(string, int32, int64) int32                        { return -1 }
func (unknownAppends) Await(string, int32, int64) <-chan struct{}               { return nil }

// TestLiveE2EWithUnknownAppendLeader: producer P1 and consumer C1 synced to ±0.1 ms, the record's LogAppendTime
// stamped by a leader the collector cannot name. The end-to-end runs between the two known clocks and does not
// depend on that broker: the receipt is observed in tidemark_e2e_latency_seconds (120 ms) and its row is valid for
// the SLO; ingest and queue wait, which rest on the unknown append, are not.
func TestLiveE2EWithUnknownAppendLeader(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, truth.Add(10*time.Second))
	deps.appends = unknownAppends{}
	seedC25Clocks(t, deps, truth)
	r := c25Receipt(truth, "g", 100, 0, true, 120)
	p := &Receipts{pathDeps: deps}
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 0, r)}}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	row := sink.rows[0].Latency[0]
	if row.Class != store.ClassLive || row.E2EMs != 120 || row.Valid&store.ValidE2E == 0 || row.Valid&(store.ValidIngest|store.ValidQueue) != 0 {
		t.Fatalf("row class %v e2e %d valid %08b flags %b; want live, 120 ms, e2e valid, ingest and queue not", row.Class, row.E2EMs, row.Valid, row.Flags)
	}
	if m := histogram(t, deps.metrics.E2ELatency); m.GetSampleCount() != 1 || math.Abs(m.GetSampleSum()-0.12) > 1e-6 {
		t.Fatalf("e2e histogram count %d sum %v, want 1 sample of 0.12 s", m.GetSampleCount(), m.GetSampleSum())
	}
	if n := testutil.CollectAndCount(deps.metrics.StageLatency, "tidemark_stage_latency_seconds"); n != 1 {
		t.Fatalf("%d stage series, want processing only", n)
	}
}

// TestLiveE2EBound: a live e2e sample observed in tidemark_e2e_latency_seconds has its interval's ends observed in
// tidemark_e2e_latency_bound_seconds (end lower and upper), the same ends the stored row carries; the band holds the
// estimate and, between two hosts synced to ±0.1 ms, is at most a few tenths of a millisecond wide; the bound series
// are swept with the pair's other series.
func TestLiveE2EBound(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, _ := newTestDeps(t, truth.Add(10*time.Second))
	seedC25Clocks(t, deps, truth)
	r := c25Receipt(truth, "g", 100, 0, true, 120)
	p := &Receipts{pathDeps: deps}
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 0, r)}}, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	row := sink.rows[0].Latency[0]
	lo, hi := row.LowerMs[store.BoundE2E], row.UpperMs[store.BoundE2E]
	if row.Valid&store.ValidE2E == 0 || !(lo <= 120 && 120 <= hi) || hi-lo > 0.5 {
		t.Fatalf("row e2e valid %v band [%v, %v] ms, want a valid e2e with a band holding 120 ms at most 0.5 ms wide", row.Valid&store.ValidE2E != 0, lo, hi)
	}
	m := deps.metrics
	lower := histogram(t, m.E2EBound.WithLabelValues("lower", "g", "orders").(prometheus.Histogram))
	upper := histogram(t, m.E2EBound.WithLabelValues("upper", "g", "orders").(prometheus.Histogram))
	est := histogram(t, m.E2ELatency.WithLabelValues("g", "orders").(prometheus.Histogram))
	if est.GetSampleCount() != 1 || lower.GetSampleCount() != 1 || upper.GetSampleCount() != 1 {
		t.Fatalf("counts: estimate %d lower %d upper %d, want 1 each", est.GetSampleCount(), lower.GetSampleCount(), upper.GetSampleCount())
	}
	if math.Abs(lower.GetSampleSum()-lo/1e3) > 1e-9 || math.Abs(upper.GetSampleSum()-hi/1e3) > 1e-9 {
		t.Errorf("bound sums lower %v upper %v s, want the row's band [%v, %v] ms", lower.GetSampleSum(), upper.GetSampleSum(), lo, hi)
	}
	if !(lower.GetSampleSum() <= est.GetSampleSum() && est.GetSampleSum() <= upper.GetSampleSum()) {
		t.Errorf("estimate %v s outside its band [%v, %v]", est.GetSampleSum(), lower.GetSampleSum(), upper.GetSampleSum())
	}
	if v := testutil.ToFloat64(m.E2EUnbounded.WithLabelValues("g", "orders")); v != 0 {
		t.Errorf("unbounded %v, want 0: both ends' clocks are synced", v)
	}
	if n := p.live.sweep(m, truth.Add(10*time.Minute), time.Minute); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.E2EBound, m.E2EUnbounded)
	if n, err := testutil.GatherAndCount(reg, "tidemark_e2e_latency_bound_seconds", "tidemark_e2e_latency_unbounded_total"); err != nil || n != 0 {
		t.Fatalf("%d bound series after the sweep (%v), want 0", n, err)
	}
}
