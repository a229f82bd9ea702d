package collector

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestCollectorMetricsDocAgrees: docs/metrics.md's collector table lists exactly the metric families NewMetrics
// registers, with their types, and promlint finds nothing wrong with their names, units and help.
func TestCollectorMetricsDocAgrees(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := NewMetrics(reg)
	// Vectors without children are not gathered: give every family one series.
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
	m.E2ELatency.WithLabelValues("g", "t").Observe(1)
	m.StageLatency.WithLabelValues("s", "g", "t").Observe(1)
	m.TraceDecisions.WithLabelValues("p", "d").Inc()
	m.HopSpans.WithLabelValues("p", "s", "o").Inc()
	testenv.MetricsDocAgrees(t, "../docs/metrics.md", "collector", reg)
}
