package lagexporter

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// lagWindow builds a window of lag samples taken every step from t0.
func lagWindow(t0 time.Time, step time.Duration, lags ...int64) []Sample {
	w := make([]Sample, len(lags))
	for i, l := range lags {
		w[i] = Sample{Lag: l, HasCommit: true, At: t0.Add(time.Duration(i) * step)}
	}
	return w
}

// TestEstimateCatchUp pins the catch-up estimator (catchup.go): the drain rate is the negated least-squares slope
// of the lag over the window, ETA = lag / drain rate.
func TestEstimateCatchUp(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		w          []Sample
		state      CatchUpState
		eta        time.Duration
		rate, rerr float64
	}{
		{"empty window", nil, CatchUpUnknown, 0, 0, 0},
		{"one sample with lag", lagWindow(t0, 30*time.Second, 100), CatchUpUnknown, 0, 0, 0},
		{"caught up", lagWindow(t0, 30*time.Second, 100, 0), CatchUpCaughtUp, 0, 0, 0},
		// consumes 3 records/s more than produced: 900 → 0 in 300 s, exactly (a perfect line: no residual error)
		{"linear drain", lagWindow(t0, 30*time.Second, 1260, 1170, 1080, 990, 900), CatchUpDraining, 300 * time.Second, 3, 0},
		// constant lag (a group keeping pace with its producers): the lag never reaches 0 at these rates
		{"steady lag", lagWindow(t0, 30*time.Second, 10, 10, 10), CatchUpNotDraining, 0, 0, 0},
		// growing lag: falling behind
		{"growing lag", lagWindow(t0, 30*time.Second, 10, 40, 70), CatchUpNotDraining, 0, -1, 0},
		// a noisy drain over 0..120 s: dx −60..60 (Σdx² = 9000), Σdx·dy = −21600, slope −2.4/s; residuals 12, −6,
		// −24, 18, 0 (RSS 1080) → standard error sqrt(1080/3/9000) = 0.2 records/s; ETA 900 / 2.4 = 375 s
		{"noisy drain", lagWindow(t0, 30*time.Second, 1200, 1110, 1020, 990, 900), CatchUpDraining, 375 * time.Second, 2.4, 0.2},
		// two samples: the slope through them, no error estimate
		{"two samples", lagWindow(t0, 60*time.Second, 600, 480), CatchUpDraining, 240 * time.Second, 2, 0},
		// no time between the samples: no rate
		{"same instant", lagWindow(t0, 0, 600, 480), CatchUpUnknown, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := EstimateCatchUp(tc.w)
			if got.State != tc.state || got.ETA != tc.eta || math.Abs(float64(got.DrainRate)-tc.rate) > 1e-6 || math.Abs(float64(got.RateError)-tc.rerr) > 1e-6 {
				t.Fatalf("got %+v, want state %s eta %v rate %v ± %v", got, tc.state, tc.eta, tc.rate, tc.rerr)
			}
		})
	}
	if s := (CatchUp{State: CatchUpNotDraining}).Seconds(); !math.IsInf(s, 1) {
		t.Errorf("not draining: Seconds = %v, want +Inf", s)
	}
	if s := (CatchUp{}).Seconds(); !math.IsNaN(s) {
		t.Errorf("unknown: Seconds = %v, want NaN", s)
	}
}

