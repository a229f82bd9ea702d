package latency

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// bracketAt builds a probe round trip at reference time t: out and back one-way delays (ms), host offset theta (ms).
// The broker stamps the arrival on its own clock, truncated to the millisecond as Kafka does.
func bracketAt(h HostID, t time.Time, out, back, theta float64) Bracket {
	arrive := timeToMs(t) + out
	return Bracket{Host: h, Send: t, RemoteMs: int64(math.Floor(arrive + theta)), Ack: t.Add(msDur(out + back))}
}

func TestBracketIntersection(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	tests := []struct {
		name     string
		brackets [][2]float64 // (out, back) delays in ms, 1 s apart
		theta    float64
		want     float64 // estimated offset, ms
		unc      float64 // uncertainty, ms
	}{
		// One bracket: [remote − ack, remote + 1 − send] = [θ−back, θ+out+1]; midpoint θ + (out+1−back)/2.
		{name: "single symmetric", brackets: [][2]float64{{5, 5}}, theta: 3000, want: 3000.5, unc: 5.5},
		// Two asymmetric brackets intersect to [θ−1, θ+1+1]: the NTP minimum-delay idea done as an intersection.
		// Too little time for a drift fit, so the default 100 ppm drift prior adds 0.1 ms: the older bracket, carried
		// over the 1 s span, may be off by the drift times its age.
		{name: "asymmetric pair", brackets: [][2]float64{{1, 9}, {9, 1}}, theta: -7000, want: -6999.5, unc: 1.6},
		// A slow round trip (a GC pause) adds nothing: it tightens no bound, so the fit is the first bracket alone.
		{name: "slow bracket ignored", brackets: [][2]float64{{1, 1}, {200, 300}}, theta: 42, want: 42.5, unc: 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, Config{})
			h := e.Host("B1")
			for i, d := range tc.brackets {
				if err := e.ObserveBracket(bracketAt(h, base.Add(time.Duration(i)*time.Second), d[0], d[1], tc.theta)); err != nil {
					t.Fatal(err)
				}
			}
			o, err := e.Offset(h, base)
			if err != nil {
				t.Fatal(err)
			}
			if o.Kind != KindBracketed || math.Abs(durMs(o.Offset)-tc.want) > 1e-3 || math.Abs(durMs(o.Uncertainty)-tc.unc) > 1e-3 {
				t.Errorf("offset %v ± %v (%v), want %v ± %v ms bracketed", o.Offset, o.Uncertainty, o.Kind, tc.want, tc.unc)
			}
		})
	}
}

func TestSyncExchangeBound(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	h := e.Host("C1")
	// Host 300 ms behind; 4 ms out, 2 ms back, 1 ms at the collector.
	t1 := base.Add(-300 * time.Millisecond)
	x := SyncExchange{Host: h, T1: t1, T2: base.Add(4 * time.Millisecond), T3: base.Add(5 * time.Millisecond),
		T4: base.Add(7*time.Millisecond - 300*time.Millisecond)}
	if err := e.ObserveSync(x); err != nil {
		t.Fatal(err)
	}
	o, _ := e.Offset(h, base.Add(4500*time.Microsecond)) // the exchange's reference midpoint: no extrapolation
	// [T1−T2, T4−T3] = [−304, −298]: midpoint −301 (the asymmetry of 2 ms shows as 1 ms error), ±3.
	if o.Kind != KindSynced || durMs(o.Offset) != -301 || durMs(o.Uncertainty) != 3 {
		t.Errorf("offset %v ± %v (%v), want -301 ± 3 ms synced", o.Offset, o.Uncertainty, o.Kind)
	}
	bad := x
	bad.T4 = bad.T1.Add(-time.Millisecond)
	if err := e.ObserveSync(bad); !errors.Is(err, ErrBadRoundTrip) {
		t.Errorf("reply before request: err %v, want ErrBadRoundTrip", err)
	}
	if err := e.ObserveBracket(Bracket{Host: 99, Send: base, Ack: base}); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("unknown host: err %v, want ErrUnknownHost", err)
	}
}

