package latency

import (
	"math"
	"testing"
	"time"
)

func TestSLOMath(t *testing.T) {
	o := Objective{Target: 0.999, Threshold: 500 * time.Millisecond, Period: 30 * 24 * time.Hour}
	tests := []struct {
		name             string
		good, total      float64
		compliance, burn float64
		remaining        float64
	}{
		{name: "exactly on target", good: 999_000, total: 1_000_000, compliance: 0.999, burn: 1, remaining: 0},
		{name: "perfect", good: 1000, total: 1000, compliance: 1, burn: 0, remaining: 1},
		// Half the allowed bad events: half the budget left.
		{name: "half spent", good: 999_500, total: 1_000_000, compliance: 0.9995, burn: 0.5, remaining: 0.5},
		// 1 % bad against a 0.1 % allowance: ten times the budget, 9 budgets overspent.
		{name: "overspent", good: 990, total: 1000, compliance: 0.99, burn: 10, remaining: -9},
		// No events: nothing was bad.
		{name: "no events", good: 0, total: 0, compliance: 1, burn: 0, remaining: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
			if c := Compliance(tc.good, tc.total); !near(c, tc.compliance) {
				t.Errorf("compliance %v, want %v", c, tc.compliance)
			}
			if b := o.BurnRate(tc.good, tc.total); !near(b, tc.burn) {
				t.Errorf("burn %v, want %v", b, tc.burn)
			}
			if r := o.ErrorBudgetRemaining(tc.good, tc.total); !near(r, tc.remaining) {
				t.Errorf("remaining %v, want %v", r, tc.remaining)
			}
		})
	}
}

func TestDefaultBurnWindowsFollowTheWorkbook(t *testing.T) {
	// factor = budget share × period / long window, for a 30-day period.
	period := 30 * 24 * time.Hour
	share := []float64{0.02, 0.05, 0.10, 0.10}
	for i, w := range DefaultBurnWindows() {
		want := share[i] * float64(period) / float64(w.Long)
		if math.Abs(w.Factor-want) > 1e-9 || w.Short*12 != w.Long {
			t.Errorf("window %v/%v factor %v, want %v with short = long/12", w.Long, w.Short, w.Factor, want)
		}
	}
}

func TestMultiwindowBurn(t *testing.T) {
	o := Objective{Target: 0.999, Threshold: 100 * time.Millisecond, Period: 30 * 24 * time.Hour}
	c, err := NewSLOCounter(o, 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	// 3 days of 1000 events a minute, all good, then the last 10 minutes 2 % bad (burn 20 in those minutes).
	for m := 3*24*60 - 1; m >= 0; m-- {
		at := now.Add(-time.Duration(m) * time.Minute)
		bad := 0
		if m < 10 {
			bad = 20
		}
		for i := 0; i < 1000; i++ {
			lat := 50.0
			if i < bad {
				lat = 250
			}
			c.Add(at, lat)
		}
	}
	alerts := c.Evaluate(now, DefaultBurnWindows())
	// 1h window: 200 bad of 60000 → burn 3.33; 5m: 100 of 5000 → burn 20. 14.4 needs both: not firing.
	if a := alerts[0]; a.Firing || math.Abs(a.LongRate-200.0/60000/0.001) > 1e-9 || math.Abs(a.ShortRate-20) > 1e-9 {
		t.Errorf("1h/5m: %+v, want long 3.33, short 20, not firing", a)
	}
	// 1d/2h: long 200/1440000/0.001 = 0.139 < 3: not firing; short 200/120000/0.001 = 1.67.
	if a := alerts[2]; a.Firing || math.Abs(a.ShortRate-200.0/120000/0.001) > 1e-9 {
		t.Errorf("1d/2h: %+v, want short 1.67, not firing", a)
	}
	// Keep burning at 2 % for another 50 minutes: the 1h window reaches 20 % of ... burn 20 over the hour.
	for m := 1; m <= 50; m++ {
		at := now.Add(time.Duration(m) * time.Minute)
		for i := 0; i < 1000; i++ {
			lat := 50.0
			if i < 20 {
				lat = 250
			}
			c.Add(at, lat)
		}
	}
	alerts = c.Evaluate(now.Add(50*time.Minute), DefaultBurnWindows())
	if a := alerts[0]; !a.Firing || math.Abs(a.LongRate-20) > 1e-9 {
		t.Errorf("after an hour at 2 %% bad: %+v, want the page to fire at burn 20", a)
	}
}

func TestSketchCountAtMost(t *testing.T) {
	s, _ := NewSketch(0.01)
	for i := 1; i <= 1000; i++ {
		s.Add(float64(i))
	}
	// 500 values are <= 500; bins are 1 % wide, so values within 1 % of 500 may land either side.
	if n := s.CountAtMost(500); n < 495 || n > 505 {
		t.Errorf("count at most 500 = %v, want 500 ± 5", n)
	}
	if q := s.Quantile(0.99); math.Abs(q-990)/990 > 0.01 {
		t.Errorf("p99 = %v, want 990 ± 1 %%", q)
	}
}

// TestComplianceBand classifies samples with intervals against a 500 ms threshold and checks the band with exact
// values: a sample whose interval straddles the threshold is good for the maximum only, an unbounded upper end is
// never good for the minimum, and the estimate lies between the two ends.
func TestComplianceBand(t *testing.T) {
	o := Objective{Target: 0.99, Threshold: 500 * time.Millisecond, Period: 24 * time.Hour}
	inf := math.Inf(1)
	samples := []struct {
		est, lo, hi         float64
		good, mayBe, surely bool
	}{
		{100, 90, 110, true, true, true},     // well inside
		{500, 500, 500, true, true, true},    // exactly on the threshold: good (<=)
		{490, 480, 520, true, true, false},   // straddles, estimate good
		{510, 495, 530, false, true, false},  // straddles, estimate bad
		{600, 550, 650, false, false, false}, // surely bad
		{300, 0, inf, true, true, false},     // an unknown offset: anything from 0 up
		{700, 0, inf, false, true, false},    // the same, estimate bad
		{400, math.NaN(), math.NaN(), true, true, false},
	}
	var good, goodMin, goodMax float64
	for i, s := range samples {
		g, m, su := o.GoodBounds(s.est, s.lo, s.hi)
		if g != s.good || m != s.mayBe || su != s.surely {
			t.Errorf("sample %d %v: GoodBounds = %v %v %v, want %v %v %v", i, s, g, m, su, s.good, s.mayBe, s.surely)
		}
		for _, c := range []struct {
			b bool
			n *float64
		}{{g, &good}, {m, &goodMax}, {su, &goodMin}} {
			if c.b {
				*c.n++
			}
		}
	}
	b := NewComplianceBand(good, goodMin, goodMax, float64(len(samples)))
	if want := (ComplianceBand{Estimate: 5.0 / 8, Min: 2.0 / 8, Max: 7.0 / 8}); b != want {
		t.Fatalf("band %+v, want %+v", b, want)
	}
	// Budget: 1 − (1 − c)/0.01. Estimate 0.625 → −36.5; min 0.25 → −74; max 0.875 → −11.5.
	est, lo, hi := o.BudgetBand(b)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(est, -36.5) || !near(lo, -74) || !near(hi, -11.5) {
		t.Errorf("budget %v [%v, %v]", est, lo, hi)
	}
	if lo > est || est > hi {
		t.Errorf("budget band not ordered: %v [%v, %v]", est, lo, hi)
	}
	if e := NewComplianceBand(0, 0, 0, 0); e != (ComplianceBand{1, 1, 1}) {
		t.Errorf("no samples: %+v, want all 1", e)
	}
}
