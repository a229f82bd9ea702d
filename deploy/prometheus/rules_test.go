package prometheus_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
	"github.com/tidemark/tidemark/latency"
)

const rulesFile = "tidemark.rules.yml"

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("parse %s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rulesFile)
	}
	return out
}

var (
	// quoted drops PromQL string literals (label values, regexps) so that a label value is never read as a name.
	quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// metricRef finds Tidemark metric names (tidemark_...) and recording-rule names (tidemark:...) in an expression.
	metricRef = regexp.MustCompile(`\btidemark[_:][a-zA-Z0-9_:]*`)
	fqName    = regexp.MustCompile(`fqName: "([^"]+)"`)
)

// exprNames returns the metric and recording-rule names an expression selects.
func exprNames(expr string) []string {
	names := metricRef.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
	slices.Sort(names)
	return slices.Compact(names)
}

func TestExprNames(t *testing.T) {
	got := exprNames(`max by (cluster) (tidemark_lag_partition_seconds unless on (group) tidemark_lag_partition_flag{flag="tidemark_not_a_metric"}) > tidemark:x:max`)
	want := []string{"tidemark:x:max", "tidemark_lag_partition_flag", "tidemark_lag_partition_seconds"}
	if !slices.Equal(got, want) {
		t.Fatalf("exprNames = %v, want %v", got, want)
	}
}

// capture is a prometheus.Registerer that keeps what is registered, so its descriptors can be listed.
type capture struct{ cs []prometheus.Collector }

func (c *capture) Register(x prometheus.Collector) error { c.cs = append(c.cs, x); return nil }
func (c *capture) MustRegister(xs ...prometheus.Collector) {
	c.cs = append(c.cs, xs...)
}
func (c *capture) Unregister(prometheus.Collector) bool { return false }

type emptySource struct{}

func (emptySource) Latest() *lagexporter.Snapshot { return nil }
func (emptySource) Health() lagexporter.Health    { return lagexporter.Health{} }

// exported lists the names of every metric family Tidemark's lag exporter (every option on) and collector register,
// with the histogram series suffixes expanded. It asks the real constructors, not a copy of their names.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	cfg := &lagexporter.Config{KafkaExporterCompat: true}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := &capture{}
	reg.MustRegister(promexport.NewCollector(cfg, emptySource{}))
	m := collector.NewMetrics(reg)
	histograms := map[string]bool{}
	for _, h := range []*prometheus.HistogramVec{m.ProbeLatency, m.E2ELatency, m.StageLatency} {
		ch := make(chan *prometheus.Desc, 1)
		h.Describe(ch)
		histograms[fqName.FindStringSubmatch((<-ch).String())[1]] = true
	}
	names := map[string]bool{}
	for _, c := range reg.cs {
		ch := make(chan *prometheus.Desc, 256)
		c.Describe(ch)
		close(ch)
		for d := range ch {
			n := fqName.FindStringSubmatch(d.String())[1]
			names[n] = true
			if histograms[n] {
				for _, s := range []string{"_bucket", "_count", "_sum"} {
					names[n+s] = true
				}
			}
		}
	}
	if len(names) < 30 {
		t.Fatalf("only %d metric names found in the registries: %v", len(names), names)
	}
	return names
}

// proposed returns the metric names docs/alerting.md lists as proposed (not exported yet), between its
// <!-- proposed:begin --> and <!-- proposed:end --> markers, as "| `name` |" table rows.
func proposed(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/alerting.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(b, []byte("<!-- proposed:begin -->"))
	end := bytes.Index(b, []byte("<!-- proposed:end -->"))
	if start < 0 || end < start {
		t.Fatal("docs/alerting.md lacks the proposed:begin/end markers")
	}
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(tidemark_[a-z0-9_]+)`").FindAllSubmatch(b[start:end], -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// TestRulesNameExportedMetrics: every metric a rule selects is registered by the lag exporter or the collector, or
// is listed in docs/alerting.md as proposed; a proposed metric that has since been exported must leave that list;
// every recording rule used is defined in the file.
func TestRulesNameExportedMetrics(t *testing.T) {
	rules := readRules(t)
	names := exported(t)
	prop := map[string]bool{}
	for _, p := range proposed(t) {
		if names[p] {
			t.Errorf("docs/alerting.md lists %s as proposed, but it is exported now: move it out of the proposed list", p)
		}
		prop[p] = true
		for _, s := range []string{"_bucket", "_count", "_sum"} {
			prop[p+s] = true
		}
	}
	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			recorded[r.Record] = true
		}
	}
	usedProposed := map[string]bool{}
	for _, r := range rules {
		for _, n := range exprNames(r.Expr) {
			switch {
			case strings.Contains(n, ":"):
				if !recorded[n] {
					t.Errorf("rule %s%s uses recording rule %s, which the file does not define", r.Alert, r.Record, n)
				}
			case names[n]:
			case prop[n]:
				usedProposed[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")] = true
			default:
				t.Errorf("rule %s%s selects %s, which neither the lag exporter nor the collector exports", r.Alert, r.Record, n)
			}
		}
	}
	for p := range prop {
		if strings.HasSuffix(p, "_bucket") || strings.HasSuffix(p, "_count") || strings.HasSuffix(p, "_sum") {
			continue
		}
		if !usedProposed[p] {
			t.Errorf("docs/alerting.md proposes %s, but no rule uses it", p)
		}
	}
}

// TestSLOBucketsExist: every `le` bound a rule selects on the live latency histogram is one of its bucket
// boundaries with the default collector configuration; a bound between boundaries would select no series, and
// the burn-rate alerts would then never fire.
func TestSLOBucketsExist(t *testing.T) {
	cfg := collector.Config{}
	cfg.SetDefaults()
	buckets := collector.NewMetrics(nil, cfg.SLOThresholds...).LatencyBuckets
	le := regexp.MustCompile(`tidemark_e2e_latency_seconds_bucket\{[^}]*le="([^"]+)"`)
	n := 0
	for _, r := range readRules(t) {
		for _, m := range le.FindAllStringSubmatch(r.Expr, -1) {
			n++
			v, err := strconv.ParseFloat(m[1], 64)
			if err != nil || !slices.Contains(buckets, v) {
				t.Errorf("rule %s%s selects le=%q, not a bucket boundary of %v", r.Alert, r.Record, m[1], buckets)
			}
		}
	}
	if n != 7 {
		t.Fatalf("%d le selectors in the SLO rules, want 7 (one per window)", n)
	}
}

