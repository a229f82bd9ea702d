// Command bench-scale stages Tidemark scaled out on this machine and measures, from outside, what a crash of one
// replica costs: two `tidemark run` replicas (the shipped binary, each with a user's configuration file) share the
// receipts group and elect a lag exporter, load flows through the instrumentation package (cmd/loadgen: instrumented
// producers, an instrumented consumer group lagging behind them, receipts emitted to the receipts topic), and one
// replica is SIGKILLed mid-run. The LAST line printed is one JSON object (result); every count in it comes from
// ClickHouse or from Kafka (its log, read back, and its own consumer-groups command), never from Tidemark's own
// counters:
//
//   - rows_sent: receipts in the receipts topic's log after the run (what the application's emitter got into Kafka);
//   - rows_lost / rows_duplicated: receipt keys (group, topic, partition, offset) sent and absent from latency_events,
//     and rows beyond one per key, read with FINAL (what a query sees once ReplacingMergeTree has merged: a
//     redelivered receipt stored again under the same key and replay class is stored once; under another replay
//     class it is a duplicate); rows_reinserted: rows inserted more than once by key, counted by a plain MergeTree
//     materialized view the bench puts on latency_events (the at-least-once redelivery the crash caused, which the
//     idempotent key absorbs);
//   - false_probe_loss: probe_events rows with status lost whose probe the probe topic's log holds;
//   - lag_failover_s: from the kill until the end, the time during which no live replica served
//     tidemark_lag_exporter_active{cluster}=1 (both replicas scraped every 250 ms); lag_exporters_max_active, the
//     most replicas active at once; lag_snapshot_max_gap_s, the longest gap between lag_snapshots rows from the kill on;
//   - cluster_lag_mismatches: per cluster, after the load stopped, group-partitions whose lag in the active replica's
//     tidemark_lag_partition_offsets differs from Kafka's own `kafka-consumer-groups.sh --describe --all-groups`.
//
// What the build does not support is staged as it is and reported so (lag_election, probe_instance_ids: false;
// clusters and clickhouse_replicas count what was really staged), never filled in. Run it with `make bench-scale`,
// which starts the stack; it takes about 3 minutes. Flags: -duration, -rate, -session-timeout, -keep.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/latency/instrument"
)

// result is the JSON line.
type result struct {
	Replicas           int     `json:"replicas"`
	Clusters           int     `json:"clusters"`
	ClickHouseReplicas int     `json:"clickhouse_replicas"`
	RowsSent           int     `json:"rows_sent"`
	RowsLost           int     `json:"rows_lost"`
	RowsDuplicated     int     `json:"rows_duplicated"`
	RowsExtra          int     `json:"rows_extra"`
	RowsReinserted     int     `json:"rows_reinserted"`
	ProbesDelivered    int     `json:"probes_delivered"`
	ProbesReportedLost int     `json:"probes_reported_lost"`
	FalseProbeLoss     int     `json:"false_probe_loss"`
	LagFailoverS       float64 `json:"lag_failover_s"`
	LagMaxActive       int     `json:"lag_exporters_max_active"`
	LagSnapshotMaxGapS float64 `json:"lag_snapshot_max_gap_s"`
	SessionTimeoutS    float64 `json:"session_timeout_s"`
	// ClusterLagMismatches sums over clusters; ClusterLagCompared is the group-partitions compared.
	ClusterLagMismatches int `json:"cluster_lag_mismatches"`
	ClusterLagCompared   int `json:"cluster_lag_compared"`
	// What this build supports, detected by `tidemark run --print-config` accepting the keys.
	LagElection      bool      `json:"lag_election"`
	ProbeInstanceIDs bool      `json:"probe_instance_ids"`
	Killed           string    `json:"killed"`
	KilledAtS        float64   `json:"killed_at_s"`
	RSSMB            []float64 `json:"rss_mb"` // peak RSS (VmHWM) of each replica
	LoadSeconds      float64   `json:"load_s"`
	TotalSeconds     float64   `json:"total_s"`
	LoadAvg          string    `json:"loadavg"`
}

