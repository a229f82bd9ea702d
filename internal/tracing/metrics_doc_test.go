package tracing

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// TestMetricsDocAgrees: docs/metrics.md's trace-export table lists exactly what NewProvider registers, and promlint
// finds nothing wrong with it.
func TestMetricsDocAgrees(t *testing.T) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	start, end := bytes.Index(b, []byte("<!-- tracing:begin -->")), bytes.Index(b, []byte("<!-- tracing:end -->"))
	if start < 0 || end < start {
		t.Fatal("docs/metrics.md lacks the tracing:begin/end markers")
	}
	var doc []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(tidemark_[a-z0-9_]+)` \\| ([a-z]+) \\|").FindAllSubmatch(b[start:end], -1) {
		doc = append(doc, string(m[1])+" "+string(m[2]))
	}
	reg := prometheus.NewPedanticRegistry()
	p, err := NewProvider(Config{Enabled: true, Endpoint: "127.0.0.1:1"}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(t.Context())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("promlint: %s: %s", pr.Metric, pr.Text)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName()+" "+map[string]string{"COUNTER": "counter", "GAUGE": "gauge"}[mf.GetType().String()])
	}
	slices.Sort(doc)
	slices.Sort(got)
	if !slices.Equal(doc, got) {
		t.Fatalf("docs/metrics.md tracing table:\n%v\nregistered:\n%v", doc, got)
	}
}
