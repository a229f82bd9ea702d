package promexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"flag"
	"io"
	"maps"
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

	. "github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
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
	tl, err := timeline.ReadFile(filepath.Join(caseDir, file))
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
	b, err := os.ReadFile("../../docs/metrics.md")
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
	files, _ := filepath.Glob(filepath.Join(caseDir, "*.jsonl"))
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

// groupSeries counts, by metric name, the series carrying group="<g>".
func groupSeries(ss []series, g string) (map[string]int, int) {
	m, n := map[string]int{}, 0
	for _, s := range ss {
		if strings.Contains(s.labels, `group="`+g+`"`) {
			m[s.name]++
			n++
		}
	}
	return m, n
}

// TestC16SeriesBudget pins the exact per-group series count of docs/metrics.md's budget at partition granularity:
// a group on one topic with 6 partitions and 3 members exposes 51 series (50 in its first poll), and 4 member
// restarts (new member and client ids each time) neither add series nor leave old members behind.
//
// In steady state the anomaly series add 2 per (group, topic) (the unassigned-commit count and the
// unread-records-deleted counter, both always present so that increase() and absence alerts work) and 2 per group
// (the replaying gauge beside the status, and the catch-up estimate, which needs two samples of the window and so is
// absent in the first poll). Every other anomaly series exists only while its condition holds (ahead, stale,
// compaction, retention margins, failing partitions) and none holds for this healthy group. The group-type info
// series (tidemark_lag_group_info) is one per group.
func TestC16SeriesBudget(t *testing.T) {
	want := map[string]int{
		// per partition: lag, time lag, committed offset (6 partitions)
		"tidemark_lag_partition_offsets": 6, "tidemark_lag_partition_seconds": 6, "tidemark_lag_partition_committed_offset": 6,
		// per set flag and partition: this fixture has no record reads, so every partition is estimated + lower_bound
		"tidemark_lag_partition_flag": 12,
		// per (group, topic): 7 aggregates, the unassigned-commit count and the unread-deleted counter
		"tidemark_lag_topic_offsets": 1, "tidemark_lag_topic_seconds": 1, "tidemark_lag_topic_max_offsets": 1,
		"tidemark_lag_topic_committed_offsets": 1, "tidemark_lag_topic_expired_offsets": 1,
		"tidemark_lag_topic_partitions": 1, "tidemark_lag_topic_unknown_partitions": 1,
		"tidemark_lag_topic_unassigned_committed_partitions": 1, "tidemark_lag_topic_unread_records_deleted_total": 1,
		// per group: 7 gauges, the group-type info and the catch-up estimate (from the second poll), plus one info
		// series per current member
		"tidemark_lag_group_offsets": 1, "tidemark_lag_group_seconds": 1, "tidemark_lag_group_members": 1,
		"tidemark_lag_group_simple_consumer": 1, "tidemark_lag_group_state": 1, "tidemark_lag_group_status": 1,
		"tidemark_lag_group_replaying": 1, "tidemark_lag_group_catch_up_seconds": 1, "tidemark_lag_group_info": 1,
		"tidemark_lag_group_member_info": 3,
	}
	tl, err := timeline.ReadFile(filepath.Join(caseDir, "c16_cardinality.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Lines) != 5 {
		t.Fatalf("fixture has %d polls, want 5 (start + 4 restarts)", len(tl.Lines))
	}
	for line := range tl.Lines {
		c, _ := caseCollector(t, "c16_cardinality.jsonl", line, nil)
		ss := gatherSeries(t, c)
		got, n := groupSeries(ss, "g")
		wantN, wantFams := 51, want
		if line == 0 { // one sample in the window: no catch-up estimate yet
			wantN, wantFams = 50, maps.Clone(want)
			delete(wantFams, "tidemark_lag_group_catch_up_seconds")
		}
		if n != wantN || !maps.Equal(got, wantFams) {
			t.Errorf("poll %d: %d series %v, want %d %v", line+1, n, got, wantN, wantFams)
		}
		// the info series are exactly this poll's members: none left over from before a restart
		var ids, wantIDs []string
		for _, s := range ss {
			if s.name == "tidemark_lag_group_member_info" {
				ids = append(ids, s.labels[strings.Index(s.labels, "member_id="):])
			}
		}
		for _, m := range tl.Lines[line].Groups[0].Members {
			wantIDs = append(wantIDs, `member_id="`+m.MemberID+`"`)
		}
		slices.Sort(ids)
		slices.Sort(wantIDs)
		if !slices.Equal(ids, wantIDs) || len(ids) != 3 {
			t.Errorf("poll %d: member info %v, want exactly %v", line+1, ids, wantIDs)
		}
		if line > 0 && slices.Equal(wantIDs, memberIDs(tl.Lines[line-1].Groups[0].Members)) {
			t.Fatalf("fixture poll %d does not restart the members", line+1)
		}
	}
}

func memberIDs(ms []Member) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, `member_id="`+m.MemberID+`"`)
	}
	slices.Sort(out)
	return out
}

