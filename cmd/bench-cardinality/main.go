// Command bench-cardinality measures what a flood of consumer-group names costs `tidemark run`.
// It builds the tidemark binary and runs it twice with the same user's config (memory_limit_mb 250, every bound at
// its default) on the same number of receipts: once of a few groups (the baseline), once of many (the attack). Each
// run gets a fresh receipts topic and database; the receipts are produced at -rate receipts/s while the binary runs,
// as an application fleet sends them (-rate 0: all of them before it starts, a backlog drained at full speed).
//
// -mode hosts measures a flood of host names instead (pod churn, or a hostile writer): the baseline's receipts all
// name one host, the attack's a new consumer and producer host per receipt, each with a reported clock offset (what
// the instrumentation sends), on -baseline-groups groups; -receipts of each (default 50,000).
//
// For each run it reports the binary's peak RSS (VmHWM of the process) against memory_limit_mb, and fails when it
// cannot be read; the /metrics scrape's series and bytes once every receipt is stored (counted as distinct keys in
// ClickHouse, so a row stored twice does not count twice), with the live label sets, overflow and engine paths the
// binary reports; the ingest rate (receipts over the time from the first produced to the last stored) and how far
// the last receipt was stored behind its production; then the attack-to-baseline ratios. Without bounds on
// the live series, 10k groups give 511k series, 60 MB scrapes and 590 MB RSS against memory_limit_mb 250, and ingest
// falls from 3k to 500 receipts/s; -bin measures another build on the same workload.
//
//	make bench-cardinality                               # starts the stack if needed; the last line is the JSON result
//	go run ./cmd/bench-cardinality -groups 10000 -rate 0  # with TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR set
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/latency/instrument"
)

// workload is what one run's receipts name: groups groups, and a new host per receipt when hostChurn.
type workload struct {
	groups    int
	hostChurn bool
}

const (
	memoryLimitMB = 250
	partitions    = 6 // of the receipts topic
	perRecord     = 4 // receipts per Kafka record, all of one group
)

type runResult struct {
	Groups int `json:"groups"`
	// Hosts is the number of distinct host names the receipts carry.
	Hosts    int `json:"hosts"`
	Receipts int `json:"receipts"`
	// Keys is the distinct (group, topic, partition, offset) keys stored: the run completes when it reaches Receipts.
	Keys          uint64  `json:"keys_stored"`
	PeakRSSMB     float64 `json:"peak_rss_mb"`
	UnderLimit    bool    `json:"rss_under_limit"`
	Series        int     `json:"series"`
	ScrapeBytes   int     `json:"scrape_bytes"`
	LiveLabelSets float64 `json:"live_label_sets"`
	LiveOverflow  float64 `json:"live_overflow_total"`
	EnginePaths   float64 `json:"engine_paths"`
	EngineHosts   float64 `json:"engine_hosts"`
	HostsEvicted  float64 `json:"engine_hosts_evicted_total"`
	// Seconds is from the first receipt produced (-rate 0: the first row stored) to the last row stored.
	Seconds      float64 `json:"seconds"`
	ReceiptsPerS float64 `json:"receipts_per_s"`
	// BehindSeconds is from the last receipt produced to its row stored (-rate > 0): how far ingest fell behind.
	BehindSeconds float64 `json:"behind_seconds,omitempty"`
	// InsertSeconds is the time the writer spent in ClickHouse inserts of latency_events (materialized views
	// included): the part of the run that is ClickHouse's.
	InsertSeconds float64 `json:"insert_seconds"`
}

type result struct {
	Mode          string    `json:"mode"`
	MemoryLimitMB int       `json:"memory_limit_mb"`
	Rate          int       `json:"rate"`
	Baseline      runResult `json:"baseline"`
	Attack        runResult `json:"attack"`
	RSSRatio      float64   `json:"rss_ratio"`
	SeriesRatio   float64   `json:"series_ratio"`
	RateRatio     float64   `json:"rate_ratio"`
	*benchproc.Provenance
}

