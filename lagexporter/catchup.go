package lagexporter

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// CatchUpState says what the catch-up estimate of a group-partition (or a group) is.
type CatchUpState uint8

// The catch-up states.
const (
	CatchUpUnknown     CatchUpState = iota // fewer than two samples, or no time between them
	CatchUpCaughtUp                        // the lag is 0 now
	CatchUpDraining                        // the lag falls: CatchUp.ETA is the estimate
	CatchUpNotDraining                     // the lag does not fall over the window: it never reaches 0 at these rates (+Inf)
)

// CatchUpStateNames names each state (the JSON form).
var CatchUpStateNames = []string{"unknown", "caught_up", "draining", "not_draining"}

func (s CatchUpState) String() string {
	if int(s) < len(CatchUpStateNames) {
		return CatchUpStateNames[s]
	}
	return fmt.Sprintf("CatchUpState(%d)", uint8(s))
}

// MarshalJSON writes the state name.
func (s CatchUpState) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a state name.
func (s *CatchUpState) UnmarshalJSON(b []byte) error {
	var n string
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	for i, name := range CatchUpStateNames {
		if name == n {
			*s = CatchUpState(i)
			return nil
		}
	}
	return fmt.Errorf("catch-up state %q is not one of %v", n, CatchUpStateNames)
}

// CatchUp is the estimated time until a group-partition's lag reaches 0 at the rates seen over its status window.
type CatchUp struct {
	State CatchUpState `json:"state"`
	// ETA is the estimate while State is CatchUpDraining (0 when caught up).
	ETA time.Duration `json:"eta,omitempty"`
	// DrainRate is the net rate at which the lag falls, in records per second: consumption − production, the
	// negated least-squares slope of the lag over the window (<= 0 when not draining). float32 keeps ~7 digits,
	// more than the estimate has, in half the memory (one per group-partition).
	DrainRate float32 `json:"drain_rate"`
	// RateError is the standard error of DrainRate (records/s) from the residuals of the fit; 0 with two samples.
	// ETA / (1 ± RateError/DrainRate) brackets the estimate at about one standard error.
	RateError float32 `json:"rate_error,omitempty"`
}

// Seconds returns the estimate in seconds: 0 caught up, the ETA while draining, +Inf when not draining, NaN unknown.
func (c CatchUp) Seconds() float64 {
	switch c.State {
	case CatchUpCaughtUp:
		return 0
	case CatchUpDraining:
		return c.ETA.Seconds()
	case CatchUpNotDraining:
		return math.Inf(1)
	}
	return math.NaN()
}

// EstimateCatchUp estimates when the lag of the window's partition reaches 0 (window oldest first, current last).
//
// Estimator: the lag L(t) = End(t) − committed(t) changes at d L/dt = production rate − consumption rate, so the
// drain rate r = consumption − production is the negated slope of the lag over time. r is the ordinary least-squares
// slope through every sample of the status window (Burrow's window, status.window cycles), which uses all of them and
// so damps the step noise of periodic commits better than the first and last sample alone. ETA = L(now) / r when
// r > 0; with r <= 0 the lag does not fall and the estimate is +Inf (CatchUpNotDraining).
//
// Error: the estimate assumes both rates stay what they were over the window; a rate change shows fully only one
// window later. Within that assumption, commits every I seconds make each lag sample err by up to the records consumed
// in I (uniformly: a standard deviation of c·I/√12, c the consumption rate), so with n evenly spaced samples over a
// window of length W the slope's standard error is c·I/W·√((n−1)/(n(n+1))), about c·I/(W·√n) (e.g. 1,000 records/s
// committed every 5 s, 10 samples over 270 s: ±5.3 records/s; TestCatchUpErrorAsDocumented measures it). RateError
// reports the fit's own standard error, and ETA's relative error is about RateError / DrainRate. A group that keeps
// pace with its producers has a steady small lag, r ≈ 0, and an estimate of +Inf: read it with the time lag.
func EstimateCatchUp(w []Sample) CatchUp {
	if len(w) == 0 {
		return CatchUp{}
	}
	cur := w[len(w)-1]
	if cur.Lag == 0 {
		return CatchUp{State: CatchUpCaughtUp}
	}
	if len(w) < 2 || !w[len(w)-1].At.After(w[0].At) {
		return CatchUp{}
	}
	t0 := w[0].At
	var st, sl float64
	for _, s := range w {
		st += s.At.Sub(t0).Seconds()
		sl += float64(s.Lag)
	}
	n := float64(len(w))
	mt, ml := st/n, sl/n
	var sxx, sxy float64
	for _, s := range w {
		dx := s.At.Sub(t0).Seconds() - mt
		sxx += dx * dx
		sxy += dx * (float64(s.Lag) - ml)
	}
	if sxx == 0 {
		return CatchUp{}
	}
	slope := sxy / sxx
	out := CatchUp{DrainRate: float32(-slope)}
	if len(w) > 2 {
		var rss float64
		for _, s := range w {
			r := float64(s.Lag) - (ml + slope*(s.At.Sub(t0).Seconds()-mt))
			rss += r * r
		}
		out.RateError = float32(math.Sqrt(rss / (n - 2) / sxx))
	}
	if -slope <= 0 {
		out.State = CatchUpNotDraining
		return out
	}
	out.State = CatchUpDraining
	eta := float64(cur.Lag) / -slope
	if eta > maxETA.Seconds() {
		out.ETA = maxETA
	} else {
		out.ETA = time.Duration(math.Round(eta * float64(time.Second)))
	}
	return out
}

// maxETA caps an estimate so it fits a time.Duration (a drain rate of a record per century is not draining).
const maxETA = 100 * 365 * 24 * time.Hour
