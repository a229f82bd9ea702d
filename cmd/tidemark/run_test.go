package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// runConfigEnv makes the test binary act as `tidemark run --config $value` (see TestMain), so a test can run the
// daemon as a real process and SIGKILL it.
const runConfigEnv = "TIDEMARK_TEST_RUN_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(runConfigEnv); path != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		cfg, err := loadConfig(path, nil, func() []string { return nil })
		if err == nil {
			err = run(ctx, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "run:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startDaemon(t *testing.T, cfgPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runConfigEnv+"="+cfgPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd
}

func queryCount(t *testing.T, conn driver.Conn, q string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n uint64
	if err := conn.QueryRow(ctx, q).Scan(&n); err != nil {
		if strings.Contains(err.Error(), "doesn't exist") { // the daemon has not migrated yet
			return 0
		}
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func waitRows(t *testing.T, conn driver.Conn, q string, want uint64, timeout time.Duration) uint64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := queryCount(t, conn, q)
		if n >= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestRunSIGKILLedLosesNothing kills `tidemark run` with SIGKILL mid-way through a receipts backlog and starts it
// again: offsets were committed only for rows ClickHouse had acknowledged, so nothing is lost, and what the killed
// process had written but not committed is read again and collapses by key.
func TestRunSIGKILLedLosesNothing(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	receipts := testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: 3})
	dlq := testenv.CreateTopic(t, "dlq", testenv.Topic{Partitions: 1})
	state := testenv.CreateTopic(t, "rs", testenv.Topic{Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"}})
	cfgPath := filepath.Join(t.TempDir(), "run.yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse:
  addr: [%s]
  database: %s
  writer: {batch_rows: 500, flush_interval: 100ms}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  max_batch: 4
  receipts: {enabled: true, topic: %s, group: %s, partitions: 3}
lag: {enabled: false}
http: {listen: "127.0.0.1:0"}
`, strings.Join(brokers, ", "), testenv.ClickHouseAddr(t), db, dlq, state, receipts, testenv.Name(t, "g"))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// The backlog: 60000 receipts of 3 source partitions, in records of 50 keyed by source partition the way the
	// instrumentation's emitter keys them (so each source partition's receipts stay in order), written before the
	// daemon starts.
	const n = 60000
	pc := testenv.SaramaConfig(t)
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(brokers, pc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var msgs []*sarama.ProducerMessage
	for p := int32(0); p < 3; p++ {
		for first := int64(0); first < n/3; first += 50 {
			rs := make([]instrument.Receipt, 50)
			for j := range rs {
				off := first + int64(j)
				rs[j] = instrument.Receipt{Group: "app", Topic: "orders", Partition: p, Offset: off,
					ProcessedNs: now.Add(time.Duration(off) * time.Millisecond).UnixNano(), Host: "c1"}
			}
			v, err := instrument.AppendReceiptBatch(nil, rs)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, &sarama.ProducerMessage{Topic: receipts, Partition: p, Value: sarama.ByteEncoder(v)})
		}
	}
	if err := prod.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	_ = prod.Close()

	raw := "SELECT count() FROM latency_events"
	first := startDaemon(t, cfgPath)
	if got := waitRows(t, conn, raw, 2000, 60*time.Second); got < 2000 {
		t.Fatalf("first run stored %d rows in 60s", got)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	atKill := queryCount(t, conn, raw)
	t.Logf("killed after %d rows", atKill)
	if atKill >= n {
		t.Fatalf("the first run stored all %d rows before it was killed: the test proves nothing", n)
	}

	second := startDaemon(t, cfgPath)
	final := "SELECT count() FROM latency_events FINAL"
	if got := waitRows(t, conn, final, n, 90*time.Second); got != n {
		t.Fatalf("after restart: %d rows, want %d", got, n)
	}
	if keys := queryCount(t, conn, "SELECT uniqExact(partition, offset) FROM latency_events FINAL"); keys != n {
		t.Fatalf("%d distinct keys, want %d", keys, n)
	}
	// A graceful stop exits 0 (consumers stop, the writer flushes, ClickHouse and HTTP close).
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("graceful stop: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("tidemark run did not stop within 60s of SIGTERM")
	}
	t.Logf("physical rows %d for %d keys (re-read rows collapse by key)", queryCount(t, conn, raw), n)
}

// TestRunSIGKILLedKeepsReplayClasses: restarts do not change history. A group processed its
// first pass over 3 partitions × 6000 records and committed the end; it is then reset to earliest (the commit
// falls to 0) and processes everything again. `tidemark run` is SIGKILLed in the middle of that replay and started
// again; the group's receipts topic is read again from its committed offsets. Every re-read receipt must keep its
// first classification: the first pass stays live (its rows keep their first processed times, no replay receipt
// replaces one as a second "live" processing of the same key), and every replay receipt is a replay, none live or
// redelivered, each stored once by key.
func TestRunSIGKILLedKeepsReplayClasses(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	const parts, perPart = 3, 6000
	const n = parts * perPart
	source := testenv.CreateTopic(t, "orders", testenv.Topic{Partitions: parts})
	receipts := testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: parts})
	dlq := testenv.CreateTopic(t, "dlq", testenv.Topic{Partitions: 1})
	state := testenv.CreateTopic(t, "rs", testenv.Topic{Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"}})
	group := testenv.Name(t, "app")
	cfgPath := filepath.Join(t.TempDir(), "run.yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse:
  addr: [%s]
  database: %s
  writer: {batch_rows: 500, flush_interval: 100ms}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  max_batch: 4
  receipts: {enabled: true, topic: %s, group: %s, partitions: %d}
lag:
  poll_interval: 300ms
  group_allow: [%s]
http: {listen: "127.0.0.1:0"}
`, strings.Join(brokers, ", "), testenv.ClickHouseAddr(t), db, dlq, state, receipts, testenv.Name(t, "g"), parts, group)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// The application's topic holds the records (so the lag exporter reads its end offsets and the group's
	// commits); the receipts say when each was processed: the first pass at t0 + offset µs, the replay 10 s
	// later, keyed by source partition as the instrumentation's emitter keys them.
	pc := testenv.SaramaConfig(t)
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(brokers, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*sarama.ProducerMessage
	for p := int32(0); p < parts; p++ {
		for i := 0; i < perPart; i++ {
			recs = append(recs, &sarama.ProducerMessage{Topic: source, Partition: p, Value: sarama.StringEncoder("order")})
		}
	}
	if err := prod.SendMessages(recs); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Millisecond)
	t1 := t0.Add(10 * time.Second)
	pass := func(at time.Time) {
		t.Helper()
		var msgs []*sarama.ProducerMessage
		for p := int32(0); p < parts; p++ {
			for first := int64(0); first < perPart; first += 50 {
				rs := make([]instrument.Receipt, 50)
				for j := range rs {
					off := first + int64(j)
					rs[j] = instrument.Receipt{Group: group, Topic: source, Partition: p, Offset: off,
						ProcessedNs: at.Add(time.Duration(off) * time.Microsecond).UnixNano(), Host: "c1"}
				}
				v, err := instrument.AppendReceiptBatch(nil, rs)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, &sarama.ProducerMessage{Topic: receipts, Partition: p, Value: sarama.ByteEncoder(v)})
			}
		}
		if err := prod.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(offset int64) {
		t.Helper()
		commits := map[int32]int64{}
		for p := int32(0); p < parts; p++ {
			commits[p] = offset
		}
		testenv.CommitOffsets(t, brokers, group, map[string]map[int32]int64{source: commits})
		adm := testenv.Admin(t)
		got, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{source: {0, 1, 2}})
		if err != nil {
			t.Fatal(err)
		}
		for p := int32(0); p < parts; p++ {
			if b := got.GetBlock(source, p); b == nil || b.Offset != offset {
				t.Fatalf("%s committed %+v on %s/%d, want %d", group, b, source, p, offset)
			}
		}
	}
	class := func(c string) string {
		return fmt.Sprintf("SELECT count() FROM latency_events FINAL WHERE topic = '%s' AND replay_class = '%s'", source, c)
	}
	// Snapshots of the group at a committed offset: the engine has then seen the commit too (it is fed from them).
	sawCommit := func(offset int64) {
		t.Helper()
		q := fmt.Sprintf("SELECT count() FROM lag_snapshots WHERE consumer_group = '%s' AND committed = %d", group, offset)
		if got := waitRows(t, conn, q, parts, 60*time.Second); got < parts {
			t.Fatalf("the lag exporter did not see %s commit %d on every partition within 60s", group, offset)
		}
	}

	pass(t0)
	first := startDaemon(t, cfgPath)
	if got := waitRows(t, conn, class("live"), n, 90*time.Second); got != n {
		t.Fatalf("first pass: %d live rows, want %d", got, n)
	}
	commit(perPart) // the first pass is committed...
	sawCommit(perPart)
	commit(0) // ...and the group reset to earliest
	sawCommit(0)
	pass(t1)
	if got := waitRows(t, conn, class("replay"), n/6, 90*time.Second); got < n/6 {
		t.Fatalf("the replay stored %d rows in 90s", got)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, _ = first.Process.Wait()
	atKill := queryCount(t, conn, class("replay"))
	t.Logf("killed after %d of %d replay rows", atKill, n)
	if atKill >= n {
		t.Fatalf("the first run stored the whole replay before it was killed: the test proves nothing")
	}

	second := startDaemon(t, cfgPath)
	if got := waitRows(t, conn, class("replay"), n, 120*time.Second); got != n {
		rows, err := conn.Query(context.Background(), fmt.Sprintf("SELECT partition, toString(replay_class), count(), min(offset), max(offset) FROM latency_events FINAL WHERE topic = '%s' GROUP BY partition, replay_class ORDER BY partition, replay_class", source))
		if err == nil {
			for rows.Next() {
				var p int32
				var c string
				var k uint64
				var lo, hi int64
				_ = rows.Scan(&p, &c, &k, &lo, &hi)
				t.Logf("partition %d %s: %d rows, offsets %d..%d", p, c, k, lo, hi)
			}
		}
		t.Fatalf("after the restart: %d replay rows, want %d", got, n)
	}
	if got := queryCount(t, conn, class("live")); got != n {
		t.Errorf("%d live rows, want %d (one per first processing)", got, n)
	}
	for _, c := range []string{"redelivery", "backfill", "unknown"} {
		if got := queryCount(t, conn, class(c)); got != 0 {
			t.Errorf("%d %s rows, want 0", got, c)
		}
	}
	// No live row was overwritten by a replay receipt taken for a first processing: every live row still has its
	// first-pass processed time, every replay row its own.
	if got := queryCount(t, conn, fmt.Sprintf("SELECT count() FROM latency_events FINAL WHERE topic = '%s' AND "+
		"(replay_class = 'live' AND processed_ts_ms >= %d OR replay_class = 'replay' AND processed_ts_ms < %d)", source,
		t1.UnixMilli(), t1.UnixMilli())); got != 0 {
		t.Errorf("%d rows whose class and processing time disagree", got)
	}
	if got := queryCount(t, conn, fmt.Sprintf("SELECT uniqExact(partition, offset, replay_class) FROM latency_events WHERE topic = '%s'", source)); got != 2*n {
		t.Errorf("%d distinct keys, want %d", got, 2*n)
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_, _ = second.Process.Wait()
}
