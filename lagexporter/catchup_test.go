package lagexporter

import (
	"math"
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

// TestEstimateCatchUp pins the estimator of item 12 (catchup.go): the drain rate is the negated least-squares slope
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

// TestComputeRetentionMargin pins item 11's margins: retention.ms − time lag, and retention.bytes − the unconsumed
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
