package testenv

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// MetricsDocAgrees checks that the table between `<!-- section:begin -->` and `<!-- section:end -->` in the
// Markdown file doc lists exactly the metric families reg gathers, each with its type (`| name | type |` rows), and
// that promlint finds nothing wrong with their names, units and help. Vectors without children are not gathered:
// give every family one series first.
func MetricsDocAgrees(t testing.TB, doc, section string, reg *prometheus.Registry) {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	start, end := bytes.Index(b, []byte("<!-- "+section+":begin -->")), bytes.Index(b, []byte("<!-- "+section+":end -->"))
	if start < 0 || end < start {
		t.Fatalf("%s lacks the %s:begin/end markers", doc, section)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(tidemark_[a-z0-9_]+)` \\| ([a-z]+) \\|").FindAllSubmatch(b[start:end], -1) {
		listed = append(listed, string(m[1])+" "+string(m[2]))
	}
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
	slices.Sort(listed)
	slices.Sort(got)
	if !slices.Equal(listed, got) {
		t.Fatalf("%s %s table:\n%v\nregistered:\n%v", doc, section, listed, got)
	}
}
