package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
)

// examplesDir holds the configurations the README starts from.
const examplesDir = "../../examples"

// loadExample loads examples/<name> with the real loader, as a user's `tidemark run --config` does (no environment),
// and fails on any deprecation warning: an example shows the current spellings.
func loadExample(t *testing.T, name string) *runConfig {
	t.Helper()
	cfg, err := loadConfig(filepath.Join(examplesDir, name), nil, noEnv)
	if err != nil {
		t.Fatalf("examples/%s: %v", name, err)
	}
	if len(cfg.warnings) > 0 {
		t.Errorf("examples/%s warns: %q", name, cfg.warnings)
	}
	return cfg
}

// adaptExample writes a copy of examples/<name> with the values at the given paths replaced (dotted, list entries by
// index: "clusters.1.lag.election.group") and loads it with the real loader: the stack's addresses and names unique
// to the test run in place of the example's.
func adaptExample(t *testing.T, name string, set map[string]any) *runConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examplesDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	for path, v := range set {
		var cur any = doc
		keys := strings.Split(path, ".")
		for i, k := range keys {
			last := i == len(keys)-1
			switch c := cur.(type) {
			case map[string]any:
				if last {
					c[k] = v
				} else if c[k] == nil {
					c[k] = map[string]any{}
				}
				cur = c[k]
			case []any:
				n, err := strconv.Atoi(k)
				if err != nil || n >= len(c) {
					t.Fatalf("%s: no entry %s", path, k)
				}
				if last {
					c[n] = v
				}
				cur = c[n]
			default:
				t.Fatalf("%s: %s is not a block", path, k)
			}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, out, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatalf("examples/%s adapted to the stack: %v\n%s", name, err, out)
	}
	return cfg
}

// logRecorder is a slog handler that keeps every line (text format) for the test to read.
type logRecorder struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	os.Stderr.Write(p) // the test's output keeps the daemon's log
	return l.buf.Write(p)
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// problems returns the WARN and ERROR lines logged so far.
func (l *logRecorder) problems() []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}

// startExampleRun runs cfg in the test's process until the test ends, logging at info into the returned recorder.
func startExampleRun(t *testing.T, cfg *runConfig) *logRecorder {
	t.Helper()
	rec := &logRecorder{}
	stop := runInTest(t, cfg, slog.New(slog.NewTextHandler(rec, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { stopChecked(t, stop) })
	return rec
}

// waitLag waits until base's /metrics serves want as the lag of group on topic's partitions, labelled cluster, and
// returns the body.
func waitLag(t *testing.T, base, cluster, topic, group string, want map[int32]int64, timeout time.Duration) string {
	t.Helper()
	var body string
	testenv.Eventually(t, timeout, func() error {
		_, body = get(base + "/metrics")
		for p, lag := range want {
			if !strings.Contains(body, fmt.Sprintf("tidemark_lag_partition_offsets{cluster=%q,group=%q,partition=\"%d\",topic=%q} %d\n",
				cluster, group, p, topic, lag)) {
				return fmt.Errorf("%s/metrics does not serve %s's lag %v on %s (cluster %s)", base, group, want, topic, cluster)
			}
		}
		return nil
	})
	return body
}

// seedExampleLag creates a topic of two partitions with 10 records each and a group whose commits leave lag 7 and
// 0, deleted when the test ends.
func seedExampleLag(t *testing.T, brokers []string) (topic, group string, want map[int32]int64) {
	t.Helper()
	topic, group = testenv.Name(t, "orders"), testenv.Name(t, "billing")
	seedLag(t, brokers, topic, group, 10, map[int32]int64{0: 3, 1: 10})
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			_ = adm.DeleteGroup(group)
			_ = adm.DeleteTopic(topic)
			_ = adm.Close()
		}
	})
	return topic, group, map[int32]int64{0: 7, 1: 0}
}