func TestStepRestartsWindow(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	b := e.Host("B1")
	p := e.Path("g", "t", 0)
	// 30 s at +100 ms, one bracket per 100 ms with 1 ms each way.
	i := 0
	for ; i < 300; i++ {
		_ = e.ObserveBracket(bracketAt(b, base.Add(time.Duration(i)*100*time.Millisecond), 1, 1, 100))
	}
	stepAt := base.Add(time.Duration(i) * 100 * time.Millisecond)
	// The leader fails over to a broker whose clock is 400 ms behind the old one: offset −300 ms.
	for j := 0; j < 2; j++ {
		_ = e.ObserveBracket(bracketAt(b, stepAt.Add(time.Duration(j)*100*time.Millisecond), 1, 1, -300))
	}
	if o, _ := e.Offset(b, stepAt); !o.Suspect || o.Steps != 0 {
		t.Fatalf("after 2 inconsistent brackets: %+v, want suspect and no step yet", o)
	}
	_ = e.ObserveBracket(bracketAt(b, stepAt.Add(200*time.Millisecond), 1, 1, -300))
	o, _ := e.Offset(b, stepAt.Add(300*time.Millisecond))
	if o.Steps != 1 || o.Suspect || math.Abs(durMs(o.Offset)-(-299.5)) > 1 {
		t.Fatalf("after the third: %+v, want one step and offset ≈ −299.5 ms", o)
	}
	// A record appended before the step is still corrected with the old offset, one after with the new.
	rec := func(trueAppend time.Time, theta float64) Record {
		var r Record
		r.Stamps[Produce] = TimeStamp(RefHost, trueAppend.Add(-5*time.Millisecond))
		r.Stamps[Append] = MillisStamp(b, trueAppend.Add(msDur(theta)).UnixMilli())
		r.Stamps[Processed] = TimeStamp(RefHost, trueAppend.Add(10*time.Millisecond))
		return r
	}
	before := p.Observe(rec(stepAt.Add(-2*time.Second), 100))
	after := p.Observe(rec(stepAt.Add(time.Second), -300))
	for _, r := range []Result{before, after} {
		v, _ := r.Stage(StageIngest)
		if math.Abs(v-5) > 1.5 || r.Flags&FlagSkewSuspected != 0 {
			t.Errorf("ingest %v ms flags %b, want 5 ± 1.5 ms unflagged", v, r.Flags)
		}
	}
}

// An envelope-only producer whose clock steps back by 500 ms: the old maximum would hold the envelope 500 ms too
// high for the whole window; two completed buckets peaking below the fit restart it instead.
func TestEnvelopeStepDown(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	b, p := e.Host("B1"), e.Host("P-uninstrumented")
	if err := e.ReportOffset(b, 0, 0, base); err != nil {
		t.Fatal(err)
	}
	path := e.Path("g", "t", 0)
	theta := 3000.0
	feed := func(from, to time.Duration) Result {
		var last Result
		for d := from; d < to; d += 10 * time.Millisecond {
			tr := base.Add(d)
			ingest := 1 + float64(d/time.Millisecond%7) // 1..7 ms: the minimum one-way delay is 1 ms
			var r Record
			r.Offset = int64(d / time.Millisecond)
			r.Stamps[Produce] = TimeStamp(p, tr.Add(msDur(theta)))
			r.Stamps[Append] = TimeStamp(b, tr.Add(msDur(ingest)))
			r.Stamps[Processed] = TimeStamp(RefHost, tr.Add(msDur(ingest+5)))
			last = path.Observe(r)
		}
		return last
	}
	feed(0, 40*time.Second)
	o, _ := e.Offset(p, base.Add(40*time.Second))
	// The envelope is the bound itself: true offset minus the minimum delay (1 ms).
	if o.Kind != KindEnvelope || o.Upper != Unbounded || o.Lower == -Unbounded || math.Abs(durMs(o.Offset)-(theta-1)) > 0.01 {
		t.Fatalf("before the step: %+v, want a lower-bound envelope at %v ms", o, theta-1)
	}
	theta -= 500
	feed(40*time.Second, 60*time.Second)
	o, _ = e.Offset(p, base.Add(60*time.Second))
	if o.Steps != 1 || math.Abs(durMs(o.Offset)-(theta-1)) > 0.01 {
		t.Fatalf("20 s after a −500 ms step: %+v, want one step and the envelope at %v ms", o, theta-1)
	}
	r := feed(60*time.Second, 61*time.Second)
	if v, _ := r.Stage(StageIngest); math.Abs(v-(1+float64(60990%7))+1) > 0.01 {
		t.Errorf("ingest after the step %v ms, want the true ingest minus the 1 ms minimum delay", v)
	}
}

