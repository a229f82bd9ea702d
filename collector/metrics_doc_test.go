package collector

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestCollectorMetricsDocAgrees: docs/metrics.md's collector table lists exactly the metric families NewMetrics
// registers, with their types, and promlint finds nothing wrong with their names, units and help.
func TestCollectorMetricsDocAgrees(t *testing.T) {
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	start, end := bytes.Index(b, []byte("<!-- collector:begin -->")), bytes.Index(b, []byte("<!-- collector:end -->"))
	if start < 0 || end < start {
		t.Fatal("docs/metrics.md lacks the collector:begin/end markers")
	}
	var doc []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(tidemark_[a-z0-9_]+)` \\| ([a-z]+) \\|").FindAllSubmatch(b[start:end], -1) {
		doc = append(doc, string(m[1])+" "+string(m[2]))
	}
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
	m.ProbeSent.WithLabelValues("b").Inc()
	m.ProbeLost.WithLabelValues("b").Inc()
	m.ProbeDup.WithLabelValues("b").Inc()
	m.ProbeLatency.WithLabelValues("b", "s").Observe(1)
	m.E2ELatency.WithLabelValues("g", "t").Observe(1)
	m.StageLatency.WithLabelValues("s", "g", "t").Observe(1)
	m.TraceDecisions.WithLabelValues("p", "d").Inc()
	m.HopSpans.WithLabelValues("p", "s", "o").Inc()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName()+" "+map[string]string{"COUNTER": "counter", "GAUGE": "gauge", "HISTOGRAM": "histogram"}[mf.GetType().String()])
	}
	slices.Sort(doc)
	slices.Sort(got)
	if !slices.Equal(doc, got) {
		t.Fatalf("docs/metrics.md collector table:\n%v\nregistered:\n%v", doc, got)
	}
}
