package latency

import (
	"fmt"
	"time"
)

// Config configures an [Engine]. Zero fields take the defaults of SetDefaults.
type Config struct {
	// ReferenceHost names the reference clock (the collector's host id); its stamps need no correction.
	ReferenceHost string
	// Bounds decide when a stamp is too far from the append time to be a stamp at all.
	Bounds Bounds
	// Window is the sliding window of brackets and sync exchanges; WindowBuckets slices it for the minimum-delay
	// filter (each bucket keeps its narrowest bracket) and the drift fit. Default 2 min in 24 buckets.
	Window        time.Duration
	WindowBuckets int
	// EnvelopeWindow and EnvelopeBuckets do the same for causal envelopes. Default 1 min in 12 buckets.
	EnvelopeWindow  time.Duration
	EnvelopeBuckets int
	// MaxDriftPPM clamps fitted drift (default 100 ppm: quartz oscillators are specified within ±20–100 ppm); it is also the
	// drift assumed, for the uncertainty, before enough of the window exists to fit one.
	MaxDriftPPM float64
	// StepTolerance is how far outside the predicted interval a bracket must fall to count as inconsistent
	// (default 5 ms); StepConfirm consistent-with-each-other inconsistent brackets confirm a step (default 3).
	StepTolerance time.Duration
	StepConfirm   int
	// SkewTolerance is the slack of the ordering check: a stage is skew-suspected when its corrected value is
	// negative by more than its uncertainty plus SkewTolerance (default 2 ms, the accuracy the estimator targets).
	SkewTolerance time.Duration
	// UncertaintyFloor and UncertaintyRatio: a stage is also skew-suspected when its uncertainty (the sum of its two
	// hosts' offset uncertainties) exceeds max(UncertaintyFloor, UncertaintyRatio × stage); defaults 5 ms and 0.02,
	// the accuracy target max(2 ms, 2 %) with room for the bracket floor. This contains the rule "uncertainty larger
	// than the stage" for every stage longer than the floor. The floor exists because a bracket is never narrower
	// than the two minimum one-way delays (about 1 ms each way on a LAN), so every converged stage carries ±2–3 ms;
	// flagging every stage shorter than that would drop the fastest samples and bias the percentiles upward.
	// Stages within the floor keep their uncertainty in Result.Uncertainty.
	UncertaintyFloor time.Duration
	UncertaintyRatio float64
	// RelativeAccuracy of every quantile sketch (default 0.01).
	RelativeAccuracy float64
	// MaxPaths bounds the per-(group, topic, partition) state the engine keeps (default 20000): creating a path past
	// it first evicts the least recently used eighth (see Engine.Path). Receipts naming ever new groups or topics
	// cannot grow the engine without bound. A path is about 600 bytes without sketches; its eight sketches add 1 to
	// 4 KB each as they fill (so up to ~30 KB a path: 20000 paths with full sketches are ~600 MB).
	MaxPaths int
	// MaxHosts bounds the clocks the engine keeps an offset estimate for, besides the reference (default 10000, at
	// most MaxHostsLimit): creating a host past it first evicts the least recently used eighth (see Engine.Host).
	// Receipts naming ever new hosts (pod churn, a hostile writer) cannot grow the engine without bound; a host
	// costs about 5 KB (its two windows). Hosts idle for EvictIdle's idle time are forgotten as well.
	MaxHosts int
	// NoSketches: paths keep no quantile sketches, only their replay state and counters; the sketches of
	// snapshots are empty. For callers that keep their distributions elsewhere (the collector: every row in
	// ClickHouse, live Prometheus histograms), where the sketches would be the bulk of the engine's memory and
	// never read. Results (stages, flags, classes, Live) are the same either way.
	NoSketches bool
	// FixUnits converts a stamp whose unit is clearly wrong (µs or ns declared as ms, or ns declared as µs: three or
	// six orders of magnitude too large, and once rescaled within Bounds of the record's anchor) instead of rejecting
	// it. The stamp is flagged FlagUnitCorrected and counted in Counters.UnitCorrected by reason. Off by default:
	// such a client is broken and should be fixed, and the rescaled value's precision is its own guess.
	FixUnits bool
}

