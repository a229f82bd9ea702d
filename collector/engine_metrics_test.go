package collector

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/latency"
)

// TestEngineMetricsShowIntervals: /metrics shows a clock offset as the interval it is. A
// consumer C1 reported at −300 ms ± 0.1 ms has both bounds; a producer P placed only by the causal envelope (it is
// 3 s ahead, ingests 1–4 ms against a broker known exactly) is bounded from below only, at 2999 ms less its bound's
// own uncertainty (33 ms carried at 100 ppm: 0.0033 ms, latency's TestEnvelopeIntervalIsOneSided), and its upper
// bound is +Inf, never 2999 + 0.0033. The engine's counters come along: one produce stamp in µs converted
// (fix_units on), and the 4 envelope records flagged so.
func TestEngineMetricsShowIntervals(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	eng, err := latency.NewEngine(latency.Config{FixUnits: true})
	if err != nil {
		t.Fatal(err)
	}
	b, p, c := eng.Host("broker-1"), eng.Host("P"), eng.Host("C1")
	if err := eng.ReportOffset(b, 0, 0, base); err != nil {
		t.Fatal(err)
	}
	path := eng.Path("g", "t", 0)
	var last time.Time
	for i := 0; i < 4; i++ {
		tr := base.Add(time.Duration(i) * 10 * time.Millisecond)
		last = tr.Add(time.Duration(i+1) * time.Millisecond)
		var r latency.Record
		r.Offset = int64(i)
		r.Stamps[latency.Produce] = latency.TimeStamp(p, tr.Add(3*time.Second))
		r.Stamps[latency.Append] = latency.TimeStamp(b, last)
		r.Stamps[latency.Processed] = latency.TimeStamp(latency.RefHost, last.Add(5*time.Millisecond))
		path.Observe(r)
	}
	if err := eng.ReportOffset(c, -300*time.Millisecond, 100*time.Microsecond, last); err != nil {
		t.Fatal(err)
	}
	// One record whose produce stamp is in µs where ms were declared, 20 ms before its append.
	var r latency.Record
	r.Offset = 10
	r.Stamps[latency.Produce] = latency.MillisStamp(c, (last.UnixMilli()-20)*1000)
	r.Stamps[latency.Append] = latency.TimeStamp(b, last)
	r.Stamps[latency.Processed] = latency.TimeStamp(latency.RefHost, last.Add(5*time.Millisecond))
	path.Observe(r)

	m := NewMetrics(nil)
	m.engine.update(eng, last)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.engine)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.Metric {
			k := mf.GetName()
			for _, l := range mt.Label {
				k += " " + l.GetName() + "=" + l.GetValue()
			}
			v := mt.GetGauge().GetValue()
			if mf.GetType() == dto.MetricType_COUNTER {
				v = mt.GetCounter().GetValue()
			}
			got[k] = v
		}
	}
	// s: the envelope bound's own uncertainty (drift over the 33 ms since it was set) and its slack: the anchor's
	// uncertainty then (broker-1's report carried 1 ms at 100 ppm) and both ns stamps' 1 µs quantum
	const u = 100e-6*33e-3 + 100e-6*1e-3 + 2e-6
	for _, w := range []struct {
		key  string
		want float64
	}{
		{"tidemark_clock_offset_seconds host=C1 kind=reported", -0.3},
		{"tidemark_clock_offset_lower_bound_seconds host=C1 kind=reported", -0.3001},
		{"tidemark_clock_offset_upper_bound_seconds host=C1 kind=reported", -0.2999},
		{"tidemark_clock_offset_seconds host=P kind=envelope", 2.999}, // no bracketed broker: the bound itself
		{"tidemark_clock_offset_lower_bound_seconds host=P kind=envelope", 2.999 - u},
		{"tidemark_clock_offset_upper_bound_seconds host=P kind=envelope", math.Inf(1)},
		// broker-1 reported 0 ± 0 at base, carried to last (34 ms) at 100 ppm
		{"tidemark_clock_offset_lower_bound_seconds host=broker-1 kind=reported", -100e-6 * 34e-3},
		{"tidemark_clock_offset_upper_bound_seconds host=broker-1 kind=reported", 100e-6 * 34e-3},
		{"tidemark_latency_unit_corrected_stamps_total moment=produce reason=unit_micros", 1},
		{"tidemark_latency_flagged_records_total flag=envelope", 4},
	} {
		v, ok := got[w.key]
		if !ok {
			t.Errorf("%s: missing", w.key)
			continue
		}
		// 1 µs: the engine works in float64 epoch ms, which resolve 2^-12 ms (latency's within)
		if math.IsInf(w.want, 0) && v != w.want || !math.IsInf(w.want, 0) && math.Abs(v-w.want) > 1e-6 {
			t.Errorf("%s = %v, want %v", w.key, v, w.want)
		}
	}
	// The reference clock and hosts without an estimate have no series.
	for k := range got {
		if strings.Contains(k, "host=collector") || strings.Contains(k, "kind=unknown") {
			t.Errorf("unexpected series %s", k)
		}
	}
}
