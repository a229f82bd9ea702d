package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/store"
)

// replicaResult is the -replicas measurement: the shipped `tidemark run`, one process, then N sharing one receipts
// group, on the same receipts topic (each phase a fresh group, from the oldest offset, latency_events truncated
// before it). Throughput is n / (first consumed record of any process → ClickHouse acknowledged n rows, summed over
// the processes), read from their /metrics every 50 ms; the stored rows are then checked in ClickHouse by key.
type replicaResult struct {
	N           int     `json:"n"`
	OneRowsPerS float64 `json:"one_rows_per_s"`
	NRowsPerS   float64 `json:"n_rows_per_s"`
	// NVsOne = NRowsPerS / OneRowsPerS: on 2 cores no gain is expected; the figure shows what the second process
	// and the shared group cost.
	NVsOne float64 `json:"n_vs_one"`
	// OneRSSMB is the single process's peak RSS (VmHWM); NRSSMB each of the N processes'.
	OneRSSMB float64   `json:"one_rss_mb"`
	NRSSMB   []float64 `json:"n_rss_mb"`
	// Startup: process start → first consumed record (connections, topic checks, group join).
	OneStartupS float64 `json:"one_startup_s"`
	NStartupS   float64 `json:"n_startup_s"`
	// Redelivered: rows acknowledged beyond n (a rebalance re-reads what was not committed yet; the idempotent key
	// stores it once). StoredKeys: distinct (partition, offset) in latency_events after the phase, which must be n.
	OneRedelivered int `json:"one_redelivered"`
	NRedelivered   int `json:"n_redelivered"`
	OneStoredKeys  int `json:"one_stored_keys"`
	NStoredKeys    int `json:"n_stored_keys"`
}

// replicaPhases builds the binary and measures 1 process, then n, on topic.
func replicaPhases(ctx context.Context, st *store.Store, brokers []string, chAddr, topic string, receipts, n int,
	quiesce func()) (*replicaResult, error) {
	dir, err := os.MkdirTemp("", "bench-collector-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building tidemark...")
	bins, err := benchproc.Build(ctx, dir, "./cmd/tidemark")
	if err != nil {
		return nil, err
	}
	res := &replicaResult{N: n}
	for _, k := range []int{1, n} {
		if err := st.Conn().Exec(ctx, "TRUNCATE TABLE latency_events"); err != nil {
			return nil, fmt.Errorf("truncate before %d replicas: %w", k, err)
		}
		quiesce()
		fmt.Fprintf(os.Stderr, "%d × tidemark run...\n", k)
		ph, err := replicaPhase(ctx, st, bins[0], dir, brokers, chAddr, topic, receipts, k)
		if err != nil {
			return nil, err
		}
		if k == 1 {
			res.OneRowsPerS, res.OneRSSMB, res.OneStartupS = ph.rowsPerS, ph.rss[0], ph.startup
			res.OneRedelivered, res.OneStoredKeys = ph.redelivered, ph.storedKeys
		} else {
			res.NRowsPerS, res.NRSSMB, res.NStartupS = ph.rowsPerS, ph.rss, ph.startup
			res.NRedelivered, res.NStoredKeys = ph.redelivered, ph.storedKeys
		}
	}
	res.NVsOne = res.NRowsPerS / res.OneRowsPerS
	return res, nil
}

type phaseResult struct {
	rowsPerS, startup       float64
	rss                     []float64
	redelivered, storedKeys int
}

// replicaConfig is what a user running k replicas for the receipts path writes: the same file for each, but the
// HTTP port. The writer is the one the in-process pipeline runs (writerConfig) with a 200 ms flush interval, so
// the last partial batch of the finite input waits little, and the same memory budget.
func replicaConfig(brokers []string, chAddr, db, topic, group string, port int) string {
	return fmt.Sprintf(`kafka:
  brokers: [%s]
clickhouse:
  addr: [%s]
  database: %s
  writer:
    batch_rows: %d
    max_rows: %d
    flush_interval: 200ms
migrate: false
memory_limit_mb: %d
lag_enabled: false
collector:
  dead_letter_topic: %s-dlq
  replay_state_topic: %s-state
  max_batch: 10
  receipts:
    enabled: true
    topic: %s
    group: %s
  probe:
    enabled: false
http:
  listen: 127.0.0.1:%d
log:
  level: warn
`, strings.Join(brokers, ", "), chAddr, db, writerConfig.BatchRows, writerConfig.MaxRows, memoryLimitMB, group, group,
		topic, group, port)
}

