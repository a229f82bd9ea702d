package lagexporter

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixedSource serves one snapshot with fixed health.
type fixedSource struct{ s *Snapshot }

func (f fixedSource) Latest() *Snapshot { return f.s }
func (f fixedSource) Health() Health {
	return Health{Cycles: 3, Errors: map[ErrorKind]uint64{ErrKindListOffsets: 1}, LastDuration: 250 * time.Millisecond,
		LastSuccess: time.Date(2026, 11, 29, 12, 0, 1, 0, time.UTC)}
}

func caseCollector(t *testing.T, file string, line int, mutate func(*Config)) (*Collector, *Snapshot) {
	t.Helper()
	tl, err := ReadTimelineFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	cfg := caseConfig(t, tl)
	if mutate != nil {
		mutate(cfg)
	}
	snaps := evalCase(t, file)
	return NewCollector(cfg, fixedSource{snaps[line]}), snaps[line]
}

func TestCollectorGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		file   string
		mutate func(*Config)
	}{
		{"c06_partition.prom", "c06_no_commit.jsonl", nil},
		{"c06_topic.prom", "c06_no_commit.jsonl", func(c *Config) { c.Granularity = GranularityTopic }},
		{"c01_compat.prom", "c01_transactions.jsonl", func(c *Config) { c.KafkaExporterCompat = true }},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			c, _ := caseCollector(t, tc.file, 0, tc.mutate)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				reg := prometheus.NewPedanticRegistry()
				reg.MustRegister(c)
				var buf bytes.Buffer
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				for _, mf := range mfs {
					if err := writeText(&buf, mf); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := testutil.CollectAndCompare(c, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestCollectorPromlint(t *testing.T) {
	c, _ := caseCollector(t, "c01_transactions.jsonl", 0, nil)
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// The kafka_exporter compatibility names are kept exactly as dashboards expect them, so promlint's complaint
	// about `_sum` on a gauge is accepted for those two names only.
	c, _ = caseCollector(t, "c01_transactions.jsonl", 0, func(c *Config) { c.KafkaExporterCompat = true })
	problems, err = testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if p.Metric == "kafka_consumergroup_lag_sum" || p.Metric == "kafka_consumergroup_current_offset_sum" {
			continue
		}
		t.Errorf("promlint (compat): %s: %s", p.Metric, p.Text)
	}
	_ = promlint.Problem{}
}

// TestC06NoSentinelSeries: no committed-offset series with -1; p0 and p1 have none at all.
func TestC06NoSentinelSeries(t *testing.T) {
	c, _ := caseCollector(t, "c06_no_commit.jsonl", 0, nil)
	series := gatherSeries(t, c)
	for _, s := range series {
		if strings.HasPrefix(s.name, "tidemark_lag_partition_committed_offset") && s.value < 0 {
			t.Errorf("negative committed offset series %s", s.name)
		}
	}
	if n := countSeries(series, "tidemark_lag_partition_committed_offset", `group="g"`); n != 1 {
		t.Errorf("%d committed-offset series for g, want 1 (p2 only)", n)
	}
	if v := value(t, series, "tidemark_lag_topic_committed_offsets", `group="g"`); v != 4388 {
		t.Errorf("committed sum %v, want 4388", v)
	}
}

// TestC15SeriesDisappear: at T+30s no series carries group="tmp-1".
func TestC15SeriesDisappear(t *testing.T) {
	c, _ := caseCollector(t, "c15_deleted_group.jsonl", 0, nil)
	if n := countSeries(gatherSeries(t, c), "", `group="tmp-1"`); n == 0 {
		t.Fatal("no tmp-1 series before deletion: the test would prove nothing")
	}
	c, _ = caseCollector(t, "c15_deleted_group.jsonl", 1, nil)
	if n := countSeries(gatherSeries(t, c), "", `group="tmp-1"`); n != 0 {
		t.Fatalf("%d series for deleted group tmp-1", n)
	}
}

// TestC16Cardinality: after any number of restarts: 6 lag series summing to 60, 3 member-info series, members gauge 3.
func TestC16Cardinality(t *testing.T) {
	for line := 0; line < 5; line++ {
		c, _ := caseCollector(t, "c16_cardinality.jsonl", line, nil)
		series := gatherSeries(t, c)
		if n := countSeries(series, "tidemark_lag_partition_offsets", `group="g"`); n != 6 {
			t.Errorf("line %d: %d lag series, want 6", line+1, n)
		}
		sum := 0.0
		for _, s := range series {
			if s.name == "tidemark_lag_partition_offsets" {
				sum += s.value
			}
		}
		if sum != 60 {
			t.Errorf("line %d: sum(lag) = %v, want 60", line+1, sum)
		}
		if n := countSeries(series, "tidemark_lag_group_member_info", `group="g"`); n != 3 {
			t.Errorf("line %d: %d member info series, want 3", line+1, n)
		}
		if v := value(t, series, "tidemark_lag_group_members", `group="g"`); v != 3 {
			t.Errorf("line %d: members %v, want 3", line+1, v)
		}
		for _, s := range series {
			if strings.Contains(s.labels, "member_id") && !strings.HasPrefix(s.name, "tidemark_lag_group_member_info") {
				t.Errorf("member label on %s", s.name)
			}
		}
	}
}

// TestMetricsDocAgrees: docs/metrics.md lists exactly the metric names the collector describes.
func TestMetricsDocAgrees(t *testing.T) {
	b, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(b, []byte("<!-- lagexporter:begin -->"))
	end := bytes.Index(b, []byte("<!-- lagexporter:end -->"))
	if start < 0 || end < start {
		t.Fatal("docs/metrics.md lacks the lagexporter:begin/end markers")
	}
	re := regexp.MustCompile("(?m)^\\| `((?:tidemark|kafka)_[a-z_]+)`")
	var doc []string
	for _, m := range re.FindAllSubmatch(b[start:end], -1) {
		doc = append(doc, string(m[1]))
	}
	cfg := &Config{KafkaExporterCompat: true}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 100)
	NewCollector(cfg, fixedSource{}).Describe(ch)
	close(ch)
	var reg []string
	nameRe := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		reg = append(reg, nameRe.FindStringSubmatch(d.String())[1])
	}
	slices.Sort(doc)
	slices.Sort(reg)
	if !slices.Equal(doc, reg) {
		t.Fatalf("docs/metrics.md and the collector disagree:\ndoc: %v\nregistry: %v", doc, reg)
	}
}

