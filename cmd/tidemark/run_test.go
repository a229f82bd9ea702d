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
lag_enabled: false
http: {listen: "127.0.0.1:0"}
`, strings.Join(brokers, ", "), testenv.ClickHouseAddr(t), db, dlq, testenv.Name(t, "rs"), receipts, testenv.Name(t, "g"))
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