func replicaPhase(ctx context.Context, st *store.Store, bin, dir string, brokers []string, chAddr, topic string,
	receipts, k int) (ph phaseResult, err error) {
	group := "bench-rep" + strconv.Itoa(k) + "-" + topic
	defer func() {
		if adm, err := sarama.NewClusterAdmin(brokers, saramaConfig()); err == nil {
			_ = adm.DeleteTopic(group + "-dlq")
			_ = adm.DeleteTopic(group + "-state")
			_ = adm.Close()
		}
	}()
	type proc struct {
		p   *benchproc.Proc
		url string
	}
	var procs []proc
	defer func() {
		for _, p := range procs {
			_ = p.p.Stop(20 * time.Second)
		}
	}()
	start := time.Now()
	for i := 0; i < k; i++ {
		port, err := benchproc.FreePort()
		if err != nil {
			return ph, err
		}
		cfg := filepath.Join(dir, fmt.Sprintf("replica-%d-of-%d.yaml", i, k))
		if err := os.WriteFile(cfg, []byte(replicaConfig(brokers, chAddr, st.Config().Database, topic, group, port)), 0o644); err != nil {
			return ph, err
		}
		p, err := benchproc.Start(fmt.Sprintf("tidemark run %d/%d", i+1, k), filepath.Join(dir, fmt.Sprintf("replica-%d-of-%d.log", i, k)),
			nil, bin, "run", "--config", cfg)
		if err != nil {
			return ph, err
		}
		procs = append(procs, proc{p, "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"})
	}
	sum := func(name string) (float64, error) {
		var total float64
		for _, p := range procs {
			if p.p.Exited() {
				return 0, fmt.Errorf("%s exited: %v\n%s", p.p.Name, p.p.Wait(0), p.p.Tail(20))
			}
			f, err := benchproc.Scrape(ctx, p.url)
			if err != nil {
				return 0, nil // not listening yet: nothing consumed
			}
			v, _ := f.Value(name, map[string]string{"path": "receipts"})
			total += v
		}
		return total, nil
	}
	var first time.Time
	deadline := time.Now().Add(5 * time.Minute)
	var acked float64
	for acked < float64(receipts) {
		if time.Now().After(deadline) {
			return ph, fmt.Errorf("%d replicas acknowledged %.0f of %d rows in 5 minutes", k, acked, receipts)
		}
		if first.IsZero() {
			c, err := sum("tidemark_collector_records_total")
			if err != nil {
				return ph, err
			}
			if c > 0 {
				first = time.Now()
			}
		}
		if acked, err = sum("tidemark_collector_rows_acked_total"); err != nil {
			return ph, err
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(first).Seconds()
	ph.rowsPerS, ph.startup = float64(receipts)/elapsed, first.Sub(start).Seconds()
	ph.redelivered = int(acked) - receipts
	for _, p := range procs {
		v, err := benchproc.StatusMB(p.p.Pid(), "VmHWM")
		if err != nil {
			return ph, err
		}
		ph.rss = append(ph.rss, v)
	}
	var keys uint64
	if err := st.Conn().QueryRow(ctx, "SELECT uniqExact(partition, offset) FROM latency_events WHERE consumer_group = 'bench-app'").Scan(&keys); err != nil {
		return ph, fmt.Errorf("count stored keys: %w", err)
	}
	ph.storedKeys = int(keys)
	fmt.Fprintf(os.Stderr, "%d replicas: %.0f rows/s, startup %.2fs, peak RSS %v MB, %d redelivered, %d keys stored\n",
		k, ph.rowsPerS, ph.startup, ph.rss, ph.redelivered, ph.storedKeys)
	return ph, nil
}
