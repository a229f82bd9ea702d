package collector

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
)

// TestCollectorMetricsDocAgrees: docs/metrics.md's collector table lists exactly the metric families NewMetrics
// registers (as their collectors describe them), with their types, and promlint finds nothing wrong with their
// names, units and help.
func TestCollectorMetricsDocAgrees(t *testing.T) {
	reg := testenv.NewDescribedRegistry()
	m := NewMetrics(reg)
	// One series per vector, so that promlint also reads their exposition (the doc check itself sees every
	// described family, series or not).
	m.Records.WithLabelValues("p").Inc()
	m.Rows.WithLabelValues("p").Inc()
	m.RowsAcked.WithLabelValues("p").Inc()
	m.SinkErrors.WithLabelValues("p").Inc()
	m.SinkBlocked.WithLabelValues("p").Inc()
	m.SinkWaiting.WithLabelValues("p").Inc()
	m.DeadLetters.WithLabelValues("p", "r").Inc()
	m.Classes.WithLabelValues("p", "c").Inc()
	m.Skewed.WithLabelValues("p").Inc()
	m.BadTraceParent.WithLabelValues("p").Inc()
	m.WithoutMetadata.WithLabelValues("missing").Inc()
	m.ProbeSent.WithLabelValues("b").Inc()
	m.ProbeLost.WithLabelValues("b").Inc()
	m.ProbeDup.WithLabelValues("b").Inc()
	m.ProbeLatency.WithLabelValues("b", "s").Observe(1)
	m.ProbePlanActions.WithLabelValues("a").Inc()
	m.ProbePlanErrors.Inc()
	m.AppendLeaderUnknown.Inc()
	m.ProducerAcks.WithLabelValues("o").Inc()
	m.E2ELatency.WithLabelValues("g", "t").Observe(1)
	m.StageLatency.WithLabelValues("s", "g", "t").Observe(1)
	m.E2EBound.WithLabelValues("lower", "g", "t").Observe(1)
	m.E2EUnbounded.WithLabelValues("g", "t").Inc()
	m.TraceDecisions.WithLabelValues("p", "d").Inc()
	m.HopSpans.WithLabelValues("p", "s", "o").Inc()
	m.Spans.WithLabelValues("o").Inc()
	m.SpanBrackets.WithLabelValues("o").Inc()
	// The engine mirror: one host with an estimate, one rejected stamp and one converted from µs.
	eng, err := latency.NewEngine(latency.Config{FixUnits: true})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := eng.ReportOffset(eng.Host("h"), 0, time.Millisecond, now); err != nil {
		t.Fatal(err)
	}
	var r latency.Record
	r.Stamps[latency.Produce] = latency.Stamp{Value: -5, Unit: latency.Millis}
	r.Stamps[latency.Processed] = latency.TimeStamp(latency.RefHost, now)
	eng.Path("g", "t", 0).Observe(r)
	r.Offset = 1
	r.Stamps[latency.Produce] = latency.MillisStamp(latency.RefHost, now.UnixMicro()-1000)
	r.Stamps[latency.Append] = latency.TimeStamp(latency.RefHost, now)
	eng.Path("g", "t", 0).Observe(r)
	m.engine.update(eng, now)
	testenv.MetricsDocAgrees(t, "../docs/metrics.md", "collector", reg)
}
