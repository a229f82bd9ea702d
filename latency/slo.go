package latency

import (
	"fmt"
	"math"
	"time"
)

// Objective is a latency SLO: at least Target of the events in every Period have a latency of at most Threshold
// (for example 99.9 % of messages delivered end-to-end within 500 ms over 30 days). The arithmetic follows Google's
// SRE workbook, chapter 5 "Alerting on SLOs" (Beyer et al., O'Reilly 2018).
type Objective struct {
	Target    float64       // in (0, 1), e.g. 0.999
	Threshold time.Duration // an event is good when its latency is <= Threshold
	Period    time.Duration // the SLO period the error budget is defined over, e.g. 30 days
}

// Validate reports an Objective that cannot be evaluated.
func (o Objective) Validate() error {
	switch {
	case !(o.Target > 0 && o.Target < 1):
		return fmt.Errorf("%w: SLO target must be in (0, 1), got %v", ErrConfig, o.Target)
	case o.Threshold <= 0:
		return fmt.Errorf("%w: SLO threshold must be positive, got %v", ErrConfig, o.Threshold)
	case o.Period <= 0:
		return fmt.Errorf("%w: SLO period must be positive, got %v", ErrConfig, o.Period)
	}
	return nil
}

// Good reports whether a latency in ms meets the threshold.
func (o Objective) Good(latencyMs float64) bool { return latencyMs <= durMs(o.Threshold) }

// GoodBounds classifies one sample whose true latency lies in [loMs, hiMs] (hiMs may be +Inf: an end's clock offset
// unknown) and whose estimate is estMs. good is the estimate's verdict. mayBeGood (the lower end meets the threshold)
// says the true value may meet it: the sample counts as good for the compliance's maximum. surelyGood (the upper end
// meets it) says the true value does: only such a sample counts as good for the minimum. With lo ≤ est ≤ hi,
// surelyGood ⇒ good ⇒ mayBeGood. A NaN end is treated as unbounded on its side.
func (o Objective) GoodBounds(estMs, loMs, hiMs float64) (good, mayBeGood, surelyGood bool) {
	t := durMs(o.Threshold)
	return estMs <= t, !(loMs > t), hiMs <= t
}

// ComplianceBand is an SLI with its error bar: Estimate is good/total over the samples' estimates, and the true
// compliance, over the same samples, lies in [Min, Max]. Each sample's true latency is inside its interval, so at
// least the samples whose upper end meets the threshold are good (Min) and at most those whose lower end does (Max).
type ComplianceBand struct {
	Estimate, Min, Max float64
}

// NewComplianceBand returns the band of good (estimates meeting the threshold), goodMin (upper ends meeting it) and
// goodMax (lower ends meeting it) of total samples, each ratio as [Compliance] (1 with no samples).
func NewComplianceBand(good, goodMin, goodMax, total float64) ComplianceBand {
	return ComplianceBand{Estimate: Compliance(good, total), Min: Compliance(goodMin, total), Max: Compliance(goodMax, total)}
}

// BudgetBand returns the error budget remaining at the band's estimate and at its two ends
// ([Objective.ErrorBudgetRemaining]): the minimum compliance leaves the least budget. Burn-rate alerts use the
// estimate only.
func (o Objective) BudgetBand(b ComplianceBand) (estimate, lo, hi float64) {
	left := func(c float64) float64 { return 1 - (1-c)/(1-o.Target) }
	return left(b.Estimate), left(b.Min), left(b.Max)
}

// Compliance returns good/total, the SLI; with no events it is 1 (nothing was bad).
func Compliance(good, total float64) float64 {
	if total <= 0 {
		return 1
	}
	return good / total
}

// BurnRate returns how fast the error budget is being spent: the observed bad fraction over the allowed one,
// (1 − compliance) / (1 − Target). 1 spends exactly the budget over the period; 14.4 spends 2 % of a 30-day budget
// in one hour.
func (o Objective) BurnRate(good, total float64) float64 {
	return (1 - Compliance(good, total)) / (1 - o.Target)
}

// ErrorBudgetRemaining returns the fraction of the error budget left after good of total events in the period:
// 1 − (1 − compliance)/(1 − Target). It is negative once the budget is overspent.
func (o Objective) ErrorBudgetRemaining(good, total float64) float64 {
	return 1 - o.BurnRate(good, total)
}

// BurnWindow is one multiwindow burn-rate alert: it fires when the burn rate over both Long and Short is at least
// Factor. The short window makes the alert reset soon after the burn stops.
type BurnWindow struct {
	Long, Short time.Duration
	Factor      float64
	Severity    string // "page" or "ticket"
}