type options struct {
	duration, sessionTimeout time.Duration
	rate                     float64
	keep                     bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "how long the load runs; the kill is at half of it")
	flag.Float64Var(&o.rate, "rate", 150, "records per second of each of the two instrumented producers")
	flag.DurationVar(&o.sessionTimeout, "session-timeout", 6*time.Second, "lag.election.session_timeout (the broker's minimum is 6s)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs, replica logs) and print its path")
	flag.Parse()
	st := stage{brokers: strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ","), chAddr: os.Getenv("TIDEMARK_CLICKHOUSE_ADDR"),
		kafkaLib: os.Getenv("TIDEMARK_KAFKA_LIB"), o: o}
	if st.brokers[0] == "" || st.chAddr == "" || st.kafkaLib == "" {
		fmt.Fprintln(os.Stderr, "bench-scale: TIDEMARK_KAFKA_BROKERS, TIDEMARK_CLICKHOUSE_ADDR and TIDEMARK_KAFKA_LIB must be set (make bench-scale sets them)")
		os.Exit(2)
	}
	res, err := st.run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-scale:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
}

// stage is one run: what it started and what it measured.
type stage struct {
	brokers          []string
	chAddr, kafkaLib string
	o                options

	id, dir, db, cluster         string
	ordersTopic, receiptsTopic   string
	probeTopic, appGroup, prefix string
	tidemark, loadgen            string
	replicas                     []*replica
	ch                           driver.Conn
	election, instances          bool
	samplesMu                    sync.Mutex
	samples                      []activeSample
	peakRSS                      []float64
}

type replica struct {
	name string
	port int
	cfg  string
	proc *benchproc.Proc
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05.000")}, a...)...)
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = "tidemark-bench-scale"
	return c
}

