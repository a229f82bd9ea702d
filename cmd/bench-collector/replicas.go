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
// the processes), read from their /metrics every 100 ms; the stored rows are then checked in ClickHouse by key.
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

// replicaPhases measures 1 process, then n, on topic, with the binary bin built in dir.
func replicaPhases(ctx context.Context, st *store.Store, bin, dir string, brokers []string, chAddr, topic string, receipts, n, batchRows int,
	quiesce func()) (*replicaResult, error) {
	res := &replicaResult{N: n}
	for _, k := range []int{1, n} {
		if err := truncate(ctx, st); err != nil {
			return nil, err
		}
		quiesce()
		fmt.Fprintf(os.Stderr, "%d × tidemark run...\n", k)
		ph, err := replicaPhase(ctx, st, bin, dir, brokers, chAddr, topic, receipts, k, batchRows, "rep")
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
	rowsPerS, startup float64
	// The processes' CPU (µs), heap bytes and heap objects allocated per receipt, from the last scrape before the
	// first consumed record to the end of the phase (their /metrics).
	cpuUsPerReceipt, allocBytesPerReceipt, allocsPerReceipt float64
	rss                                                     []float64
	redelivered, storedKeys                                 int
}

// userConfig is the configuration a user writes to run the receipts path: the memory budget
// (memory_limit_mb, which sizes the writer), the addresses of Kafka, ClickHouse and the HTTP endpoint, and the
// paths (receipts on with its topic and group and the names of its dead-letter and replay-state topics; probe and
// lag exporter off, as they are not measured). Nothing else: every writer, batch and GC setting is the shipped
// default for that budget. k replicas share the file but for the HTTP port.
func userConfig(brokers []string, chAddr, db, topic, group string, port int) string {
	return fmt.Sprintf(`memory_limit_mb: %d
kafka:
  brokers: [%s]
clickhouse:
  addr: [%s]
  database: %s
collector:
  dead_letter_topic: %s-dlq
  replay_state_topic: %s-state
  receipts:
    enabled: true
    topic: %s
    group: %s
  probe:
    enabled: false
lag:
  enabled: false
http:
  listen: 127.0.0.1:%d
log:
  level: warn
`, memoryLimitMB, strings.Join(brokers, ", "), chAddr, db, group, group, topic, group, port)
}

// replicaPhase runs k `tidemark run` processes with userConfig on a fresh receipts group (named for tag and k) until
// ClickHouse acknowledged receipts rows, and stops them. Throughput is measured by throughput (clock.go) from the
// processes' summed /metrics; batchRows is their writer's batch_rows.
func replicaPhase(ctx context.Context, st *store.Store, bin, dir string, brokers []string, chAddr, topic string,
	receipts, k, batchRows int, tag string) (ph phaseResult, err error) {
	group := "bench-" + tag + strconv.Itoa(k) + "-" + topic
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
		cfg := filepath.Join(dir, fmt.Sprintf("%s-%d-of-%d.yaml", group, i, k))
		if err := os.WriteFile(cfg, []byte(userConfig(brokers, chAddr, st.Config().Database, topic, group, port)), 0o644); err != nil {
			return ph, err
		}
		p, err := benchproc.Start(fmt.Sprintf("tidemark run %d/%d", i+1, k), filepath.Join(dir, fmt.Sprintf("%s-%d-of-%d.log", group, i, k)),
			nil, bin, "run", "--config", cfg)
		if err != nil {
			return ph, err
		}
		procs = append(procs, proc{p, "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"})
	}
	// costs are the processes' summed CPU seconds, heap bytes and heap objects allocated (process_cpu_seconds_total,
	// go_memstats_alloc_bytes_total, go_memstats_mallocs_total): at the last scrape before any record was consumed
	// (base) and at the last one (end).
	var base, end [3]float64
	progress := func() (consumed, acked float64, err error) {
		var costs [3]float64
		for _, p := range procs {
			if p.p.Exited() {
				return 0, 0, fmt.Errorf("%s exited: %v\n%s", p.p.Name, p.p.Wait(0), p.p.Tail(20))
			}
			f, err := benchproc.Scrape(ctx, p.url)
			if err != nil {
				continue // not listening yet: nothing consumed
			}
			c, _ := f.Value("tidemark_collector_records_total", map[string]string{"path": "receipts"})
			a, _ := f.Value("tidemark_collector_rows_acked_total", map[string]string{"path": "receipts"})
			consumed, acked = consumed+c, acked+a
			for i, name := range []string{"process_cpu_seconds_total", "go_memstats_alloc_bytes_total", "go_memstats_mallocs_total"} {
				v, _ := f.Value(name, nil)
				costs[i] += v
			}
		}
		if consumed == 0 {
			base = costs
		}
		end = costs
		return consumed, acked, nil
	}
	samples, err := poll(ctx, receipts, 5*time.Minute, progress)
	if err != nil {
		return ph, fmt.Errorf("%d × tidemark run: %w", k, err)
	}
	rate, first, ok := throughput(samples, receipts, batchRows)
	if !ok {
		return ph, fmt.Errorf("%d × tidemark run: no throughput from %d samples", k, len(samples))
	}
	ph.rowsPerS, ph.startup = rate, first.Sub(start).Seconds()
	ph.redelivered = int(samples[len(samples)-1].acked) - receipts
	ph.cpuUsPerReceipt = (end[0] - base[0]) * 1e6 / float64(receipts)
	ph.allocBytesPerReceipt = (end[1] - base[1]) / float64(receipts)
	ph.allocsPerReceipt = (end[2] - base[2]) / float64(receipts)
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