// TestComputeRetentionMargin pins the retention margins: retention.ms − time lag, and retention.bytes − the unconsumed
// bytes of a partition of uniform record size.
func TestComputeRetentionMargin(t *testing.T) {
	del := &TopicRetention{CleanupPolicy: "delete", RetentionMs: 3_600_000, RetentionBytes: 1_000_000}
	tests := []struct {
		name string
		r    *TopicRetention
		// log start, HW, start, size, lag
		ls, hw, start, size, lag int64
		timeLag                  time.Duration
		timeKnown                bool
		want                     RetentionMargin
	}{
		// 59 minutes behind with a 1 h retention: 1 minute left. 400 of 1,000 records unconsumed in a 2,000,000-byte
		// log: 800,000 bytes unconsumed, 200,000 more may be appended.
		{"both limits", del, 1000, 2000, 1600, 2_000_000, 400, 59 * time.Minute, true,
			RetentionMargin{Time: time.Minute, TimeKnown: true, Bytes: 200_000, BytesKnown: true}},
		// past both limits: 0 left, never negative
		{"past both", del, 0, 1000, 0, 2_000_000, 1000, 2 * time.Hour, true,
			RetentionMargin{Time: 0, TimeKnown: true, Bytes: 0, BytesKnown: true}},
		// nothing unconsumed: no margin to speak of
		{"caught up", del, 0, 1000, 1000, 2_000_000, 0, 0, true, RetentionMargin{}},
		// compact only: retention never deletes
		{"compact", &TopicRetention{CleanupPolicy: "compact", RetentionMs: 3_600_000, RetentionBytes: 1_000_000}, 0, 1000, 0, 2_000_000, 1000,
			time.Hour, true, RetentionMargin{}},
		// compact,delete: both apply
		{"compact,delete", &TopicRetention{CleanupPolicy: "compact,delete", RetentionMs: 3_600_000, RetentionBytes: -1}, 0, 1000, 0, 0, 1000,
			30 * time.Minute, true, RetentionMargin{Time: 30 * time.Minute, TimeKnown: true}},
		// unlimited time, size unread: neither known
		{"unlimited", &TopicRetention{CleanupPolicy: "delete", RetentionMs: -1, RetentionBytes: 1_000_000}, 0, 1000, 0, 0, 1000,
			time.Hour, true, RetentionMargin{}},
		// time lag unknown: no time margin
		{"time lag unknown", del, 0, 1000, 500, 0, 500, 0, false, RetentionMargin{}},
		// settings unknown
		{"no settings", nil, 0, 1000, 500, 0, 500, time.Hour, true, RetentionMargin{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ComputeRetentionMargin(tc.r, tc.ls, tc.hw, tc.start, tc.size, tc.lag, tc.timeLag, tc.timeKnown)
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCatchUpErrorAsDocumented checks the error EstimateCatchUp's doc (and docs/lag.md) states, on the example it
// gives: a group consuming c = 1,000 records/s while 900/s are produced (drain rate 100/s), committing every I = 5 s
// at moments unrelated to the polls, sampled n = 10 times 30 s apart (W = 270 s). Each sample's committed offset lags
// the consumer by c·u records, u uniform in [0, I). Over 4,000 windows (fixed seed, so the run is deterministic):
// the estimate is unbiased, its spread is the stated standard error c·I/W·√((n−1)/(n(n+1))) = 5.30 records/s, and
// RateError, the fit's own estimate of it, agrees. An estimator through the first and last sample only would spread
// √2·c·I/(√12·W) = 7.56 records/s and fail the spread check.
func TestCatchUpErrorAsDocumented(t *testing.T) {
	const (
		c, p   = 1000.0, 900.0 // consumption and production, records/s
		I      = 5.0           // commit interval, s
		n      = 10            // samples in the window
		step   = 30.0          // poll interval, s
		W      = step * (n - 1)
		trials = 4000
	)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(11, 12))
	var sum, sumSq, sumErr float64
	w := make([]Sample, n)
	for range trials {
		for i := range w {
			at := float64(i) * step
			end := 100_000 + p*at
			committed := c * (at - rng.Float64()*I) // the last commit was u seconds ago
			w[i] = Sample{Lag: int64(math.Round(end - committed)), HasCommit: true, At: t0.Add(time.Duration(at) * time.Second)}
		}
		got := EstimateCatchUp(w)
		if got.State != CatchUpDraining {
			t.Fatalf("window %+v: %+v, want draining", w, got)
		}
		r := float64(got.DrainRate)
		sum, sumSq, sumErr = sum+r, sumSq+r*r, sumErr+float64(got.RateError)
	}
	mean := sum / trials
	sd := math.Sqrt(sumSq/trials - mean*mean)
	want := c * I / W * math.Sqrt(float64(n-1)/float64(n*(n+1)))
	if math.Abs(want-5.30) > 0.005 {
		t.Fatalf("stated standard error %.3f, want the 5.30 records/s docs/lag.md gives", want)
	}
	// the mean of 4,000 draws is within 4 standard errors of the truth
	if math.Abs(mean-(c-p)) > 4*sd/math.Sqrt(trials) {
		t.Errorf("mean drain rate %.3f, want %.1f (unbiased)", mean, c-p)
	}
	// the sample standard deviation of 4,000 draws is within ±5% of the true one (its own error is about 1.1%)
	if math.Abs(sd/want-1) > 0.05 {
		t.Errorf("drain rate spread %.3f records/s, want %.3f ± 5%%", sd, want)
	}
	// RateError's mean is slightly below the truth (the square root of an unbiased variance; ≈3% for 8 degrees
	// of freedom)
	if e := sumErr / trials; e/want < 0.9 || e/want > 1.02 {
		t.Errorf("mean RateError %.3f records/s, want within −10%%..+2%% of %.3f", e, want)
	}
}