func main() {
	groups := flag.Int("groups", 10000, "consumer groups named in the attack's receipts")
	baseGroups := flag.Int("baseline-groups", 10, "consumer groups of the baseline run")
	perGroup := flag.Int("per-group", 12, "receipts per group in the attack (the baseline gets as many receipts in all)")
	rate := flag.Int("rate", 3000, "receipts/s produced while the binary runs; 0: all produced before it starts")
	binPath := flag.String("bin", "", "tidemark binary to measure (default: build ./cmd/tidemark)")
	mode := flag.String("mode", "groups", "groups: a flood of group names; hosts: a new host name per receipt")
	receipts := flag.Int("receipts", 50000, "-mode hosts: receipts of each run")
	flag.Parse()
	if *mode != "groups" && *mode != "hosts" {
		fmt.Fprintf(os.Stderr, "bench-cardinality: -mode %q: want groups or hosts\n", *mode)
		os.Exit(2)
	}
	brokers := os.Getenv("TIDEMARK_KAFKA_BROKERS")
	chAddr := os.Getenv("TIDEMARK_CLICKHOUSE_ADDR")
	if brokers == "" || chAddr == "" {
		fmt.Fprintln(os.Stderr, "bench-cardinality: TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR must be set (make bench-cardinality sets them)")
		os.Exit(2)
	}
	base, attack, n := workload{groups: *baseGroups}, workload{groups: *groups}, *groups**perGroup
	if *mode == "hosts" {
		attack, n = workload{groups: *baseGroups, hostChurn: true}, *receipts
	}
	if err := bench(strings.Split(brokers, ","), chAddr, *binPath, *mode, base, attack, n, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cardinality:", err)
		os.Exit(1)
	}
}