// TestExampleLagExporter: examples/lag-exporter.yaml sets the one key a lag exporter needs; on the stack it becomes
// ready, serves a group's exact lag, says at start what it runs (no ClickHouse, and no ClickHouse address), and logs
// no warning.
func TestExampleLagExporter(t *testing.T) {
	orig := loadExample(t, "lag-exporter.yaml")
	if orig.clickHouse || !*orig.Lag.Enabled || len(orig.Kafka.Brokers) != 1 {
		t.Fatalf("examples/lag-exporter.yaml: clickhouse %v, lag %v, brokers %v: want a lag exporter alone", orig.clickHouse, *orig.Lag.Enabled, orig.Kafka.Brokers)
	}
	brokers := testenv.Kafka(t)
	topic, group, want := seedExampleLag(t, brokers)
	httpAddr := testenv.FreeAddr(t)
	cfg := adaptExample(t, "lag-exporter.yaml", map[string]any{"kafka.brokers": brokers, "http.listen": httpAddr,
		"lag.poll_interval": "1s", "lag.group_allow": []string{group}})
	rec := startExampleRun(t, cfg)
	base := "http://" + httpAddr
	ready := waitStatus(t, base+"/readyz", http.StatusOK, 60*time.Second)
	waitLag(t, base, "default", topic, group, want, 30*time.Second)
	wantRuns := fmt.Sprintf("cluster default (kafka %s): lag exporter; no ClickHouse (nothing stored); tracing off; http %s",
		strings.Join(brokers, ","), httpAddr)
	if !strings.Contains(ready, "runs: "+wantRuns+"\n") {
		t.Errorf("/readyz %q lacks %q", ready, wantRuns)
	}
	log := rec.String()
	if !strings.Contains(log, `msg="tidemark running" runs="`+wantRuns+`"`) {
		t.Errorf("no start-up line saying %q in the log:\n%s", wantRuns, log)
	}
	if strings.Contains(log, "9000") || strings.Contains(strings.ToLower(log), "clickhouse=") {
		t.Errorf("a lag exporter alone logs a ClickHouse address:\n%s", log)
	}
	if p := rec.problems(); len(p) > 0 {
		t.Errorf("a first start on a healthy cluster logged %d warnings or errors:\n%s", len(p), strings.Join(p, "\n"))
	}
}

// TestExampleCollector: examples/collector.yaml (ClickHouse and the probe path) on the stack, its topics and
// database new: the first start creates them, becomes ready, stores probe rows, serves lag, says what it runs and
// logs no warning (a replay-state topic just created is no reason to retry).
func TestExampleCollector(t *testing.T) {
	orig := loadExample(t, "collector.yaml")
	if !orig.clickHouse || !orig.Collector.Probe.Enabled || orig.Collector.Receipts.Enabled || orig.Collector.Tap.Enabled {
		t.Fatalf("examples/collector.yaml: want ClickHouse and the probe path alone, got %+v", orig.Collector)
	}
	brokers := testenv.Kafka(t)
	topic, group, want := seedExampleLag(t, brokers)
	db, conn := testenv.ClickHouseDB(t)
	httpAddr := testenv.FreeAddr(t)
	probe := testenv.Name(t, "probe")
	cfg := adaptExample(t, "collector.yaml", map[string]any{
		"kafka.brokers": brokers, "clickhouse.addr": []string{testenv.ClickHouseAddr(t)}, "clickhouse.database": db,
		"http.listen": httpAddr, "lag.poll_interval": "1s", "lag.group_allow": []string{group},
		// names unique to the run, so that each start is a first start
		"collector.probe.topic": probe, "collector.probe.group": testenv.Name(t, "probe-g"),
		"collector.dead_letter_topic": testenv.Name(t, "dlq"), "collector.replay_state_topic": testenv.Name(t, "state"),
	})
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			for _, tp := range []string{probe, cfg.Collector.DeadLetterTopic, cfg.Collector.ReplayStateTopic} {
				_ = adm.DeleteTopic(tp)
			}
			_ = adm.Close()
		}
	})
	rec := startExampleRun(t, cfg)
	base := "http://" + httpAddr
	ready := waitStatus(t, base+"/readyz", http.StatusOK, 90*time.Second)
	waitLag(t, base, "default", topic, group, want, 30*time.Second)
	waitRows(t, conn, "SELECT count() FROM probe_events", 1, 60*time.Second)
	wantRuns := fmt.Sprintf("cluster default (kafka %s): lag exporter, collector paths probe; writing to ClickHouse %s, database %s; tracing off; http %s",
		strings.Join(brokers, ","), testenv.ClickHouseAddr(t), db, httpAddr)
	if !strings.Contains(ready, "runs: "+wantRuns+"\n") {
		t.Errorf("/readyz %q lacks %q", ready, wantRuns)
	}
	if log := rec.String(); !strings.Contains(log, `msg="tidemark running" runs="`+wantRuns+`"`) {
		t.Errorf("no start-up line saying %q in the log:\n%s", wantRuns, log)
	}
	if p := rec.problems(); len(p) > 0 {
		t.Errorf("a first start on a healthy cluster logged %d warnings or errors:\n%s", len(p), strings.Join(p, "\n"))
	}
}

