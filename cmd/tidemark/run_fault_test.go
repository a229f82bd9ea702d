package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// daemon is `tidemark run` started in the test process by startRun.
type daemon struct {
	base string // http://host:port of /metrics, /readyz
	stop func() error
}

// startRun runs `tidemark run` with the YAML config body (its http.listen is set here) until stop or the test's end.
func startRun(t *testing.T, body string) *daemon {
	t.Helper()
	httpAddr := testenv.FreeAddr(t)
	p := filepath.Join(t.TempDir(), "run.yaml")
	if err := os.WriteFile(p, []byte(body+fmt.Sprintf("http: {listen: %q}\n", httpAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{base: "http://" + httpAddr,
		stop: runInTest(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	waitStatus(t, d.base+"/healthz", http.StatusOK, 10*time.Second)
	return d
}

// runInTest runs `tidemark run` with cfg in the test process until stop, which cancels it (as SIGTERM does) and
// returns run's error; stop is idempotent and also runs at the test's end. A run that does not return within a
// minute of the stop fails the test (a hang guard: shutdown is bounded by drain_timeout and shutdown_timeout).
func runInTest(t *testing.T, cfg *runConfig, log *slog.Logger) (stop func() error) {
	t.Helper()
	return testenv.RunWithHangGuard(t, "run", time.Minute, func(ctx context.Context) error { return run(ctx, cfg, log) })
}

// stopChecked stops a runInTest run and fails the test if run returned an error.
func stopChecked(t *testing.T, stop func() error) {
	t.Helper()
	if err := stop(); err != nil {
		t.Errorf("run: %v", err)
	}
}

// produceReceipts writes receipt records to topic: each record holds perRecord receipts of one group made by mk
// (i is the receipt's index over all records), to partition i/perRecord % partitions.
func produceReceipts(t *testing.T, topic string, n, perRecord int, partitions int32, mk func(i int) instrument.Receipt) {
	t.Helper()
	pc := testenv.SaramaConfig(t)
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(testenv.Kafka(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var msgs []*sarama.ProducerMessage
	for first := 0; first < n; first += perRecord {
		rs := make([]instrument.Receipt, 0, perRecord)
		for i := first; i < min(first+perRecord, n); i++ {
			rs = append(rs, mk(i))
		}
		v, err := instrument.AppendReceiptBatch(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(first/perRecord) % partitions, Value: sarama.ByteEncoder(v)})
		if len(msgs) == 500 {
			if err := prod.SendMessages(msgs); err != nil {
				t.Fatal(err)
			}
			msgs = msgs[:0]
		}
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// plainReceipt is a receipt of group "app" on topic "orders" with only a processed stamp: it needs no metadata.
func plainReceipt(at time.Time) func(i int) instrument.Receipt {
	return func(i int) instrument.Receipt {
		return instrument.Receipt{Group: "app", Topic: "orders", Partition: int32(i % 3), Offset: int64(i / 3),
			ProcessedNs: at.Add(time.Duration(i) * time.Millisecond).UnixNano(), Host: "c1"}
	}
}

// TestReadyzSeesStalledClickHouse, on the real servers: under the default retry-forever policy
// a frozen ClickHouse (the proxy stops forwarding and keeps the connections open, as SIGSTOP does) and then a dead
// one (connections refused) never make the writer give up, and /readyz stayed 200 while rows piled up. Now /readyz
// turns 503 naming the stall once rows have waited clickhouse.writer.stall_timeout without an acknowledgement, and
// 200 again when ClickHouse answers; every receipt is stored once by key.
func TestReadyzSeesStalledClickHouse(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	px := testenv.NewProxy(t, testenv.ClickHouseAddr(t))
	receipts := testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: 3})
	d := startRun(t, fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse:
  addr: [%s]
  database: %s
  dial_timeout: 1s
  writer: {batch_rows: 200, flush_interval: 100ms, stall_timeout: 2s, insert_timeout: 5s, retry_max: 500ms}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  receipts: {enabled: true, topic: %s, group: %s, partitions: 3}
lag: {enabled: false}
`, strings.Join(brokers, ", "), px.Addr(), db, testenv.Name(t, "dlq"), testenv.Name(t, "rs"), receipts, testenv.Name(t, "g")))
	waitStatus(t, d.base+"/readyz", http.StatusOK, 60*time.Second)
	now := time.Now()
	const n = 3000
	produceReceipts(t, receipts, n/2, 50, 3, plainReceipt(now))
	final := "SELECT count() FROM latency_events FINAL"
	if got := waitRows(t, conn, final, n/2, 60*time.Second); got != n/2 {
		t.Fatalf("before the outage: %d rows, want %d", got, n/2)
	}
	for _, outage := range []struct {
		name       string
		start, end func()
	}{
		{"frozen", px.Pause, px.Resume},
		{"down", px.Down, px.Up},
	} {
		outage.start()
		// Rows arrive and wait in the writer: receipts keep coming while ClickHouse does not answer.
		produceReceipts(t, receipts, n/4, 50, 3, func(i int) instrument.Receipt {
			r := plainReceipt(now)(i + n/2)
			if outage.name == "down" {
				r = plainReceipt(now)(i + 3*n/4)
			}
			return r
		})
		body := waitStatus(t, d.base+"/readyz", http.StatusServiceUnavailable, 60*time.Second)
		if !strings.Contains(body, "ClickHouse has acknowledged nothing for") || !strings.Contains(body, "rows wait") {
			t.Fatalf("ClickHouse %s: /readyz says %q, want the stall and the rows waiting", outage.name, body)
		}
		t.Logf("ClickHouse %s: /readyz 503 %q", outage.name, strings.TrimSpace(body))
		// /metrics shows the same measure: rows have waited at least stall_timeout without an acknowledgement.
		if v := metricValue(t, d.scrape(t), "tidemark_store_writer_unacknowledged_seconds"); v < 2 {
			t.Fatalf("ClickHouse %s: /readyz 503 but tidemark_store_writer_unacknowledged_seconds %v, want >= 2 (stall_timeout)", outage.name, v)
		}
		outage.end()
		waitStatus(t, d.base+"/readyz", http.StatusOK, 60*time.Second)
	}
	if got := waitRows(t, conn, final, n, 90*time.Second); got != n {
		t.Fatalf("after both outages: %d rows, want %d", got, n)
	}
	if keys := queryCount(t, conn, "SELECT uniqExact(partition, offset) FROM latency_events FINAL"); keys != n {
		t.Fatalf("%d distinct keys, want %d", keys, n)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// scrape returns the /metrics exposition of d (text format): each non-comment line is one series.
func (d *daemon) scrape(t *testing.T) string {
	t.Helper()
	code, body := get(d.base + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	return body
}

// seriesOf counts the exposed series of the named families and their distinct (group, topic) label sets.
func seriesOf(body string, families ...string) (series int, pairs map[string]bool) {
	pairs = map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		for _, f := range families {
			if !strings.HasPrefix(line, f) {
				continue
			}
			series++
			if i, j := strings.Index(line, `group="`), strings.Index(line, `topic="`); i >= 0 && j >= 0 {
				g := line[i+7:]
				tp := line[j+7:]
				pairs[g[:strings.IndexByte(g, '"')]+"/"+tp[:strings.IndexByte(tp, '"')]] = true
			}
		}
	}
	return series, pairs
}

// metricValue returns the value of the series line that starts with name (name includes its labels, if any).
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name+" ")
		if !ok && strings.HasPrefix(line, name+`{cluster="`) && strings.Count(line, "=") == 1 {
			_, rest, ok = strings.Cut(line, "} ") // a collector family: its only label is the cluster
		}
		if ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v
		}
	}
	t.Fatalf("no series %s in /metrics", name)
	return 0
}

// TestReceiptsOfManyGroupsKeepSeriesBounded, on the real servers: receipts of 400 distinct
// consumer groups reach a running `tidemark run`. Unbounded, every (group, topic) would keep about 51 series
// forever (10k groups: 511k series, 60 MB scrapes); at most collector.max_live_series pairs have histograms (40 here),
// the other groups' live observations are counted as overflow while every receipt is still stored in ClickHouse,
// and after collector.idle_ttl without receipts the series and the engine's paths are gone. Its replay state topic
// is its own: with the default one it restores the paths other runs on the cluster checkpointed (3 more evicted).
func TestReceiptsOfManyGroupsKeepSeriesBounded(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	receipts := testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: 3})
	d := startRun(t, fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse:
  addr: [%s]
  database: %s
  writer: {batch_rows: 500, flush_interval: 100ms}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  receipts: {enabled: true, topic: %s, group: %s, partitions: 3}
  max_live_series: 40
  idle_ttl: 3s
lag: {enabled: false}
`, strings.Join(brokers, ", "), testenv.ClickHouseAddr(t), db, testenv.Name(t, "dlq"), testenv.Name(t, "rs"), receipts, testenv.Name(t, "g")))
	const groups, perGroup = 400, 4
	at := time.Now()
	// One record per group: 4 receipts of one source partition, produced and processed on the same host, so the
	// end-to-end latency (20 ms) needs no clock correction and every receipt is a live, trusted observation.
	produceReceipts(t, receipts, groups*perGroup, perGroup, 3, func(i int) instrument.Receipt {
		g := i / perGroup
		return instrument.Receipt{Group: fmt.Sprintf("app-%03d", g), Topic: "orders", Partition: 0, Offset: int64(i % perGroup),
			ProduceNs: at.UnixNano(), ProduceHost: "c1", ProcessedNs: at.Add(20 * time.Millisecond).UnixNano(), Host: "c1"}
	})
	if got := waitRows(t, conn, "SELECT count() FROM latency_events FINAL", groups*perGroup, 60*time.Second); got != groups*perGroup {
		t.Fatalf("%d rows stored, want %d: every receipt is stored whatever the series bound", got, groups*perGroup)
	}
	// a configuration without clusters: is the cluster "default", in every row and every collector series
	if got := waitRows(t, conn, "SELECT count() FROM latency_events FINAL WHERE cluster = 'default'", groups*perGroup, 10*time.Second); got != groups*perGroup {
		t.Fatalf("%d rows of cluster default, want all %d", got, groups*perGroup)
	}
	body := d.scrape(t)
	if !strings.Contains(body, `tidemark_collector_records_total{cluster="default",path="receipts"} `) {
		t.Error(`/metrics lacks tidemark_collector_records_total{cluster="default",path="receipts"}`)
	}
	series, pairs := seriesOf(body, "tidemark_e2e_latency_seconds", "tidemark_stage_latency_seconds")
	t.Logf("%d latency series for %d (group, topic) pairs; scrape %d bytes", series, len(pairs), len(body))
	if len(pairs) != 40 {
		t.Fatalf("%d (group, topic) pairs have latency series, want the bound 40", len(pairs))
	}
	if v := metricValue(t, body, "tidemark_collector_live_label_sets"); v != 40 {
		t.Fatalf("live label sets %v, want 40", v)
	}
	// Every receipt is one live observation: 40 pairs × 4 observed, the other 360 groups' 1440 counted as overflow.
	var observed float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "tidemark_e2e_latency_seconds_count") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			observed += v
		}
	}
	if overflow := metricValue(t, body, "tidemark_collector_live_overflow_total"); observed != 40*perGroup || overflow != (groups-40)*perGroup {
		t.Fatalf("observed %v, overflow %v; want %d and %d", observed, overflow, 40*perGroup, (groups-40)*perGroup)
	}
	// Idle for idle_ttl: the series and the engine's paths go (the housekeeping runs every second at this TTL).
	deadline := time.Now().Add(30 * time.Second)
	for {
		body = d.scrape(t)
		series, _ = seriesOf(body, "tidemark_e2e_latency_seconds", "tidemark_stage_latency_seconds")
		paths := metricValue(t, body, "tidemark_collector_engine_paths")
		if series == 0 && paths == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the last receipt: %d latency series, %v engine paths; want none after idle_ttl 3s", series, paths)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if v := metricValue(t, body, "tidemark_collector_live_evicted_total"); v != 40 {
		t.Fatalf("live pairs evicted %v, want 40", v)
	}
	if v := metricValue(t, body, "tidemark_collector_engine_paths_evicted_total"); v != groups {
		t.Fatalf("engine paths evicted %v, want %d", v, groups)
	}
}