// TestAlertsDocumented: every alert has a known severity and a runbook link to its own section of docs/alerting.md.
func TestAlertsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/alerting.md")
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllSubmatch(doc, -1) {
		headings[strings.ToLower(strings.TrimSpace(string(m[1])))] = true
	}
	n := 0
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		n++
		switch r.Labels["severity"] {
		case "page", "ticket", "info":
		default:
			t.Errorf("alert %s: severity %q, want page, ticket or info", r.Alert, r.Labels["severity"])
		}
		want := "docs/alerting.md#" + strings.ToLower(r.Alert)
		if r.Annotations["runbook"] != want {
			t.Errorf("alert %s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
		if !headings[strings.ToLower(r.Alert)] {
			t.Errorf("alert %s has no section (a heading with its name) in docs/alerting.md", r.Alert)
		}
		if r.Annotations["summary"] == "" {
			t.Errorf("alert %s has no summary", r.Alert)
		}
	}
	if n < 10 {
		t.Errorf("only %d alerts", n)
	}
}

// promtool returns the path of promtool (testenv.Tool: skipped when missing, failed under CI=true).
func promtool(t *testing.T) string {
	t.Helper()
	return testenv.Tool(t, "promtool")
}

func execPromtool(path string, args ...string) (string, error) {
	out, err := exec.Command(path, args...).CombinedOutput()
	return string(out), err
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := execPromtool(promtool(t), args...)
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestPromtoolCheckRules: the file is valid for Prometheus (syntax, PromQL, templates).
func TestPromtoolCheckRules(t *testing.T) {
	out := runPromtool(t, "check", "rules", rulesFile)
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool check rules: %s", out)
	}
}

// TestPromtoolUnitTests runs tidemark.rules.test.yml: input series with the expected alerts and recorded values.
func TestPromtoolUnitTests(t *testing.T) {
	out := runPromtool(t, "test", "rules", "tidemark.rules.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %s", out)
	}
}

// TestBurnRulesMatchLatencyWindows: the SLO alerts use exactly latency.DefaultBurnWindows (long and short window,
// factor, severity), the objective's budget 1 − 0.999, and each recording rule's range is the window its name says,
// so the Prometheus alerts and `tidemark slo report` agree on what burns.
func TestBurnRulesMatchLatencyWindows(t *testing.T) {
	window := func(s string) time.Duration {
		t.Helper()
		d, err := model.ParseDuration(s)
		if err != nil {
			t.Fatalf("window %q: %v", s, err)
		}
		return time.Duration(d)
	}
	pair := regexp.MustCompile(`tidemark:e2e_slo_errors:ratio_rate(\w+) > \(([\d.]+) \* 0\.001\)\s+and tidemark:e2e_slo_errors:ratio_rate(\w+) > \(([\d.]+) \* 0\.001\)`)
	rangeRe := regexp.MustCompile(`\[(\w+)\]`)
	var got []latency.BurnWindow
	for _, r := range readRules(t) {
		if name, ok := strings.CutPrefix(r.Record, "tidemark:e2e_slo_errors:ratio_rate"); ok {
			for _, m := range rangeRe.FindAllStringSubmatch(r.Expr, -1) {
				if m[1] != name {
					t.Errorf("recording rule %s reads a [%s] range", r.Record, m[1])
				}
			}
		}
		if r.Alert != "TidemarkE2ELatencyBudgetBurn" {
			continue
		}
		for _, m := range pair.FindAllStringSubmatch(r.Expr, -1) {
			f1, _ := strconv.ParseFloat(m[2], 64)
			f2, _ := strconv.ParseFloat(m[4], 64)
			if f1 != f2 {
				t.Errorf("%s: factors %v and %v differ within one window pair", r.Alert, f1, f2)
			}
			got = append(got, latency.BurnWindow{Long: window(m[1]), Short: window(m[3]), Factor: f1, Severity: r.Labels["severity"]})
		}
	}
	if want := latency.DefaultBurnWindows(); !slices.Equal(got, want) {
		t.Fatalf("burn-rate alerts %+v\nwant latency.DefaultBurnWindows() %+v", got, want)
	}
}