// TestExampleClusters: examples/clusters.yaml's two clusters (both on the stack's Kafka here, told apart by name) run
// as two replicas: both become ready, and each cluster's lag is served by exactly one of them (lag.election), with
// the group's exact lag under the cluster's name.
func TestExampleClusters(t *testing.T) {
	orig := loadExample(t, "clusters.yaml")
	if len(orig.Clusters) != 2 || orig.clickHouse {
		t.Fatalf("examples/clusters.yaml: %d clusters, clickhouse %v", len(orig.Clusters), orig.clickHouse)
	}
	brokers := testenv.Kafka(t)
	topic, group, want := seedExampleLag(t, brokers)
	lease := testenv.Name(t, "lease")
	elect := map[string]string{} // one lease group per cluster, the same on both replicas
	for _, cl := range orig.Clusters {
		elect[cl.Name] = testenv.Name(t, "elect-"+cl.Name)
	}
	set := func(httpAddr string) map[string]any {
		m := map[string]any{"http.listen": httpAddr}
		for i, cl := range orig.Clusters {
			at := fmt.Sprintf("clusters.%d.", i)
			m[at+"kafka.brokers"] = brokers
			m[at+"lag.poll_interval"] = "1s"
			m[at+"lag.group_allow"] = []string{group}
			m[at+"lag.election.group"] = elect[cl.Name]
			m[at+"lag.election.topic"] = lease
		}
		return m
	}
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			_ = adm.DeleteTopic(lease)
			_ = adm.Close()
		}
	})
	var bases []string
	var recs []*logRecorder
	for range 2 {
		httpAddr := testenv.FreeAddr(t)
		recs = append(recs, startExampleRun(t, adaptExample(t, "clusters.yaml", set(httpAddr))))
		bases = append(bases, "http://"+httpAddr)
	}
	for _, base := range bases {
		body := waitStatus(t, base+"/readyz", http.StatusOK, 90*time.Second)
		for _, cl := range orig.Clusters {
			if !strings.Contains(body, "cluster "+cl.Name+" (kafka ") {
				t.Errorf("%s/readyz does not say what runs for cluster %s: %q", base, cl.Name, body)
			}
		}
	}
	series := func(body, cluster string) bool {
		return strings.Contains(body, fmt.Sprintf("tidemark_lag_partition_offsets{cluster=%q,group=%q", cluster, group))
	}
	for _, cl := range orig.Clusters {
		// The lease holder serves the cluster's lag; wait until one does, then the other must not.
		var holder int
		testenv.Eventually(t, 90*time.Second, func() error {
			holder = -1
			for i, base := range bases {
				if _, body := get(base + "/metrics"); series(body, cl.Name) {
					holder = i
				}
			}
			if holder < 0 {
				return fmt.Errorf("no replica serves cluster %s's lag", cl.Name)
			}
			return nil
		})
		waitLag(t, bases[holder], cl.Name, topic, group, want, 30*time.Second)
		if _, body := get(bases[1-holder] + "/metrics"); series(body, cl.Name) {
			t.Errorf("both replicas serve cluster %s's lag: the election did not choose one", cl.Name)
		}
	}
	for i, rec := range recs {
		if p := rec.problems(); len(p) > 0 {
			t.Errorf("replica %d logged %d warnings or errors on a healthy cluster:\n%s", i, len(p), strings.Join(p, "\n"))
		}
	}
}

// TestFirstStartLogsNoWarning: examples/collector.yaml with the receipts path added, on the stack with every topic
// and the database new, is a first start that creates the replay-state topic and reads it at once: it becomes ready
// and logs no WARN or ERROR line (no "collector cannot reach Kafka; retrying … read replay state: … topic or partition
// that does not exist").
func TestFirstStartLogsNoWarning(t *testing.T) {
	loadExample(t, "collector.yaml")
	brokers := testenv.Kafka(t)
	db, _ := testenv.ClickHouseDB(t)
	httpAddr := testenv.FreeAddr(t)
	topics := map[string]string{}
	for _, key := range []string{"collector.probe.topic", "collector.receipts.topic", "collector.dead_letter_topic", "collector.replay_state_topic"} {
		topics[key] = testenv.Name(t, "first")
	}
	set := map[string]any{
		"kafka.brokers": brokers, "clickhouse.addr": []string{testenv.ClickHouseAddr(t)}, "clickhouse.database": db,
		"http.listen": httpAddr, "lag.group_allow": []string{testenv.Name(t, "none")},
		"collector.probe.group": testenv.Name(t, "probe-g"), "collector.receipts.enabled": true,
		"collector.receipts.group": testenv.Name(t, "receipts-g"), "collector.receipts.partitions": 2,
	}
	for k, v := range topics {
		set[k] = v
	}
	cfg := adaptExample(t, "collector.yaml", set)
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			for _, tp := range topics {
				_ = adm.DeleteTopic(tp)
			}
			_ = adm.Close()
		}
	})
	rec := startExampleRun(t, cfg)
	waitStatus(t, "http://"+httpAddr+"/readyz", http.StatusOK, 90*time.Second)
	if log := rec.String(); !strings.Contains(log, "collector paths probe, receipts;") {
		t.Errorf("the start-up line does not name both paths:\n%s", log)
	}
	if p := rec.problems(); len(p) > 0 {
		t.Errorf("a first start on a healthy cluster logged %d warnings or errors:\n%s", len(p), strings.Join(p, "\n"))
	}
}