// DefaultBurnWindows returns the multiwindow, multi-burn-rate alerts of the SRE workbook (chapter 5, section 6,
// "Multiwindow, Multi-Burn-Rate Alerts") for a 30-day period: factor = budget share × period / long window, so
// 2 % in 1 h → 14.4 and 5 % in 6 h → 6 page; 10 % in 1 d → 3 and 10 % in 3 d → 1 open a ticket. Short windows are
// 1/12 of the long ones, as the workbook recommends.
func DefaultBurnWindows() []BurnWindow {
	return []BurnWindow{
		{Long: time.Hour, Short: 5 * time.Minute, Factor: 14.4, Severity: "page"},
		{Long: 6 * time.Hour, Short: 30 * time.Minute, Factor: 6, Severity: "page"},
		{Long: 24 * time.Hour, Short: 2 * time.Hour, Factor: 3, Severity: "ticket"},
		{Long: 72 * time.Hour, Short: 6 * time.Hour, Factor: 1, Severity: "ticket"},
	}
}

// BurnAlert is one window's evaluation.
type BurnAlert struct {
	Window              BurnWindow
	LongRate, ShortRate float64
	Firing              bool
}

// EvaluateBurn evaluates each window; counts returns the good and total events of the trailing window of the given
// length.
func (o Objective) EvaluateBurn(windows []BurnWindow, counts func(window time.Duration) (good, total float64)) []BurnAlert {
	out := make([]BurnAlert, 0, len(windows))
	for _, w := range windows {
		lg, lt := counts(w.Long)
		sg, st := counts(w.Short)
		a := BurnAlert{Window: w, LongRate: o.BurnRate(lg, lt), ShortRate: o.BurnRate(sg, st)}
		a.Firing = a.LongRate >= w.Factor && a.ShortRate >= w.Factor
		out = append(out, a)
	}
	return out
}

// SLOCounter counts good and total events per minute over a trailing horizon, to answer EvaluateBurn's window
// queries. Times are passed in (no clock is read). Events older than the horizon are dropped. Not safe for
// concurrent use.
type SLOCounter struct {
	obj     Objective
	minutes []sloBucket
}

type sloBucket struct {
	minute      int64 // Unix minute; the bucket is empty unless it matches
	good, total float64
}

// NewSLOCounter returns a counter for obj keeping horizon (rounded up to whole minutes, at least the longest
// default window, 3 days, when horizon is 0).
func NewSLOCounter(obj Objective, horizon time.Duration) (*SLOCounter, error) {
	if err := obj.Validate(); err != nil {
		return nil, fmt.Errorf("create SLO counter: %w", err)
	}
	if horizon <= 0 {
		horizon = 72 * time.Hour
	}
	return &SLOCounter{obj: obj, minutes: make([]sloBucket, int(math.Ceil(horizon.Minutes()))+1)}, nil
}

// Add counts one event with the given latency (ms) at time at.
func (c *SLOCounter) Add(at time.Time, latencyMs float64) {
	m := at.Unix() / 60
	b := &c.minutes[mod(m, len(c.minutes))]
	if b.minute != m {
		*b = sloBucket{minute: m}
	}
	b.total++
	if c.obj.Good(latencyMs) {
		b.good++
	}
}

// Counts returns good and total over the window ending at now (whole minutes, the current one included).
func (c *SLOCounter) Counts(now time.Time, window time.Duration) (good, total float64) {
	last := now.Unix() / 60
	n := int64(math.Ceil(window.Minutes()))
	n = min(n, int64(len(c.minutes)))
	for m := last - n + 1; m <= last; m++ {
		b := &c.minutes[mod(m, len(c.minutes))]
		if b.minute == m {
			good += b.good
			total += b.total
		}
	}
	return good, total
}

// Evaluate runs EvaluateBurn over the counter at now.
func (c *SLOCounter) Evaluate(now time.Time, windows []BurnWindow) []BurnAlert {
	return c.obj.EvaluateBurn(windows, func(w time.Duration) (float64, float64) { return c.Counts(now, w) })
}

// CountAtMost returns how many of the sketch's values are at most ms, to the sketch's bin resolution (a value within
// the relative accuracy of ms may be counted on either side). With Count it gives a compliance ratio straight from
// a stored sketch.
func (s *Sketch) CountAtMost(ms float64) float64 {
	var n float64
	s.dd.ForEach(func(v, c float64) bool {
		if v <= ms {
			n += c
		}
		return false
	})
	return n
}