func (s *stage) run(ctx context.Context) (*result, error) {
	begin := time.Now()
	s.id = strconv.FormatInt(time.Now().UnixNano()/1e6%1e9, 36)
	s.prefix = "bench-scale-" + s.id + "-"
	s.appGroup = s.prefix + "app"
	s.ordersTopic, s.receiptsTopic, s.probeTopic = "bs-"+s.id+"-orders", "bs-"+s.id+"-receipts", "bs-"+s.id+"-probe"
	s.db, s.cluster = "tidemark_bench_scale", "local"
	var err error
	if s.dir, err = os.MkdirTemp("", "bench-scale-"); err != nil {
		return nil, err
	}
	if s.o.keep {
		defer logf("work directory kept: %s", s.dir)
	} else {
		defer os.RemoveAll(s.dir)
	}
	logf("building tidemark and loadgen")
	bins, err := benchproc.Build(ctx, s.dir, "./cmd/tidemark", "./cmd/loadgen")
	if err != nil {
		return nil, err
	}
	s.tidemark, s.loadgen = bins[0], bins[1]
	if s.ch, err = clickhouse.Open(&clickhouse.Options{Addr: []string{s.chAddr}, Auth: clickhouse.Auth{Username: "default"},
		Settings: clickhouse.Settings{"max_execution_time": 120}}); err != nil {
		return nil, err
	}
	defer s.ch.Close()
	if err := s.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+s.db); err != nil {
		return nil, fmt.Errorf("drop %s: %w", s.db, err)
	}
	defer s.deleteTopics()
	s.detect(ctx)
	defer s.stopAll()

	// Replica 0 migrates the schema alone, then the bench's insert counter goes on latency_events before any
	// receipt arrives, then replica 1 joins.
	for i := 0; i < 2; i++ {
		r, err := s.startReplica(ctx, i)
		if err != nil {
			return nil, err
		}
		s.replicas = append(s.replicas, r)
		if i == 0 {
			if err := s.ch.Exec(ctx, `CREATE MATERIALIZED VIEW `+s.db+`.bench_receipt_inserts ENGINE = MergeTree
				ORDER BY (consumer_group, topic, partition, offset) AS SELECT consumer_group, topic, partition, offset
				FROM `+s.db+`.latency_events WHERE source = 'receipt'`); err != nil {
				return nil, fmt.Errorf("create the insert counter: %w", err)
			}
		}
	}
	s.peakRSS = make([]float64, len(s.replicas))
	sctx, stopScrape := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() { defer close(scraped); s.scrapeLoop(sctx) }()
	defer func() { stopScrape(); <-scraped }()

	res := &result{Replicas: len(s.replicas), Clusters: 1, ClickHouseReplicas: 1, LagElection: s.election,
		ProbeInstanceIDs: s.instances, SessionTimeoutS: s.o.sessionTimeout.Seconds()}
	loadStart := time.Now()
	lg, err := benchproc.Start("loadgen", filepath.Join(s.dir, "loadgen.log"), nil, s.loadgen,
		"--brokers", strings.Join(s.brokers, ","), "--topic", s.ordersTopic, "--partitions", "6",
		"--receipts-topic", s.receiptsTopic, "--group", s.appGroup, "--rate", strconv.FormatFloat(s.o.rate, 'f', -1, 64),
		"--duration", s.o.duration.String(), "--reset-at", "0",
		"--producer", "p-1:0", "--producer", "p-2:+300ms", "--consumer", "c-1:0:3ms")
	if err != nil {
		return nil, err
	}
	defer lg.Kill()
	logf("load for %v at %.0f records/s from 2 producers", s.o.duration, 2*s.o.rate)
	// Two groups that stop at 40% of the load: real committed offsets, lag growing until the load ends.
	if err := sleepOrExit(ctx, lg, s.o.duration*4/10); err != nil {
		return nil, err
	}
	if err := s.commitStalled(2); err != nil {
		return nil, err
	}
	if err := sleepOrExit(ctx, lg, s.o.duration/10); err != nil {
		return nil, err
	}
	killed := s.pickVictim()
	killAt := time.Now()
	s.replicas[killed].proc.Kill()
	res.Killed, res.KilledAtS = s.replicas[killed].name, killAt.Sub(loadStart).Seconds()
	logf("SIGKILLed %s (pid %d) %.1fs into the load", s.replicas[killed].name, s.replicas[killed].proc.Pid(), res.KilledAtS)
	survivor := s.replicas[1-killed]
	if err := lg.Wait(s.o.duration + 90*time.Second); err != nil {
		return nil, fmt.Errorf("loadgen: %v\n%s", err, lg.Tail(20))
	}
	loadEnd := time.Now()
	res.LoadSeconds = loadEnd.Sub(loadStart).Seconds()
	logf("load done: %s", lg.Tail(1))

	sent, err := s.readReceipts()
	if err != nil {
		return nil, err
	}
	for _, n := range sent {
		res.RowsSent += n
	}
	logf("receipts topic holds %d receipts (%d keys)", res.RowsSent, len(sent))
	if err := s.waitStored(ctx, survivor, sent); err != nil {
		return nil, err
	}
	// The lag of every bench group is static now (producers stopped, the application exited, the stalled groups
	// never move): compare once the active replica has a snapshot taken after this moment.
	mism, compared, err := s.compareLag(ctx, survivor, time.Now())
	if err != nil {
		return nil, err
	}
	res.ClusterLagMismatches, res.ClusterLagCompared = len(mism), compared
	for i, m := range mism {
		if i == 10 {
			logf("... %d more lag mismatches", len(mism)-10)
			break
		}
		logf("lag mismatch %s", m)
	}
	// Probes still in flight at the end are swept lost only after the loss timeout: wait it out before counting.
	time.Sleep(probeLossTimeout + 2*probeInterval)
	stopScrape()
	<-scraped
	s.samplesMu.Lock()
	gap, maxActive := noActiveTime(s.samples, killAt)
	s.samplesMu.Unlock()
	res.LagFailoverS, res.LagMaxActive = gap.Seconds(), maxActive
	if err := survivor.proc.Stop(30 * time.Second); err != nil {
		logf("%s stop: %v", survivor.name, err)
	}
	res.RSSMB = s.peakRSS
	if err := s.count(ctx, res, sent, killAt); err != nil {
		return nil, err
	}
	res.TotalSeconds = time.Since(begin).Seconds()
	res.LoadAvg = benchproc.LoadAvg()
	return res, nil
}