// TestC11SeriesLifetime: a group's series stay while it is Empty with commits (its lag is what matters then) and go
// only when the group leaves the observation (deleted, or its offsets expired so the broker no longer lists it).
func TestC11SeriesLifetime(t *testing.T) {
	tl, err := timeline.ReadFile(filepath.Join(caseDir, "c11_empty_group.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	// one more poll after offsets.retention: the broker no longer lists billing at all
	gone := tl.Lines[len(tl.Lines)-1]
	gone.Time = gone.Time.Add(7 * 24 * time.Hour)
	gone.Groups = nil
	tl.Append(gone)
	cfg := caseConfig(t, tl)
	var counts []int
	if err := timeline.Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error {
		_, n := groupSeries(gatherSeries(t, NewCollector(cfg, fixedSource{s})), "billing")
		counts = append(counts, n)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// poll 1, Stable, lag 0: 9 partition series (lag, time lag, committed × 3) + 9 topic + 9 group (the group-type
	// info, and the catch-up estimate is 0: caught up) + 3 member info. polls 2-3, Empty with commits and growing lag:
	// the same 9 + 9 + 9 (catch-up +Inf: not draining), no member info, 3 flag series (estimated: this fixture reads
	// no records). poll 4, the group is gone: 0.
	if want := []int{30, 30, 30, 0}; !slices.Equal(counts, want) {
		t.Fatalf("series of billing per poll = %v, want %v", counts, want)
	}
	c, _ := caseCollector(t, "c11_empty_group.jsonl", 2, nil)
	ss := gatherSeries(t, c)
	if n := countSeries(ss, "tidemark_lag_partition_offsets", `group="billing"`); n != 3 {
		t.Errorf("Empty group: %d lag series, want 3", n)
	}
	if n := countSeries(ss, "tidemark_lag_group_member_info", `group="billing"`); n != 0 {
		t.Errorf("Empty group: %d member info series, want 0", n)
	}
	if v := value(t, ss, "tidemark_lag_group_offsets", `group="billing"`); v != 18000 {
		t.Errorf("Empty group: lag %v, want 18000", v)
	}
}

// TestHandlerFollowsLoop: the handler renders each new snapshot as it is published, so a scrape finds it ready.
func TestHandlerFollowsLoop(t *testing.T) {
	tl, err := timeline.ReadFile(filepath.Join(caseDir, "c05_log_start.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	player := timeline.NewPlayer(tl)
	player.Advance()
	cfg := caseConfig(t, tl)
	loop, err := NewLoop(cfg, player, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewCollector(cfg, loop), nil)
	snaps, cancelSub := loop.Subscribe(1)
	defer cancelSub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Follow(ctx, snaps)
	s, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.RLock()
		ready := h.cur != nil && len(h.cur.key) == 1 && h.cur.key[0].seq == s.Seq
		h.mu.RUnlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("handler did not render the new snapshot within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestScrapeServesFinishedRendering: a scrape that arrives while the next snapshot is being rendered serves the last
// finished rendering at once instead of waiting for the new one; the next scrape after the rendering serves it.
func TestScrapeServesFinishedRendering(t *testing.T) {
	tl, err := timeline.ReadFile(filepath.Join(caseDir, "c05_log_start.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	player := timeline.NewPlayer(tl)
	cfg := caseConfig(t, tl)
	loop, err := NewLoop(cfg, player, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewCollector(cfg, loop), nil)
	scrape := func() (seq uint64, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		h.mu.RLock()
		defer h.mu.RUnlock()
		return h.cur.key[0].seq, rec.Body.String()
	}
	player.Advance()
	s1, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seq, first := scrape()
	if seq != s1.Seq || !strings.Contains(first, "tidemark_lag_partition_offsets") {
		t.Fatalf("first scrape: rendering of snapshot %d (want %d), body has partition lag: %v", seq, s1.Seq,
			strings.Contains(first, "tidemark_lag_partition_offsets"))
	}
	player.Advance()
	s2, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.renderMu.Lock() // a rendering of s2 is being built (by Follow, in the daemon)
	seq, during := scrape()
	h.renderMu.Unlock()
	if seq != s1.Seq || during != first {
		t.Fatalf("scrape during a rendering served snapshot %d's (want the finished %d's), same body %v", seq, s1.Seq,
			during == first)
	}
	if seq, _ = scrape(); seq != s2.Seq {
		t.Fatalf("scrape after the rendering served snapshot %d, want %d", seq, s2.Seq)
	}
}

// TestPartitionLagSeriesBudget pins granularity partition_lag's budget (docs/metrics.md): for the case C16 group (1
// topic, 6 partitions, 3 members, flags set) exactly P + 1 + 4 = 11 series: the lag per partition, the lag sum of its
// topic, and the group's lag, time lag, status and group-type info; the values are those of granularity partition.
func TestPartitionLagSeriesBudget(t *testing.T) {
	want := map[string]int{"tidemark_lag_partition_offsets": 6, "tidemark_lag_topic_offsets": 1,
		"tidemark_lag_group_offsets": 1, "tidemark_lag_group_seconds": 1, "tidemark_lag_group_status": 1,
		"tidemark_lag_group_info": 1}
	full, _ := caseCollector(t, "c16_cardinality.jsonl", 4, nil)
	c, _ := caseCollector(t, "c16_cardinality.jsonl", 4, func(c *Config) { c.Granularity = GranularityPartitionLag })
	fullSS, ss := gatherSeries(t, full), gatherSeries(t, c)
	got, n := groupSeries(ss, "g")
	if n != 11 || !maps.Equal(got, want) {
		t.Fatalf("%d series %v, want 11 %v", n, got, want)
	}
	for _, s := range ss {
		if strings.Contains(s.labels, `group="g"`) {
			if v := value(t, fullSS, s.name, s.labels); v != s.value {
				t.Errorf("%s{%s} = %v, granularity partition has %v", s.name, s.labels, s.value, v)
			}
		}
	}
	if countSeries(ss, "tidemark_partition_high_watermark_offset", "") == 0 {
		t.Error("partition_lag drops the partition offsets (per topic-partition, shared by every group)")
	}
}

// TestHandlerManyMembersEqualText: at 10,000 group-partitions every per-partition family is compressed as several
// gzip members (one per staged buffer). The gzip scrape decompresses, and the plain scrape reads, to AppendText's
// lines (the handler writes the two counter families last, after every gauge family, so the order of families
// differs), on a first rendering and on ones that reuse the buffers of the two before.
func TestHandlerManyMembersEqualText(t *testing.T) {
	cfg, snap := bigSnapshot(t, 500, 20)
	src := &seqSource{snap}
	c := NewCollector(cfg, src)
	h := NewHandler(c, nil)
	scrape := func(gz bool) []byte {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.Bytes()
		if !gz {
			return body
		}
		members := bytes.Count(body, []byte{0x1f, 0x8b, 8}) // a lower bound is enough: every member starts so
		if members < 20 {
			t.Fatalf("gzip scrape of %d bytes has %d members, want the large families split", len(body), members)
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	lines := func(b []byte) []string {
		l := strings.Split(string(b), "\n")
		slices.Sort(l)
		return l
	}
	want := c.AppendText(nil, snap, src.Health())
	if len(want) < 8*stageBytes {
		t.Fatalf("exposition of %d bytes is too small to split families", len(want))
	}
	for round := range 3 {
		gz := scrape(true) // renders src's next snapshot (same series, new sequence)
		if !slices.Equal(lines(gz), lines(want)) {
			t.Fatalf("round %d: gzip scrape (%d B) holds other lines than AppendText (%d B)", round, len(gz), len(want))
		}
		if plain := scrape(false); !bytes.Equal(plain, gz) {
			t.Fatalf("round %d: plain scrape (%d B) differs from the gzip one (%d B)", round, len(plain), len(gz))
		}
	}
}