type series struct {
	name, labels string
	value        float64
}

func gatherSeries(t *testing.T, c prometheus.Collector) []series {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []series
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			v := m.GetGauge().GetValue()
			if mf.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out = append(out, series{mf.GetName(), strings.Join(ls, ","), v})
		}
	}
	return out
}

func countSeries(ss []series, name, label string) int {
	n := 0
	for _, s := range ss {
		if (name == "" || s.name == name) && strings.Contains(s.labels, label) {
			n++
		}
	}
	return n
}

func value(t *testing.T, ss []series, name, label string) float64 {
	t.Helper()
	for _, s := range ss {
		if s.name == name && strings.Contains(s.labels, label) {
			return s.value
		}
	}
	t.Fatalf("no series %s{%s}", name, label)
	return 0
}

// TestHandlerMatchesCollect: the pre-rendered exposition holds exactly the series Collect produces, for every case
// timeline and both granularities, including label values that need escaping.
func TestHandlerMatchesCollect(t *testing.T) {
	files, _ := filepath.Glob("testdata/c*.jsonl")
	for _, file := range files {
		for _, mut := range []func(*Config){nil, func(c *Config) { c.Granularity = GranularityTopic; c.KafkaExporterCompat = true }} {
			c, s := caseCollector(t, filepath.Base(file), 0, mut)
			text := c.AppendText(nil, s, c.src.Health())
			if err := testutil.CollectAndCompare(c, bytes.NewReader(text)); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
	// escaping: a group name with a quote, a backslash and a newline
	s := &Snapshot{Seq: 1, Groups: []GroupLag{{Group: "we\"ird\\gr\noup", Status: StatusOK}}}
	cfg := &Config{}
	cfg.SetDefaults()
	_ = cfg.Validate()
	c := NewCollector(cfg, fixedSource{s})
	if err := testutil.CollectAndCompare(c, bytes.NewReader(c.AppendText(nil, s, fixedSource{}.Health()))); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerServesAndCaches(t *testing.T) {
	c, _ := caseCollector(t, "c06_no_commit.jsonl", 0, nil)
	h := NewHandler(c, nil)
	for _, enc := range []string{"", "gzip"} {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", enc)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if enc == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Contains(body, []byte(`tidemark_lag_group_offsets{cluster="test",group="g"} 3083`)) {
			t.Fatalf("%q response lacks the group lag:\n%s", enc, body)
		}
	}
}

// TestHandlerGzipEqualsText: the family-by-family gzip rendering decompresses to exactly AppendText's bytes.
func TestHandlerGzipEqualsText(t *testing.T) {
	c, s := caseCollector(t, "c16_cardinality.jsonl", 4, nil)
	zr, err := gzip.NewReader(bytes.NewReader(c.renderGzip(s, c.src.Health(), nil)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if want := c.AppendText(nil, s, c.src.Health()); !bytes.Equal(got, want) {
		t.Fatalf("gzip rendering differs from text:\n%s\n---\n%s", got, want)
	}
}

// TestPromtoolCheckMetrics runs Prometheus's own linter over the rendered exposition when promtool is installed
// (Debian's prometheus package); promlint above always runs.
func TestPromtoolCheckMetrics(t *testing.T) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (CI=true): %v; `bash deploy/local/stack.sh install` installs it", err)
		}
		t.Skip("promtool not installed: `bash deploy/local/stack.sh install` installs it")
	}
	for _, file := range []string{"c01_transactions.jsonl", "c06_no_commit.jsonl", "c30_replay.jsonl"} {
		c, s := caseCollector(t, file, 0, nil)
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = bytes.NewReader(c.AppendText(nil, s, c.src.Health()))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: promtool check metrics: %v\n%s", file, err, out)
		}
	}
}