// Receipts repeat their host's reported offset on every record: repeats skip the host lock, but one per 100 ms
// still reaches the window, and a tighter or different report always does.
func TestRepeatedReportsFastPath(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	c := e.Host("C1")
	for i := 0; i < 1000; i++ { // one report per ms for a second
		_ = e.ReportOffset(c, -300*time.Millisecond, 2*time.Millisecond, base.Add(time.Duration(i)*time.Millisecond))
	}
	o, _ := e.Offset(c, base.Add(time.Second))
	if o.Samples < 10 || o.Samples > 11 || durMs(o.Offset) != -300 {
		t.Fatalf("after 1000 repeats: %+v, want about 10 samples kept and offset -300 ms", o)
	}
	_ = e.ReportOffset(c, -300*time.Millisecond, time.Millisecond, base.Add(1001*time.Millisecond)) // tighter
	if o2, _ := e.Offset(c, base.Add(time.Second)); o2.Samples != o.Samples+1 || durMs(o2.Uncertainty) >= durMs(o.Uncertainty) {
		t.Errorf("tighter report: %+v, want it kept and the uncertainty reduced from %v", o2, o.Uncertainty)
	}
}

// A broker drifting 50 ppm (3 ms a minute) probed ten times a second with 1–20 ms one-way delays: the fitted drift
// is within 10 ppm and the offset within 0.5 ms once the window has filled, and the uncertainty covers the error.
func TestDriftIsFollowed(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	h := e.Host("B")
	r := rand.New(rand.NewPCG(1, 2))
	draw := func() float64 {
		for {
			if v := 1 + r.ExpFloat64()*4; v <= 20 {
				return v
			}
		}
	}
	theta0, drift := 3000.0, 50e-6
	for i := 0; i < 1800; i++ { // 3 minutes
		ts := base.Add(time.Duration(i) * 100 * time.Millisecond)
		tm := timeToMs(ts)
		out, back := draw(), draw()
		th := theta0 + drift*(tm+out-timeToMs(base))
		_ = e.ObserveBracket(Bracket{Host: h, Send: ts, RemoteMs: int64(math.Floor(tm + out + th)), Ack: ts.Add(msDur(out + back))})
		if i < 1200 || i%100 != 0 {
			continue
		}
		o, _ := e.Offset(h, ts)
		truth := theta0 + drift*(tm-timeToMs(base))
		if d := math.Abs(durMs(o.Offset) - truth); d > 0.5 || d > durMs(o.Uncertainty) || math.Abs(o.DriftPPM-50) > 10 {
			t.Errorf("t=%ds: offset %v (true %.3f ms) ± %v, drift %.1f ppm; want within 0.5 ms, covered, drift 50 ± 10",
				i/10, o.Offset, truth, o.Uncertainty, o.DriftPPM)
		}
	}
}

// TestEnvelopeReanchored: a causal bound is computed from its anchor's estimate at the time, and a broker's first
// bracket may place it several ms off within its uncertainty. Here the broker's first bracket (19 ms out, 1 ms back)
// puts its estimate 9.5 ms too high, so the producer's first lower bound is 9.5 ms too high as well and the largest
// of its bucket. Once narrow brackets have placed the broker to within 1 ms, that bound must be re-evaluated with the
// broker's new estimate: the envelope then lies at the producer's offset less the 2 ms produce → append delay
// (within the 1 ms of both stamps' truncation and the broker's remaining error), not 9.5 ms above it, and its stated
// lower bound still holds the truth.
func TestEnvelopeReanchored(t *testing.T) {
	e := mustEngine(t, Config{})
	broker, producer := e.Host("broker"), e.Host("producer")
	const thetaB, thetaP, ingest = 3000.0, -2000.0, 2.0
	base := at("2026-11-29T12:00:00Z")
	record := func(tp time.Time) {
		p := timeToMs(tp)
		e.Path("g", "t", 0).Observe(Record{Offset: p2o(p), Stamps: [NumMoments]Stamp{
			Produce: MillisStamp(producer, int64(math.Floor(p+thetaP))),
			Append:  MillisStamp(broker, int64(math.Floor(p+ingest+thetaB)))}})
	}
	if err := e.ObserveBracket(bracketAt(broker, base, 19, 1, thetaB)); err != nil {
		t.Fatal(err)
	}
	record(base.Add(50 * time.Millisecond))
	for k := 1; k <= 20; k++ {
		at := base.Add(time.Duration(k) * 100 * time.Millisecond)
		if err := e.ObserveBracket(bracketAt(broker, at, 1, 1, thetaB)); err != nil {
			t.Fatal(err)
		}
		record(at.Add(30 * time.Millisecond))
	}
	now := base.Add(2100 * time.Millisecond)
	o, err := e.Offset(producer, now)
	if err != nil {
		t.Fatal(err)
	}
	got, want := float64(o.Offset)/1e6, thetaP-ingest
	if o.Kind != KindEnvelope || math.Abs(got-want) > 1.5 {
		t.Errorf("envelope %v (%v) at %.3f ms, want within 1.5 ms of %v", o.Kind, o, got, want)
	}
	if lo := float64(o.Lower) / 1e6; lo > thetaP {
		t.Errorf("stated lower bound %.3f ms above the true offset %v", lo, thetaP)
	}
}

