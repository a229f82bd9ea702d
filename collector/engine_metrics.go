package collector

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/latency"
)

// engineSnapshot is what the engine metrics show: the clock offsets and counters as of the last clock-offset write
// (every Config.ClockOffsetInterval), so a scrape costs no engine walk.
type engineSnapshot struct {
	offsets []latency.Offset
	totals  latency.Counters
}

// engineMetrics is a custom Collector mirroring the latency engine from the last engineSnapshot (the kminion /
// node_exporter pattern: numbers kept elsewhere, exported with MustNewConstMetric).
//
// A clock offset is an interval, never a ± that claims a precision the estimate does not have: a causal envelope
// bounds one side only, and its open side is exported as -Inf or +Inf (docs/metrics.md).
type engineMetrics struct {
	snap atomic.Pointer[engineSnapshot]

	offset, lower, upper     *prometheus.Desc
	invalid, unitFixed, flag *prometheus.Desc
}

func newEngineMetrics() *engineMetrics {
	hk := []string{"host", "kind"}
	return &engineMetrics{
		offset: prometheus.NewDesc("tidemark_clock_offset_seconds",
			"Point estimate of a host's clock offset (host clock - collector clock): the middle of a two-sided interval, or for a one-sided causal envelope its bound moved toward the open side by the probe path's minimum one-way delay when that is measured (else the bound). Read it with its bounds.", hk, nil),
		lower: prometheus.NewDesc("tidemark_clock_offset_lower_bound_seconds",
			"Lower bound of a host's clock offset; -Inf when the estimate bounds it from above only (a consumer's causal envelope).", hk, nil),
		upper: prometheus.NewDesc("tidemark_clock_offset_upper_bound_seconds",
			"Upper bound of a host's clock offset; +Inf when the estimate bounds it from below only (a producer's causal envelope).", hk, nil),
		invalid: prometheus.NewDesc("tidemark_latency_invalid_stamps_total",
			"Stamps the latency engine rejected, by moment and reason (missing, negative, unit_seconds, unit_micros, unit_nanos, too_old, too_new); their stages are absent.", []string{"moment", "reason"}, nil),
		unitFixed: prometheus.NewDesc("tidemark_latency_unit_corrected_stamps_total",
			"Stamps in a clearly wrong unit (µs or ns declared as ms) that latency.fix_units converted instead of rejecting, by moment and the reason they would have been rejected with; their records are flagged.", []string{"moment", "reason"}, nil),
		flag: prometheus.NewDesc("tidemark_latency_flagged_records_total",
			"Records the latency engine flagged, by flag: skew_suspected, offset_unknown, envelope, unsettled (warm-up: no drift fit yet; kept), wide (an interval wider than max(5 ms, 2 % of the stage); kept), projected (the monotone projection moved a stage end point beyond its own uncertainty), commit_bound.", []string{"flag"}, nil),
	}
}

// update takes a new snapshot of engine at now.
func (m *engineMetrics) update(engine *latency.Engine, now time.Time) {
	m.snap.Store(&engineSnapshot{offsets: engine.Offsets(now), totals: engine.Totals()})
}

func (m *engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.offset, m.lower, m.upper, m.invalid, m.unitFixed, m.flag} {
		ch <- d
	}
}

func (m *engineMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.snap.Load()
	if s == nil {
		return
	}
	for _, o := range s.offsets {
		switch o.Kind {
		case latency.KindUnknown, latency.KindReference:
			continue // no estimate; the reference clock is 0 by definition
		}
		est, _ := o.Estimate()
		kind := o.Kind.String()
		ch <- prometheus.MustNewConstMetric(m.offset, prometheus.GaugeValue, est.Seconds(), o.Host, kind)
		ch <- prometheus.MustNewConstMetric(m.lower, prometheus.GaugeValue, boundSeconds(o.Lower), o.Host, kind)
		ch <- prometheus.MustNewConstMetric(m.upper, prometheus.GaugeValue, boundSeconds(o.Upper), o.Host, kind)
	}
	t := &s.totals
	for mo := latency.Moment(0); mo < latency.NumMoments; mo++ {
		for r := latency.Reason(1); r < latency.NumReasons; r++ {
			if n := t.Invalid[mo][r]; n > 0 {
				ch <- prometheus.MustNewConstMetric(m.invalid, prometheus.CounterValue, float64(n), mo.String(), r.String())
			}
			if n := t.UnitCorrected[mo][r]; n > 0 {
				ch <- prometheus.MustNewConstMetric(m.unitFixed, prometheus.CounterValue, float64(n), mo.String(), r.String())
			}
		}
	}
	for _, f := range []struct {
		name string
		n    uint64
	}{{"skew_suspected", t.SkewSuspected}, {"offset_unknown", t.OffsetUnknown}, {"envelope", t.Envelope},
		{"unsettled", t.Unsettled}, {"wide", t.Wide}, {"projected", t.Projected}, {"commit_bound", t.CommitBound}} {
		ch <- prometheus.MustNewConstMetric(m.flag, prometheus.CounterValue, float64(f.n), f.name)
	}
}

// boundSeconds is an interval bound in seconds, ±Inf for an open side.
func boundSeconds(d time.Duration) float64 {
	switch d {
	case latency.Unbounded:
		return math.Inf(1)
	case -latency.Unbounded:
		return math.Inf(-1)
	}
	return d.Seconds()
}