// The probe path's settings: a probe every 500 ms per partition, lost when not back within 5 s.
const (
	probeInterval    = 500 * time.Millisecond
	probeLossTimeout = 5 * time.Second
)

// config is replica i's `tidemark run` configuration, as a user would write it for two replicas.
func (s *stage) config(i, port int, election, instances bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `kafka:
  brokers: [%s]
  client_id: tidemark-replica-%d
clickhouse:
  addr: [%s]
  database: %s
  writer:
    flush_interval: 500ms
migrate: true
collector:
  dead_letter_topic: bs-%s-dlq
  replay_state_topic: bs-%s-replay-state
  receipts:
    enabled: true
    topic: %s
    group: tmbs-%s-receipts
    partitions: 6
  probe:
    enabled: true
    topic: %s
    group: tmbs-%s-probe
    interval: %v
    loss_timeout: %v
    partitions: 4
`, strings.Join(s.brokers, ", "), i, s.chAddr, s.db, s.id, s.id, s.receiptsTopic, s.id, s.probeTopic, s.id,
		probeInterval, probeLossTimeout)
	if instances {
		fmt.Fprintf(&b, "    instance_id: replica-%d\n", i)
	}
	fmt.Fprintf(&b, `lag_enabled: true
lag:
  cluster: %s
  poll_interval: 1s
  group_allow: ["%s.*"]
`, s.cluster, s.prefix)
	if election {
		fmt.Fprintf(&b, `  election:
    enabled: true
    group: tmbs-%s-lag-election
    topic: bs-%s-lag-lease
    session_timeout: %v
`, s.id, s.id, s.o.sessionTimeout)
	}
	fmt.Fprintf(&b, `http:
  listen: 127.0.0.1:%d
log:
  level: info
`, port)
	return b.String()
}

// detect asks the binary which scale-out keys it knows (`--print-config` fails on an unknown key).
func (s *stage) detect(ctx context.Context) {
	accepts := func(election, instances bool) bool {
		p := filepath.Join(s.dir, "probe-config.yaml")
		if err := os.WriteFile(p, []byte(s.config(0, 1, election, instances)), 0o644); err != nil {
			return false
		}
		cmd := exec.CommandContext(ctx, s.tidemark, "run", "--config", p, "--print-config")
		cmd.Env = benchproc.CleanEnv()
		return cmd.Run() == nil
	}
	s.election, s.instances = accepts(true, false), accepts(false, true)
	logf("this build: lag election %v, probe instance ids %v", s.election, s.instances)
}

func (s *stage) startReplica(ctx context.Context, i int) (*replica, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	r := &replica{name: "replica-" + strconv.Itoa(i), port: port, cfg: filepath.Join(s.dir, fmt.Sprintf("replica-%d.yaml", i))}
	if err := os.WriteFile(r.cfg, []byte(s.config(i, port, s.election, s.instances)), 0o644); err != nil {
		return nil, err
	}
	if r.proc, err = benchproc.Start(r.name, filepath.Join(s.dir, r.name+".log"), nil, s.tidemark, "run", "--config", r.cfg); err != nil {
		return nil, err
	}
	if err := benchproc.WaitReady(ctx, r.proc, r.url("/readyz"), 120*time.Second); err != nil {
		r.proc.Kill()
		return nil, err
	}
	logf("%s ready (pid %d, http %d)", r.name, r.proc.Pid(), port)
	return r, nil
}

