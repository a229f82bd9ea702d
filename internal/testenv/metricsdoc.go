package testenv

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// DescribedRegistry is a pedantic registry that also keeps the collectors registered on it, so that a test can list
// every metric family they describe (Describe), not only the ones that have series (Gather): a vector without
// children is described but not gathered.
type DescribedRegistry struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

// NewDescribedRegistry returns an empty DescribedRegistry backed by prometheus.NewPedanticRegistry.
func NewDescribedRegistry() *DescribedRegistry {
	return &DescribedRegistry{Registry: prometheus.NewPedanticRegistry()}
}

// Register registers c on the registry and keeps it for Describe.
func (r *DescribedRegistry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers cs and panics on the first error, as prometheus.Registry.MustRegister does.
func (r *DescribedRegistry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c and forgets it.
func (r *DescribedRegistry) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.collectors = slices.DeleteFunc(r.collectors, func(k prometheus.Collector) bool { return k == c })
	return true
}

// descRE reads the name and help out of prometheus.Desc.String, the only public view of a descriptor.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*")`)

// described lists the families the registered collectors describe, each with its help and, where the collector's
// Go type tells it (the vector types), its type.
func (r *DescribedRegistry) described(t testing.TB) map[string]*dto.MetricFamily {
	t.Helper()
	out := map[string]*dto.MetricFamily{}
	for _, c := range r.collectors {
		var typ *dto.MetricType
		switch c.(type) {
		case *prometheus.CounterVec:
			typ = dto.MetricType_COUNTER.Enum()
		case *prometheus.GaugeVec:
			typ = dto.MetricType_GAUGE.Enum()
		case *prometheus.HistogramVec:
			typ = dto.MetricType_HISTOGRAM.Enum()
		case *prometheus.SummaryVec:
			typ = dto.MetricType_SUMMARY.Enum()
		}
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m := descRE.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			name, err1 := strconv.Unquote(m[1])
			help, err2 := strconv.Unquote(m[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("cannot read descriptor %s", d)
			}
			out[name] = &dto.MetricFamily{Name: &name, Help: &help, Type: typ}
		}
	}
	return out
}

// MetricsDocAgrees checks that the table between `<!-- section:begin -->` and `<!-- section:end -->` in the
// Markdown file doc lists exactly the metric families the collectors registered on reg describe, each with its type
// (`| name | type |` rows), and that promlint finds nothing wrong with their names, units and help. Families are
// taken from Describe, so a vector nobody touched still counts; a family's type comes from Gather when it has
// series, else from its vector's Go type, and a family whose type neither tells is an error (give it one series).
func MetricsDocAgrees(t testing.TB, doc, section string, reg *DescribedRegistry) {
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
	families := reg.described(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, ok := families[mf.GetName()]; !ok {
			t.Errorf("%s is gathered but no registered collector describes it", mf.GetName())
		}
		families[mf.GetName()] = mf
	}
	lint := make([]*dto.MetricFamily, 0, len(families))
	var got []string
	for name, mf := range families {
		lint = append(lint, mf)
		typ := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge",
			dto.MetricType_HISTOGRAM: "histogram", dto.MetricType_SUMMARY: "summary"}[mf.GetType()]
		if mf.Type == nil {
			t.Errorf("%s has no series and its collector does not tell its type: give it one series", name)
			typ = "unknown"
		}
		got = append(got, name+" "+typ)
	}
	problems, err := promlint.NewWithMetricFamilies(lint).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	slices.Sort(listed)
	slices.Sort(got)
	for _, g := range got {
		if !slices.Contains(listed, g) {
			t.Errorf("%s %s table lacks the row for %s", doc, section, g)
		}
	}
	for _, l := range listed {
		if !slices.Contains(got, l) {
			t.Errorf("%s %s table lists %s, which no registered collector describes so", doc, section, l)
		}
	}
}