func bench(brokers []string, chAddr, bin, mode string, base, attack workload, n, rate int) error {
	dir, err := os.MkdirTemp("", "bench-cardinality")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "tidemark")
		fmt.Fprintln(os.Stderr, "building tidemark...")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/tidemark").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	prov := benchproc.NewProvenance(context.Background(), "github.com/IBM/sarama", "github.com/ClickHouse/clickhouse-go/v2")
	prov.Rounds = 1
	res := result{Mode: mode, MemoryLimitMB: memoryLimitMB, Rate: rate, Provenance: prov}
	if res.Baseline, err = runOnce(bin, dir, brokers, chAddr, base, n, rate); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	prov.Phase("baseline")
	if res.Attack, err = runOnce(bin, dir, brokers, chAddr, attack, n, rate); err != nil {
		return fmt.Errorf("attack: %w", err)
	}
	prov.Phase("attack")
	res.RSSRatio = res.Attack.PeakRSSMB / res.Baseline.PeakRSSMB
	res.SeriesRatio = float64(res.Attack.Series) / float64(res.Baseline.Series)
	res.RateRatio = res.Attack.ReceiptsPerS / res.Baseline.ReceiptsPerS
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// runOnce runs the binary on a fresh receipts topic and database until all n receipts of w are stored, counted as
// distinct keys. It fails when the binary's RSS cannot be read: a figure that is not measured is not "under limit".
func runOnce(bin, dir string, brokers []string, chAddr string, w workload, n, rate int) (runResult, error) {
	groups := w.groups
	r := runResult{Groups: groups, Hosts: 1, Receipts: n}
	if w.hostChurn {
		r.Hosts = n
	}
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic, db := "bench-card-"+id, "tidemark_bench_card_"+id
	sc := sarama.NewConfig()
	sc.Version = sarama.V4_0_0_0
	adm, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return r, err
	}
	defer adm.Close()
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		return r, err
	}
	defer adm.DeleteTopic(topic)          //nolint:errcheck // best effort
	defer adm.DeleteTopic(topic + "-dlq") //nolint:errcheck // best effort
	prod, err := newProducer(brokers)
	if err != nil {
		return r, err
	}
	defer prod.Close()
	if rate == 0 {
		fmt.Fprintf(os.Stderr, "%d groups: producing %d receipts...\n", groups, n)
		if err := produce(prod, topic, w, 0, n); err != nil {
			return r, err
		}
	}
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{chAddr}})
	if err != nil {
		return r, err
	}
	defer conn.Close()
	ctx := context.Background()
	defer conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db) //nolint:errcheck // best effort

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return r, err
	}
	base := "http://" + ln.Addr().String()
	cfgPath := filepath.Join(dir, "run-"+id+".yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse: {addr: [%s], database: %s}
collector:
  dead_letter_topic: %s-dlq
  receipts: {enabled: true, topic: %s, group: %s-g, partitions: %d}
lag: {enabled: false}
memory_limit_mb: %d
http: {listen: %q}
log: {level: warn}
`, strings.Join(brokers, ", "), chAddr, db, topic, topic, topic, partitions, memoryLimitMB, ln.Addr().String())
	_ = ln.Close()
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return r, err
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	deadline := time.Now().Add(15 * time.Minute)

	var produced chan error
	var start, lastProduced time.Time
	if rate > 0 {
		for code := 0; code != http.StatusOK; {
			if time.Now().After(deadline) {
				return r, fmt.Errorf("/readyz never answered 200")
			}
			select {
			case err := <-exited:
				exited <- err
				return r, fmt.Errorf("tidemark exited (%v) before it was ready", err)
			case <-time.After(100 * time.Millisecond):
			}
			if resp, err := http.Get(base + "/readyz"); err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
		}
		fmt.Fprintf(os.Stderr, "%d groups: producing %d receipts at %d/s...\n", groups, n, rate)
		start = time.Now()
		produced = make(chan error, 1)
		go func() { produced <- producePaced(prod, topic, w, n, rate, &lastProduced) }()
	}
	pid := cmd.Process.Pid
	for {
		// Read while the process runs: a status file that cannot be read fails the run, never reads as 0 MB.
		if _, err := peakRSSMB(pid); err != nil {
			return r, err
		}
		var stored uint64
		if err := conn.QueryRow(ctx, "SELECT uniqExact(consumer_group, topic, partition, offset) FROM "+db+".latency_events").Scan(&stored); err != nil && !isUnknownTable(err) {
			return r, fmt.Errorf("count stored keys: %w", err)
		}
		r.Keys = stored
		if stored > 0 && start.IsZero() {
			start = time.Now()
		}
		if stored >= uint64(n) {
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%d of %d keys stored after 15 minutes", stored, n)
		}
		select {
		case err := <-exited:
			exited <- err // for the deferred wait
			return r, fmt.Errorf("tidemark exited (%v) with %d of %d keys stored", err, stored, n)
		case err := <-produced:
			if err != nil {
				return r, fmt.Errorf("produce: %w", err)
			}
			produced = nil
		case <-time.After(100 * time.Millisecond):
		}
	}
	done := time.Now()
	if produced != nil {
		if err := <-produced; err != nil {
			return r, fmt.Errorf("produce: %w", err)
		}
	}
	r.Seconds = done.Sub(start).Seconds()
	r.ReceiptsPerS = float64(n) / r.Seconds
	if rate > 0 {
		r.BehindSeconds = done.Sub(lastProduced).Seconds()
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return r, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.ScrapeBytes = len(body)
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		r.Series++
		for name, dst := range map[string]*float64{"tidemark_collector_live_label_sets": &r.LiveLabelSets,
			"tidemark_collector_live_overflow_total": &r.LiveOverflow, "tidemark_collector_engine_paths": &r.EnginePaths,
			"tidemark_collector_engine_hosts": &r.EngineHosts, "tidemark_collector_engine_hosts_evicted_total": &r.HostsEvicted,
			`tidemark_store_writer_insert_duration_seconds_sum{table="latency_events"}`: &r.InsertSeconds} {
			// The family's series, with or without labels (the collector's carry cluster): their sum.
			if rest, ok := strings.CutPrefix(line, name); ok && (rest[0] == ' ' || rest[0] == '{' && !strings.Contains(name, "{")) {
				v, _ := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
				*dst += v
			}
		}
	}
	if r.PeakRSSMB, err = peakRSSMB(pid); err != nil {
		return r, err
	}
	r.UnderLimit = r.PeakRSSMB < memoryLimitMB
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = <-exited
	exited <- err
	if err != nil {
		return r, fmt.Errorf("tidemark run after SIGTERM: %w", err)
	}
	return r, nil
}

// isUnknownTable reports whether err is ClickHouse's "table doesn't exist" (code 60), which the count meets until
// the binary has created its schema.
func isUnknownTable(err error) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && (ex.Code == 60 || ex.Code == 81) // UNKNOWN_TABLE, UNKNOWN_DATABASE
}

func newProducer(brokers []string) (sarama.SyncProducer, error) {
	sc := sarama.NewConfig()
	sc.Version = sarama.V4_0_0_0
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	return sarama.NewSyncProducer(brokers, sc)
}

// produce writes receipts [from, to) in records of perRecord receipts, record k of group k % groups on partition
// group % partitions. Every receipt has a produce and a processed stamp of one host, 20 ms apart, taken now: a live
// observation of the end-to-end latency (18 series per (group, topic)) that needs no clock correction. With
// w.hostChurn receipt i names host "pod-<i>" and reports its clock (offset 0 ± 1 ms, as a synced host does), so each
// receipt brings the collector a new clock to estimate.
func produce(prod sarama.SyncProducer, topic string, w workload, from, to int) error {
	groups := w.groups
	at := time.Now()
	var msgs []*sarama.ProducerMessage
	for first := from; first < to; first += perRecord {
		g := (first / perRecord) % groups
		rs := make([]instrument.Receipt, 0, perRecord)
		for i := first; i < min(first+perRecord, to); i++ {
			r := instrument.Receipt{Group: fmt.Sprintf("app-%05d", g), Topic: "orders",
				Partition: int32(i % 3), Offset: int64(i), ProduceNs: at.UnixNano(), ProduceHost: "c1",
				ProcessedNs: at.Add(20 * time.Millisecond).UnixNano(), Host: "c1"}
			if w.hostChurn {
				r.Host = fmt.Sprintf("pod-%07d", i)
				r.ProduceHost = r.Host
				r.Clock = instrument.ClockOffset{Uncertainty: time.Millisecond, Valid: true}
			}
			rs = append(rs, r)
		}
		v, err := instrument.AppendReceiptBatch(nil, rs)
		if err != nil {
			return err
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(g % partitions), Value: sarama.ByteEncoder(v)})
		if len(msgs) == 1000 {
			if err := prod.SendMessages(msgs); err != nil {
				return err
			}
			msgs = msgs[:0]
		}
	}
	return prod.SendMessages(msgs)
}

// producePaced produces n receipts at rate receipts/s, a tenth of a second's worth at a time, and sets *last to
// when the last was acknowledged.
func producePaced(prod sarama.SyncProducer, topic string, w workload, n, rate int, last *time.Time) error {
	const tick = 100 * time.Millisecond
	step := max(perRecord, rate/10/perRecord*perRecord)
	t0 := time.Now()
	for from, k := 0, 0; from < n; from, k = from+step, k+1 {
		time.Sleep(time.Until(t0.Add(time.Duration(k) * tick)))
		if err := produce(prod, topic, w, from, min(from+step, n)); err != nil {
			return err
		}
	}
	*last = time.Now()
	return nil
}

// peakRSSMB reads a process's peak resident set size (VmHWM) from /proc. A status file that cannot be read, or
// has no VmHWM line with a positive number of kB, is an error: the benchmark never reports an unread RSS as 0.
func peakRSSMB(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read peak RSS of pid %d: %w", pid, err)
	}
	return parseVmHWM(b)
}

// parseVmHWM returns the VmHWM of a /proc/<pid>/status text, in MB.
func parseVmHWM(status []byte) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(string(status)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil || kb <= 0 {
				return 0, fmt.Errorf("VmHWM %q: want a positive number of kB", strings.TrimSpace(v))
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM line in the process status")
}