func (r *replica) url(path string) string { return "http://127.0.0.1:" + strconv.Itoa(r.port) + path }

func (s *stage) stopAll() {
	for _, r := range s.replicas {
		if !r.proc.Exited() {
			_ = r.proc.Stop(20 * time.Second)
		}
	}
}

// scrapeLoop scrapes every live replica's /metrics every 250 ms until ctx ends: whether it is the active lag
// exporter, and its peak RSS.
func (s *stage) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		smp := activeSample{At: time.Now(), Active: make([]bool, len(s.replicas))}
		for i, r := range s.replicas {
			if r.proc.Exited() {
				continue
			}
			if v, err := benchproc.StatusMB(r.proc.Pid(), "VmHWM"); err == nil {
				s.peakRSS[i] = v
			}
			fams, err := benchproc.Scrape(ctx, r.url("/metrics"))
			if err != nil {
				continue
			}
			smp.Active[i] = s.isActive(fams)
		}
		s.samplesMu.Lock()
		s.samples = append(s.samples, smp)
		s.samplesMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// isActive: with an election, the replica serves tidemark_lag_exporter_active{cluster}=1; without one (a build
// before it), every replica that serves the cluster's lag series exports it, so it counts as active.
func (s *stage) isActive(f benchproc.Families) bool {
	if s.election {
		v, ok := f.Value("tidemark_lag_exporter_active", map[string]string{"cluster": s.cluster})
		return ok && v == 1
	}
	_, ok := f.Value("tidemark_lag_exporter_group_partitions", map[string]string{"cluster": s.cluster})
	return ok
}

// pickVictim is the replica to kill: the active lag exporter of the last scrape (so the lease must move), else 0.
func (s *stage) pickVictim() int {
	s.samplesMu.Lock()
	defer s.samplesMu.Unlock()
	if n := len(s.samples); n > 0 && s.election {
		for i, a := range s.samples[n-1].Active {
			if a {
				return i
			}
		}
	}
	return 0
}

func sleepOrExit(ctx context.Context, p *benchproc.Proc, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	if p.Exited() {
		return fmt.Errorf("%s exited early: %v\n%s", p.Name, p.Wait(0), p.Tail(20))
	}
	return nil
}