// SetDefaults fills zero fields with the defaults documented on each field.
func (c *Config) SetDefaults() {
	if c.ReferenceHost == "" {
		c.ReferenceHost = "collector"
	}
	if c.Bounds.MaxAge == 0 {
		c.Bounds.MaxAge = 400 * 24 * time.Hour
	}
	if c.Bounds.MaxSkew == 0 {
		c.Bounds.MaxSkew = time.Hour
	}
	if c.Window == 0 {
		c.Window = 2 * time.Minute
	}
	if c.WindowBuckets == 0 {
		c.WindowBuckets = 24
	}
	if c.EnvelopeWindow == 0 {
		c.EnvelopeWindow = time.Minute
	}
	if c.EnvelopeBuckets == 0 {
		c.EnvelopeBuckets = 12
	}
	if c.MaxDriftPPM == 0 {
		c.MaxDriftPPM = 100
	}
	if c.StepTolerance == 0 {
		c.StepTolerance = 5 * time.Millisecond
	}
	if c.StepConfirm == 0 {
		c.StepConfirm = 3
	}
	if c.SkewTolerance == 0 {
		c.SkewTolerance = 2 * time.Millisecond
	}
	if c.UncertaintyFloor == 0 {
		c.UncertaintyFloor = 5 * time.Millisecond
	}
	if c.UncertaintyRatio == 0 {
		c.UncertaintyRatio = 0.02
	}
	if c.RelativeAccuracy == 0 {
		c.RelativeAccuracy = 0.01
	}
	if c.MaxPaths == 0 {
		c.MaxPaths = 20000
	}
	if c.MaxHosts == 0 {
		c.MaxHosts = 10000
	}
}

// Validate reports the first invalid field, wrapping ErrConfig.
func (c *Config) Validate() error {
	switch {
	case c.Bounds.MaxAge <= 0 || c.Bounds.MaxSkew <= 0:
		return fmt.Errorf("%w: bounds must be positive, got max age %v, max skew %v", ErrConfig, c.Bounds.MaxAge, c.Bounds.MaxSkew)
	case c.Window < time.Second || c.WindowBuckets < 2:
		return fmt.Errorf("%w: window must be >= 1s with >= 2 buckets, got %v in %d", ErrConfig, c.Window, c.WindowBuckets)
	case c.EnvelopeWindow < time.Second || c.EnvelopeBuckets < 2:
		return fmt.Errorf("%w: envelope window must be >= 1s with >= 2 buckets, got %v in %d", ErrConfig, c.EnvelopeWindow, c.EnvelopeBuckets)
	case c.MaxDriftPPM < 0 || c.MaxDriftPPM > 10000:
		return fmt.Errorf("%w: max drift must be in [0, 10000] ppm, got %v", ErrConfig, c.MaxDriftPPM)
	case c.StepTolerance <= 0 || c.StepConfirm < 1:
		return fmt.Errorf("%w: step tolerance must be > 0 and step confirm >= 1, got %v, %d", ErrConfig, c.StepTolerance, c.StepConfirm)
	case c.SkewTolerance < 0 || c.UncertaintyFloor < 0:
		return fmt.Errorf("%w: skew tolerance and uncertainty floor must be >= 0, got %v, %v", ErrConfig, c.SkewTolerance, c.UncertaintyFloor)
	case c.UncertaintyRatio < 0 || c.UncertaintyRatio > 1:
		return fmt.Errorf("%w: uncertainty ratio must be in [0, 1], got %v", ErrConfig, c.UncertaintyRatio)
	case !(c.RelativeAccuracy > 0 && c.RelativeAccuracy < 1):
		return fmt.Errorf("%w: relative accuracy must be in (0, 1), got %v", ErrConfig, c.RelativeAccuracy)
	case c.MaxPaths < 1:
		return fmt.Errorf("%w: max paths must be >= 1, got %d", ErrConfig, c.MaxPaths)
	case c.MaxHosts < 1 || c.MaxHosts > MaxHostsLimit:
		return fmt.Errorf("%w: max hosts must be in [1, %d], got %d", ErrConfig, MaxHostsLimit, c.MaxHosts)
	}
	return nil
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (c *Config) twoSidedWindow() windowConfig {
	return windowConfig{
		bucketMs: durMs(c.Window) / float64(c.WindowBuckets), nBuckets: c.WindowBuckets,
		maxDrift: c.MaxDriftPPM * 1e-6, extrapRate: c.MaxDriftPPM * 1e-6,
		stepTolMs: durMs(c.StepTolerance), stepConfirm: c.StepConfirm,
		refitEveryMs: durMs(c.Window) / float64(c.WindowBuckets) / 20,
	}
}

func (c *Config) envelopeWindow() windowConfig {
	return windowConfig{
		bucketMs: durMs(c.EnvelopeWindow) / float64(c.EnvelopeBuckets), nBuckets: c.EnvelopeBuckets,
		maxDrift: c.MaxDriftPPM * 1e-6, extrapRate: c.MaxDriftPPM * 1e-6,
		stepTolMs: durMs(c.StepTolerance), stepConfirm: c.StepConfirm,
	}
}