// p2o numbers a record by its produce time, so that every record of a test is a new offset.
func p2o(ms float64) int64 { return int64(ms) }

// TestFitSlopeMatchesTwoPass holds the one-pass drift fit (scan's sums, the residuals from the centred second
// moments) to the textbook two-pass weighted least squares: means first, then the slope and the residual sum of
// squares about the fitted line. Windows are drawn with offsets up to ±10 s, drift up to ±50 ppm and brackets
// 0.5–20 ms wide, the conditions where the sums of squares could lose their precision.
func TestFitSlopeMatchesTwoPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	c := Config{}
	c.SetDefaults()
	compared := 0
	for trial := 0; trial < 500; trial++ {
		w := newWindow(c.twoSidedWindow())
		offset, drift := (rng.Float64()*2-1)*10_000, (rng.Float64()*2-1)*50e-6
		start := rng.Float64() * 1e12
		end := start + float64(10+rng.IntN(140))*1000
		for at := start; at < end; at += 50 + rng.Float64()*500 {
			th := offset + drift*(at-start)
			w.add(bound{at: at, lo: th - 0.25 - rng.Float64()*10, hi: th + 0.25 + rng.Float64()*10})
		}
		oldest := w.latest - int64(len(w.buckets)) + 1
		tr := float64(w.latest) * w.cfg.bucketMs
		sp, sums := w.scan(oldest, tr)
		slope, slopeErr, _ := w.fitSlope(sp, sums)

		// The reference: the same points, two passes.
		type pt struct{ t, y, w float64 }
		var pts []pt
		var sw, st, sy float64
		for i := range w.buckets {
			k := &w.buckets[i]
			if k.n == 0 || k.idx < oldest || math.IsNaN(k.bestAt) {
				continue
			}
			tt, y, wt, _ := slopePoint(k, true)
			pts = append(pts, pt{tt - tr, y, wt})
			sw, st, sy = sw+wt, st+wt*(tt-tr), sy+wt*y
		}
		mt, my := st/sw, sy/sw
		var stt, sty float64
		for _, p := range pts {
			stt += p.w * (p.t - mt) * (p.t - mt)
			sty += p.w * (p.t - mt) * (p.y - my)
		}
		if sp.n < 3 || sp.to-sp.from < 2*w.cfg.bucketMs || stt <= 0 {
			continue
		}
		wantSlope := sty / stt
		var rss float64
		for _, p := range pts {
			r := p.y - my - wantSlope*(p.t-mt)
			rss += p.w * r * r
		}
		wantErr := tQuantile(sp.n-2) * math.Sqrt(rss/float64(max(sp.n-2, 1))/stt)
		if sp.to-sp.from < w.cfg.bucketMs*float64(len(w.buckets))/4 {
			continue // unsettled: slopeErr is |slope| + maxDrift, not the fit's
		}
		wantSlope = max(-w.cfg.maxDrift, min(w.cfg.maxDrift, wantSlope))
		if d := math.Abs(slope - wantSlope); d > 1e-12 {
			t.Fatalf("trial %d: slope %g, two-pass %g (off by %g)", trial, slope, wantSlope, d)
		}
		if d := math.Abs(slopeErr - wantErr); d > 1e-9*wantErr+1e-15 {
			t.Fatalf("trial %d: slope error %g, two-pass %g (off by %g)", trial, slopeErr, wantErr, d)
		}
		compared++
	}
	t.Logf("%d of 500 windows compared", compared)
	if compared < 300 {
		t.Fatalf("only %d of 500 windows were settled fits; the test compares too little", compared)
	}
}