// commitStalled commits, for n groups named prefix+"stalled-i", the current high watermark of every partition of the
// orders topic: groups that consumed so far and stopped (no members), lagging more as the load goes on.
func (s *stage) commitStalled(n int) error {
	client, err := sarama.NewClient(s.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(s.ordersTopic)
	if err != nil {
		return err
	}
	for g := 1; g <= n; g++ {
		om, err := sarama.NewOffsetManagerFromClient(s.prefix+"stalled-"+strconv.Itoa(g), client)
		if err != nil {
			return err
		}
		for _, p := range parts {
			hw, err := client.GetOffset(s.ordersTopic, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			pom, err := om.ManagePartition(s.ordersTopic, p)
			if err != nil {
				return err
			}
			pom.MarkOffset(hw/int64(g), "bench-scale stalled group")
			pom.AsyncClose()
		}
		om.Commit()
		if err := om.Close(); err != nil {
			return err
		}
	}
	return nil
}

// readLog reads every partition of topic from its log start to the high watermark of now and calls fn per record.
func (s *stage) readLog(topic string, fn func(partition int32, value []byte) error) error {
	client, err := sarama.NewClient(s.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer c.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		if hw <= start {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, start)
		if err != nil {
			return err
		}
		for off := start; off < hw; {
			select {
			case m := <-pc.Messages():
				off = m.Offset + 1
				if err := fn(p, m.Value); err != nil {
					pc.Close()
					return err
				}
			case <-time.After(30 * time.Second):
				pc.Close()
				return fmt.Errorf("read %s/%d: stuck at offset %d of %d", topic, p, off, hw)
			}
		}
		pc.Close()
	}
	return nil
}

// readReceipts decodes the receipts topic: receipts per key, as the application's emitter wrote them.
func (s *stage) readReceipts() (map[receiptKey]int, error) {
	sent := map[receiptKey]int{}
	var buf []instrument.Receipt
	err := s.readLog(s.receiptsTopic, func(_ int32, v []byte) error {
		var err error
		if buf, err = instrument.DecodeReceiptBatch(buf[:0], v); err != nil {
			return fmt.Errorf("receipts topic holds a record the emitter did not write: %w", err)
		}
		for _, r := range buf {
			sent[receiptKey{r.Group, r.Topic, r.Partition, r.Offset}]++
		}
		return nil
	})
	return sent, err
}

// waitStored waits until latency_events holds every sent key, or nothing new arrived for 30 s (then what is missing
// is lost, and counted so), or the survivor died.
func (s *stage) waitStored(ctx context.Context, survivor *replica, sent map[receiptKey]int) error {
	last, lastChange := -1, time.Now()
	for {
		var n uint64
		if err := s.ch.QueryRow(ctx, `SELECT uniqExact(consumer_group, topic, partition, offset) FROM `+s.db+
			`.latency_events WHERE source = 'receipt' AND topic = ?`, s.ordersTopic).Scan(&n); err != nil {
			return fmt.Errorf("count stored receipts: %w", err)
		}
		if int(n) >= len(sent) {
			logf("ClickHouse holds all %d receipt keys", n)
			return nil
		}
		if int(n) != last {
			last, lastChange = int(n), time.Now()
		}
		if survivor.proc.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", survivor.name, survivor.proc.Wait(0), survivor.proc.Tail(30))
		}
		if time.Since(lastChange) > 30*time.Second {
			logf("ClickHouse holds %d of %d receipt keys and gained none for 30 s; the rest counts as lost", n, len(sent))
			return nil
		}
		time.Sleep(time.Second)
	}
}

// compareLag waits until the active replica serves a lag snapshot observed after frozen, then compares its
// tidemark_lag_partition_offsets with Kafka's consumer-groups command for the bench's groups.
func (s *stage) compareLag(ctx context.Context, active *replica, frozen time.Time) (mism []string, compared int, err error) {
	deadline := time.Now().Add(60 * time.Second)
	var fams benchproc.Families
	for {
		fams, err = benchproc.Scrape(ctx, active.url("/metrics"))
		if err == nil && s.isActive(fams) {
			at, ok := fams.Value("tidemark_lag_exporter_snapshot_timestamp_seconds", map[string]string{"cluster": s.cluster})
			if ok && at > float64(frozen.UnixNano())/1e9 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%s served no active lag snapshot newer than %v within 60 s (last scrape error %v)",
				active.name, frozen.Format(time.RFC3339Nano), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	ours := map[gpKey]int64{}
	fams.Each("tidemark_lag_partition_offsets", func(l map[string]string, v float64) {
		if l["cluster"] != s.cluster {
			return
		}
		p, _ := strconv.Atoi(l["partition"])
		ours[gpKey{l["group"], l["topic"], int32(p)}] = int64(v)
	})
	cmd := exec.CommandContext(ctx, "java", "-cp", s.kafkaLib+"/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", strings.Join(s.brokers, ","), "--describe", "--all-groups")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return nil, 0, fmt.Errorf("kafka-consumer-groups --describe: %w", err)
	}
	theirs, err := parseConsumerGroups(strings.NewReader(string(out)), s.prefix)
	if err != nil {
		return nil, 0, err
	}
	logf("lag: kafka-consumer-groups lists %d bench group-partitions with commits, %s exports %d", len(theirs), active.name, len(ours))
	return lagMismatches(theirs, ours), len(theirs), nil
}

// count fills the ClickHouse and probe-log figures, after every replica stopped.
func (s *stage) count(ctx context.Context, res *result, sent map[receiptKey]int, killAt time.Time) error {
	stored := map[receiptKey]int{}
	rows, err := s.ch.Query(ctx, `SELECT consumer_group, topic, partition, offset, toUInt64(count()) FROM `+s.db+
		`.latency_events FINAL WHERE source = 'receipt' GROUP BY consumer_group, topic, partition, offset`)
	if err != nil {
		return fmt.Errorf("stored receipts: %w", err)
	}
	for rows.Next() {
		var k receiptKey
		var n uint64
		if err := rows.Scan(&k.Group, &k.Topic, &k.Partition, &k.Offset, &n); err != nil {
			rows.Close()
			return err
		}
		stored[k] = int(n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	res.RowsLost, res.RowsDuplicated, res.RowsExtra = receiptCounts(sent, stored)
	var inserted uint64
	if err := s.ch.QueryRow(ctx, `SELECT count() FROM `+s.db+`.bench_receipt_inserts`).Scan(&inserted); err != nil {
		return fmt.Errorf("count inserts: %w", err)
	}
	distinct := 0
	for _, n := range stored {
		distinct += min(n, 1)
	}
	res.RowsReinserted = int(inserted) - distinct

	var hasInstance uint64
	if err := s.ch.QueryRow(ctx, `SELECT count() FROM system.columns WHERE database = ? AND table = 'probe_events' AND name = 'instance'`,
		s.db).Scan(&hasInstance); err != nil {
		return err
	}
	instCol := "''"
	if hasInstance > 0 {
		instCol = "instance"
	}
	prow, err := s.ch.Query(ctx, `SELECT `+instCol+`, partition, seq FROM `+s.db+`.probe_events FINAL WHERE topic = ? AND status = 'lost'`, s.probeTopic)
	if err != nil {
		return fmt.Errorf("lost probes: %w", err)
	}
	var lost []probeKey
	for prow.Next() {
		var k probeKey
		if err := prow.Scan(&k.Instance, &k.Partition, &k.Seq); err != nil {
			prow.Close()
			return err
		}
		lost = append(lost, k)
	}
	prow.Close()
	delivered := map[probeKey]bool{}
	if err := s.readLog(s.probeTopic, func(p int32, v []byte) error {
		if seq, inst, ok := decodeProbe(v); ok {
			if hasInstance == 0 {
				inst = ""
			}
			delivered[probeKey{inst, p, seq}] = true
		}
		return nil
	}); err != nil {
		return err
	}
	res.ProbesDelivered, res.ProbesReportedLost = len(delivered), len(lost)
	res.FalseProbeLoss = falseProbeLoss(lost, delivered, hasInstance > 0)

	var ats []int64
	lrows, err := s.ch.Query(ctx, `SELECT DISTINCT at_ms FROM `+s.db+`.lag_snapshots WHERE cluster = ?`, s.cluster)
	if err != nil {
		return fmt.Errorf("lag snapshots: %w", err)
	}
	for lrows.Next() {
		var at int64
		if err := lrows.Scan(&at); err != nil {
			lrows.Close()
			return err
		}
		ats = append(ats, at)
	}
	lrows.Close()
	last := killAt
	for _, at := range ats {
		last = time.UnixMilli(max(last.UnixMilli(), at))
	}
	res.LagSnapshotMaxGapS = maxGap(ats, killAt, last).Seconds()
	return nil
}

// deleteTopics removes the run's topics (best effort).
func (s *stage) deleteTopics() {
	adm, err := sarama.NewClusterAdmin(s.brokers, saramaConfig())
	if err != nil {
		return
	}
	defer adm.Close()
	topics, err := adm.ListTopics()
	if err != nil {
		return
	}
	for t := range topics {
		if strings.HasPrefix(t, "bs-"+s.id+"-") {
			_ = adm.DeleteTopic(t)
		}
	}
}
