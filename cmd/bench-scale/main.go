// Command bench-scale stages Tidemark scaled out on this machine and measures, from outside, what a crash of one
// replica costs: two `tidemark run` replicas (the shipped binary, each with a user's configuration file) share the
// receipts group and elect a lag exporter per Kafka cluster, load flows through the instrumentation package
// (cmd/loadgen per cluster: instrumented producers, an instrumented consumer group lagging behind them, receipts
// emitted to the receipts topic), and one replica is SIGKILLed mid-run. The LAST line printed is one JSON object
// (result); every count in it comes from ClickHouse or from Kafka (its log, read back, and its own consumer-groups
// command), never from Tidemark's own counters:
//
//   - rows_sent: receipts in the receipts topics' logs after the run (what the applications' emitters got into Kafka);
//     app_receipts_dropped: receipts the load generators' emitters dropped or failed to send (their own count), which
//     never reached the topic; rows_unaccounted = rows_lost + app_receipts_dropped;
//   - rows_lost / rows_duplicated: receipt keys (group, topic, partition, offset) sent and absent from latency_events,
//     and rows beyond one per key, read with FINAL (what a query sees once ReplacingMergeTree has merged: a
//     redelivered receipt stored again under the same key and replay class is stored once; under another replay
//     class it is a duplicate); on a ClickHouse cluster each replica is counted on its own (after SYSTEM SYNC
//     REPLICA) and the worst one reported. rows_reinserted: rows inserted more than once by key, counted by a plain
//     MergeTree materialized view the bench puts on latency_events (the at-least-once redelivery the crash caused,
//     which the idempotent key absorbs; the survivor's seeded dedup window keeps it at 0);
//   - rollup_double_counted / rollup_missing: the most, over latency_1m and latency_1h, of the rows a tier counts
//     beyond / short of the distinct keys latency_events holds in the same (cluster, topic, group, minute or hour),
//     read without FINAL (a re-inserted row FINAL collapses is still aggregated twice by the views);
//   - false_probe_loss: probe_events rows with status lost whose probe the probe topic's log holds;
//   - lag_failover_s: the longest, over clusters, from the SIGKILL itself to the first scrape (both replicas every
//     250 ms, stamped when the scrape returned) in which a live replica serves tidemark_lag_exporter_active{cluster}=1,
//     with lag.election.session_timeout left at its default (session_timeout_s, read from --print-config);
//     lag_unserved_s, the time from the kill on during which none did; lag_exporters_max_active, the most replicas
//     active at once for one cluster (2 is a split brain); lag_snapshot_max_gap_s, the longest gap between a
//     cluster's lag_snapshots rows from the kill on;
//   - live_lag_checks / live_lag_compared / live_lag_mismatches: during the load, repeatedly, the active replica's
//     committed offsets and lags against Kafka's `kafka-consumer-groups.sh --describe --all-groups` run just before
//     and just after its snapshot (offsets only grow, so the snapshot must lie between the two readings);
//   - cluster_lag_mismatches: per cluster, after the load stopped, group-partitions whose lag in the surviving
//     replica's tidemark_lag_partition_offsets differs from that cluster's own command.
//
// A run that compared lag on no group-partition, during or after the load, fails. The JSON line carries its
// provenance (commit, versions, load average per phase: benchproc.Provenance).
//
// The bench stages what the build and the repository support, detected, never assumed: `tidemark run
// --print-config` must accept lag.election, collector.probe.instance_id, clusters: and clickhouse.cluster, and
// deploy/local/chcluster.sh must exist for the ClickHouse replicas. A second Kafka cluster (kafka.sh, one broker,
// its own state directory and ports) and two ClickHouse replicas with ZooKeeper (chcluster.sh) are started when
// used and stopped after, unless they were already running. clusters and clickhouse_replicas count what was
// really staged and watched. Run it with `make bench-scale`, which starts the stack; it takes about 3 minutes.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/latency/instrument"
)

// result is the JSON line.
type result struct {
	Replicas           int `json:"replicas"`
	Clusters           int `json:"clusters"`
	ClickHouseReplicas int `json:"clickhouse_replicas"`
	RowsSent           int `json:"rows_sent"`
	RowsLost           int `json:"rows_lost"`
	RowsDuplicated     int `json:"rows_duplicated"`
	RowsExtra          int `json:"rows_extra"`
	RowsReinserted     int `json:"rows_reinserted"`
	// RollupDoubleCounted: the most, over latency_1m and latency_1h, by which the tier's row count exceeds the
	// distinct rows of latency_events FINAL (a re-read row the views aggregated twice); RollupRows the tiers' count.
	RollupDoubleCounted int64 `json:"rollup_double_counted"`
	RollupMissing       int64 `json:"rollup_missing"`
	RollupRawRows       int64 `json:"rollup_raw_rows"`
	ProbesDelivered     int   `json:"probes_delivered"`
	ProbesReportedLost  int   `json:"probes_reported_lost"`
	FalseProbeLoss      int   `json:"false_probe_loss"`
	// LagFailoverS: the longest, over clusters, from the SIGKILL to the first scrape in which a replica serves the
	// cluster's lag as the active exporter. LagUnservedS: the time from the kill on during which no replica did.
	LagFailoverS       float64 `json:"lag_failover_s"`
	LagUnservedS       float64 `json:"lag_unserved_s"`
	LagMaxActive       int     `json:"lag_exporters_max_active"`
	LagSnapshotMaxGapS float64 `json:"lag_snapshot_max_gap_s"`
	// SessionTimeoutS is lag.election.session_timeout as the replicas ran it (`tidemark run --print-config`).
	SessionTimeoutS float64 `json:"session_timeout_s"`
	// AppProcessed and AppReceiptsDropped are the load generators' own counts (their last line): records their
	// consumers processed, and receipts their emitters dropped or failed to send, which never reached the receipts
	// topic. RowsUnaccounted = RowsLost + AppReceiptsDropped: receipts the applications had and ClickHouse lacks.
	AppProcessed       int `json:"app_processed"`
	AppReceiptsDropped int `json:"app_receipts_dropped"`
	RowsUnaccounted    int `json:"rows_unaccounted"`
	// LiveLagChecks: comparisons during the load of the active replica's lag snapshot with Kafka's
	// consumer-groups command run just before and just after it (liveLagMismatches); LiveLagCompared the
	// group-partitions compared over all of them, LiveLagMismatches those outside Kafka's bracket.
	LiveLagChecks     int `json:"live_lag_checks"`
	LiveLagCompared   int `json:"live_lag_compared"`
	LiveLagMismatches int `json:"live_lag_mismatches"`
	// ClusterLagMismatches sums over clusters; ClusterLagCompared is the group-partitions compared.
	ClusterLagMismatches int `json:"cluster_lag_mismatches"`
	ClusterLagCompared   int `json:"cluster_lag_compared"`
	// What the build and the repository support (detected): what was staged.
	LagElection       bool      `json:"lag_election"`
	ProbeInstanceIDs  bool      `json:"probe_instance_ids"`
	MultiCluster      bool      `json:"multi_cluster"`
	ClickHouseCluster bool      `json:"clickhouse_cluster"`
	Killed            string    `json:"killed"`
	KilledAtS         float64   `json:"killed_at_s"`
	RSSMB             []float64 `json:"rss_mb"` // peak RSS (VmHWM) of each replica
	LoadSeconds       float64   `json:"load_s"`
	TotalSeconds      float64   `json:"total_s"`
	*benchproc.Provenance
}

type options struct {
	duration, sessionTimeout time.Duration
	rate                     float64
	keep                     bool
	tidemark                 string // a built binary to measure instead of building ./cmd/tidemark
	clusters                 int    // Kafka clusters wanted (used when the build supports clusters:)
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "how long the load runs; the kill is at half of it")
	flag.Float64Var(&o.rate, "rate", 150, "records per second of each of the two instrumented producers of each cluster")
	flag.DurationVar(&o.sessionTimeout, "session-timeout", 0, "lag.election.session_timeout to configure (0: leave it to the shipped default, as a user does; the broker's minimum is 6s)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs, replica logs) and print its path")
	flag.StringVar(&o.tidemark, "tidemark", "", "measure this tidemark binary (e.g. another branch's build) instead of building ./cmd/tidemark")
	flag.IntVar(&o.clusters, "clusters", 2, "Kafka clusters to stage when the build supports clusters: (1 or 2)")
	flag.Parse()
	st := stage{o: o, stackBrokers: strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ","),
		stackCH: os.Getenv("TIDEMARK_CLICKHOUSE_ADDR"), kafkaLib: os.Getenv("TIDEMARK_KAFKA_LIB")}
	if st.stackBrokers[0] == "" || st.stackCH == "" || st.kafkaLib == "" {
		fmt.Fprintln(os.Stderr, "bench-scale: TIDEMARK_KAFKA_BROKERS, TIDEMARK_CLICKHOUSE_ADDR and TIDEMARK_KAFKA_LIB must be set (make bench-scale sets them)")
		os.Exit(2)
	}
	if o.clusters < 1 || o.clusters > 2 {
		fmt.Fprintln(os.Stderr, "bench-scale: -clusters is 1 or 2")
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
	o                       options
	stackBrokers            []string
	stackCH, kafkaLib       string
	id, dir, db, prefix     string
	tidemark, loadgen       string
	clusters                []*kcluster
	ch                      *chTarget
	replicas                []*replica
	election, instances     bool
	multiCluster, chCluster bool
	samplesMu               sync.Mutex
	peakRSS                 []float64
	sessionTimeout          time.Duration // lag.election.session_timeout as the replicas run it
	prov                    *benchproc.Provenance
}

// kcluster is one Kafka cluster the replicas watch, with its load.
type kcluster struct {
	name                    string
	brokers                 []string
	orders, receipts, probe string // topics
	appGroup, prefix        string
	load                    *benchproc.Proc
	sent                    map[receiptKey]int
	samples                 []activeSample // guarded by stage.samplesMu
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
	s.prov = benchproc.NewProvenance(ctx, "github.com/IBM/sarama", "github.com/ClickHouse/clickhouse-go/v2")
	s.prov.Rounds = 1
	s.prov.Peers["kafka"] = strings.TrimPrefix(filepath.Base(filepath.Dir(s.kafkaLib)), "kafka-")
	s.id = strconv.FormatInt(time.Now().UnixNano()/1e6%1e9, 36)
	s.prefix = "bench-scale-" + s.id + "-"
	s.db = "tidemark_bench_scale"
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
	pkgs := []string{"./cmd/loadgen", "./cmd/tidemark"}
	if s.o.tidemark != "" {
		pkgs = pkgs[:1]
	}
	bins, err := benchproc.Build(ctx, s.dir, pkgs...)
	if err != nil {
		return nil, err
	}
	s.loadgen, s.tidemark = bins[0], s.o.tidemark
	if s.tidemark == "" {
		s.tidemark = bins[1]
	}
	if err := s.detect(ctx); err != nil {
		return nil, err
	}

	// The servers: the stack's cluster and ClickHouse, plus what the build can use.
	s.clusters = []*kcluster{s.newCluster("a", s.stackBrokers)}
	if !s.multiCluster {
		s.clusters[0].name = "local"
	} else if s.o.clusters == 2 {
		brokers, stop, err := startSecondKafka(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
		s.clusters = append(s.clusters, s.newCluster("b", brokers))
	}
	if s.chCluster {
		if s.ch, err = startCHCluster(ctx); err != nil {
			return nil, err
		}
	} else if s.ch, err = singleCH(s.stackCH); err != nil {
		return nil, err
	}
	defer s.ch.close()
	if v, err := s.ch.conns[0].ServerVersion(); err == nil {
		s.prov.Peers["clickhouse"] = fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	}
	if err := s.ch.execEach(ctx, "DROP DATABASE IF EXISTS "+s.db); err != nil {
		return nil, fmt.Errorf("drop %s: %w", s.db, err)
	}
	defer s.deleteTopics()
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
			if err := s.ch.execEach(ctx, `CREATE MATERIALIZED VIEW `+s.db+`.bench_receipt_inserts ENGINE = MergeTree
				ORDER BY (consumer_group, topic, partition, offset) AS SELECT consumer_group, topic, partition, offset
				FROM `+s.db+`.`+s.ch.local("latency_events")+` WHERE source = 'receipt'`); err != nil {
				return nil, fmt.Errorf("create the insert counter: %w", err)
			}
		}
	}
	s.peakRSS = make([]float64, len(s.replicas))
	sctx, stopScrape := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() { defer close(scraped); s.scrapeLoop(sctx) }()
	defer func() { stopScrape(); <-scraped }()

	res := &result{Replicas: len(s.replicas), Clusters: len(s.clusters), ClickHouseReplicas: len(s.ch.addrs),
		LagElection: s.election, ProbeInstanceIDs: s.instances, MultiCluster: s.multiCluster, ClickHouseCluster: s.chCluster,
		SessionTimeoutS: s.sessionTimeout.Seconds(), Provenance: s.prov}
	loadStart := time.Now()
	for _, c := range s.clusters {
		if c.load, err = benchproc.Start("loadgen "+c.name, filepath.Join(s.dir, "loadgen-"+c.name+".log"), nil, s.loadgen,
			"--brokers", strings.Join(c.brokers, ","), "--topic", c.orders, "--partitions", "6",
			"--receipts-topic", c.receipts, "--group", c.appGroup, "--rate", strconv.FormatFloat(s.o.rate, 'f', -1, 64),
			"--duration", s.o.duration.String(), "--reset-at", "0",
			"--producer", "p-1:0", "--producer", "p-2:+300ms", "--consumer", "c-1:0:3ms"); err != nil {
			return nil, err
		}
		defer c.load.Kill()
	}
	logf("load for %v at %.0f records/s from 2 producers on each of %d cluster(s)", s.o.duration, 2*s.o.rate, len(s.clusters))
	lctx, stopLive := context.WithCancel(ctx)
	liveDone := make(chan struct{})
	go func() { defer close(liveDone); s.liveLagLoop(lctx, res) }()
	defer func() { stopLive(); <-liveDone }()
	// Two groups per cluster that stop at 40% of the load: real committed offsets, lag growing until the load ends.
	if err := s.sleepLoad(ctx, s.o.duration*4/10); err != nil {
		return nil, err
	}
	for _, c := range s.clusters {
		if err := c.commitStalled(2); err != nil {
			return nil, err
		}
	}
	if err := s.sleepLoad(ctx, s.o.duration/10); err != nil {
		return nil, err
	}
	killed := s.pickVictim()
	killAt := time.Now()
	s.replicas[killed].proc.Kill()
	res.Killed, res.KilledAtS = s.replicas[killed].name, killAt.Sub(loadStart).Seconds()
	logf("SIGKILLed %s (pid %d) %.1fs into the load", s.replicas[killed].name, s.replicas[killed].proc.Pid(), res.KilledAtS)
	survivor := s.replicas[1-killed]
	for _, c := range s.clusters {
		if err := c.load.Wait(s.o.duration + 90*time.Second); err != nil {
			return nil, fmt.Errorf("%s: %v\n%s", c.load.Name, err, c.load.Tail(20))
		}
		logf("load on %s done: %s", c.name, c.load.Tail(1))
	}
	res.LoadSeconds = time.Since(loadStart).Seconds()
	stopLive()
	<-liveDone
	s.prov.Phase("load")
	for _, c := range s.clusters {
		processed, dropped, err := loadgenCounts(c.load.Tail(1))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.load.Name, err)
		}
		res.AppProcessed += processed
		res.AppReceiptsDropped += dropped
	}

	allSent := map[receiptKey]int{}
	for _, c := range s.clusters {
		if c.sent, err = c.readReceipts(); err != nil {
			return nil, err
		}
		for k, n := range c.sent {
			allSent[k] += n
			res.RowsSent += n
		}
	}
	logf("receipts topics hold %d receipts (%d keys)", res.RowsSent, len(allSent))
	if err := s.waitStored(ctx, survivor, allSent); err != nil {
		return nil, err
	}
	// The lag of every bench group is static now (producers stopped, the applications exited, the stalled groups
	// never move): compare once the surviving replica serves a snapshot taken after this moment.
	frozen := time.Now()
	for _, c := range s.clusters {
		mism, compared, err := s.compareLag(ctx, c, survivor, frozen)
		if err != nil {
			return nil, err
		}
		res.ClusterLagMismatches += len(mism)
		res.ClusterLagCompared += compared
		for i, m := range mism {
			if i == 10 {
				logf("... %d more lag mismatches on %s", len(mism)-10, c.name)
				break
			}
			logf("lag mismatch on %s: %s", c.name, m)
		}
	}
	// Probes still in flight at the end are swept lost only after the loss timeout: wait it out before counting.
	time.Sleep(probeLossTimeout + 2*probeInterval)
	stopScrape()
	<-scraped
	for _, c := range s.clusters {
		gap, maxActive := noActiveTime(c.samples, killAt)
		fo, ok := failoverTime(c.samples, killAt)
		if !ok {
			return nil, fmt.Errorf("%s: no replica became the active lag exporter after the kill", c.name)
		}
		logf("%s: lag served again %.2fs after the kill, %.2fs without an active lag exporter, at most %d active at once",
			c.name, fo.Seconds(), gap.Seconds(), maxActive)
		res.LagFailoverS, res.LagUnservedS = max(res.LagFailoverS, fo.Seconds()), max(res.LagUnservedS, gap.Seconds())
		res.LagMaxActive = max(res.LagMaxActive, maxActive)
	}
	if err := survivor.proc.Stop(30 * time.Second); err != nil {
		logf("%s stop: %v", survivor.name, err)
	}
	res.RSSMB = s.peakRSS
	if err := s.count(ctx, res, allSent, killAt); err != nil {
		return nil, err
	}
	res.RowsUnaccounted = res.RowsLost + res.AppReceiptsDropped
	res.TotalSeconds = time.Since(begin).Seconds()
	s.prov.Phase("count")
	if res.LiveLagCompared == 0 || res.ClusterLagCompared == 0 {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
		return nil, fmt.Errorf("lag compared with Kafka's command on %d group-partitions during the load and %d after it: a check of nothing is no check",
			res.LiveLagCompared, res.ClusterLagCompared)
	}
	return res, nil
}

func (s *stage) newCluster(name string, brokers []string) *kcluster {
	t := "bs-" + s.id + "-" + name + "-"
	return &kcluster{name: name, brokers: brokers, orders: t + "orders", receipts: t + "receipts", probe: t + "probe",
		prefix: s.prefix + name + "-", appGroup: s.prefix + name + "-app"}
}

// The probe path's settings: a probe every 500 ms per partition, lost when not back within 5 s.
const (
	probeInterval    = 500 * time.Millisecond
	probeLossTimeout = 5 * time.Second
)

// feature is one optional part of a replica's configuration.
type feature struct{ election, instances, multiCluster, chCluster bool }

// config is replica i's `tidemark run` configuration, as a user would write it for two replicas: one top-level
// kafka/collector/lag block for one cluster, or a clusters: list.
func (s *stage) config(i, port int, f feature, clusters []*kcluster, ch *chTarget) string {
	var b strings.Builder
	ind := func(n int, text string) {
		for _, l := range strings.SplitAfter(text, "\n") {
			if l != "" && l != "\n" {
				b.WriteString(strings.Repeat(" ", n))
			}
			b.WriteString(l)
		}
	}
	block := func(n int, c *kcluster) {
		ind(n, fmt.Sprintf("kafka:\n  brokers: [%s]\n  client_id: tidemark-replica-%d\n", strings.Join(c.brokers, ", "), i))
		ind(n, fmt.Sprintf(`collector:
  dead_letter_topic: bs-%s-%s-dlq
  replay_state_topic: bs-%s-%s-replay-state
  receipts:
    enabled: true
    topic: %s
    group: tmbs-%s-%s-receipts
    partitions: 6
  probe:
    enabled: true
    topic: %s
    group: tmbs-%s-%s-probe
    interval: %v
    loss_timeout: %v
    partitions: 4
`, s.id, c.name, s.id, c.name, c.receipts, s.id, c.name, c.probe, s.id, c.name, probeInterval, probeLossTimeout))
		if f.instances {
			ind(n, fmt.Sprintf("    instance_id: replica-%d\n", i))
		}
		ind(n, fmt.Sprintf("lag:\n  poll_interval: 1s\n  group_allow: [\"%s.*\"]\n", c.prefix))
		if !f.multiCluster {
			ind(n, fmt.Sprintf("  cluster: %s\n", c.name))
		}
		if f.election {
			ind(n, fmt.Sprintf("  election:\n    enabled: true\n    group: tmbs-%s-%s-lag-election\n    topic: bs-%s-%s-lag-lease\n",
				s.id, c.name, s.id, c.name))
			if s.o.sessionTimeout > 0 {
				ind(n, fmt.Sprintf("    session_timeout: %v\n", s.o.sessionTimeout))
			}
		}
	}
	if f.multiCluster {
		b.WriteString("clusters:\n")
		for _, c := range clusters {
			fmt.Fprintf(&b, "  - name: %s\n", c.name)
			block(4, c)
		}
	} else {
		block(0, clusters[0])
	}
	fmt.Fprintf(&b, "clickhouse:\n  addr: [%s]\n  database: %s\n  writer:\n    flush_interval: 500ms\n", strings.Join(ch.addrs, ", "), s.db)
	if f.chCluster {
		fmt.Fprintf(&b, "  cluster: %s\n", ch.cluster)
	}
	fmt.Fprintf(&b, "migrate: true\nhttp:\n  listen: 127.0.0.1:%d\nlog:\n  level: info\n", port)
	return b.String()
}

// sessionTimeoutRe finds lag.election.session_timeout in `tidemark run --print-config` (the only session_timeout
// key it prints).
var sessionTimeoutRe = regexp.MustCompile(`(?m)^\s*session_timeout:\s*(\S+)\s*$`)

// detect asks the binary which scale-out keys it knows (`--print-config` fails on an unknown key), and the
// repository whether it can start a ClickHouse cluster; then that the configuration combining them is accepted too
// (an error naming the key otherwise: the bench never stages less than it reports).
func (s *stage) detect(ctx context.Context) error {
	probe := []*kcluster{s.newCluster("a", s.stackBrokers), s.newCluster("b", s.stackBrokers)}
	ch := &chTarget{addrs: []string{s.stackCH}, cluster: "tidemark_ch"}
	check := func(f feature) error {
		p := filepath.Join(s.dir, "probe-config.yaml")
		if err := os.WriteFile(p, []byte(s.config(0, 1, f, probe, ch)), 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, s.tidemark, "run", "--config", p, "--print-config")
		cmd.Env = benchproc.CleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	accepts := func(f feature) bool { return check(f) == nil }
	s.election, s.instances = accepts(feature{election: true}), accepts(feature{instances: true})
	s.multiCluster = accepts(feature{multiCluster: true})
	_, err := os.Stat(chclusterScript)
	s.chCluster = accepts(feature{chCluster: true}) && err == nil
	logf("this build: lag election %v, probe instance ids %v, clusters: %v, clickhouse.cluster with %s: %v",
		s.election, s.instances, s.multiCluster, chclusterScript, s.chCluster)
	if err := check(feature{s.election, s.instances, s.multiCluster, s.chCluster}); err != nil {
		return fmt.Errorf("tidemark run accepts each of these features but not their combination: %w", err)
	}
	if s.election {
		cmd := exec.CommandContext(ctx, s.tidemark, "run", "--config", filepath.Join(s.dir, "probe-config.yaml"), "--print-config")
		cmd.Env = benchproc.CleanEnv()
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("tidemark run --print-config: %w", err)
		}
		m := sessionTimeoutRe.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("tidemark run --print-config shows no lag.election.session_timeout")
		}
		if s.sessionTimeout, err = time.ParseDuration(string(m[1])); err != nil {
			return fmt.Errorf("lag.election.session_timeout %q: %w", m[1], err)
		}
	}
	return nil
}

func (s *stage) startReplica(ctx context.Context, i int) (*replica, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	r := &replica{name: "replica-" + strconv.Itoa(i), port: port, cfg: filepath.Join(s.dir, fmt.Sprintf("replica-%d.yaml", i))}
	f := feature{s.election, s.instances, s.multiCluster, s.chCluster}
	if err := os.WriteFile(r.cfg, []byte(s.config(i, port, f, s.clusters, s.ch)), 0o644); err != nil {
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

// scrapeLoop scrapes every live replica's /metrics every 250 ms until ctx ends: whether it is each cluster's
// active lag exporter, and its peak RSS.
func (s *stage) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		start := time.Now()
		active := make([][]bool, len(s.clusters)) // cluster → replica
		for c := range active {
			active[c] = make([]bool, len(s.replicas))
		}
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
			for c, cl := range s.clusters {
				active[c][i] = s.isActive(fams, cl.name)
			}
		}
		at := time.Now() // after the scrapes: what they saw was so by then at the latest
		s.samplesMu.Lock()
		for c, cl := range s.clusters {
			cl.samples = append(cl.samples, activeSample{At: at, Start: start, Active: active[c]})
		}
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
func (s *stage) isActive(f benchproc.Families, cluster string) bool {
	if s.election {
		v, ok := f.Value("tidemark_lag_exporter_active", map[string]string{"cluster": cluster})
		return ok && v == 1
	}
	_, ok := f.Value("tidemark_lag_exporter_group_partitions", map[string]string{"cluster": cluster})
	return ok
}

// pickVictim is the replica to kill: the first cluster's active lag exporter of the last scrape (so its lease must
// move), else replica 0.
func (s *stage) pickVictim() int {
	s.samplesMu.Lock()
	defer s.samplesMu.Unlock()
	if smp := s.clusters[0].samples; len(smp) > 0 && s.election {
		for i, a := range smp[len(smp)-1].Active {
			if a {
				return i
			}
		}
	}
	return 0
}

// sleepLoad waits d, failing if a load generator exited meanwhile.
func (s *stage) sleepLoad(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	for _, c := range s.clusters {
		if c.load.Exited() {
			return fmt.Errorf("%s exited early: %v\n%s", c.load.Name, c.load.Wait(0), c.load.Tail(20))
		}
	}
	return nil
}

// commitStalled commits, for n groups named prefix+"stalled-g", the high watermark of now divided by g on every
// partition of the orders topic: groups that consumed so far and stopped (no members), lagging more as the load
// goes on.
func (c *kcluster) commitStalled(n int) error {
	client, err := sarama.NewClient(c.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(c.orders)
	if err != nil {
		return err
	}
	for g := 1; g <= n; g++ {
		om, err := sarama.NewOffsetManagerFromClient(c.prefix+"stalled-"+strconv.Itoa(g), client)
		if err != nil {
			return err
		}
		for _, p := range parts {
			hw, err := client.GetOffset(c.orders, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			pom, err := om.ManagePartition(c.orders, p)
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
func readLog(brokers []string, topic string, fn func(partition int32, value []byte) error) error {
	client, err := sarama.NewClient(brokers, saramaConfig())
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
func (c *kcluster) readReceipts() (map[receiptKey]int, error) {
	sent := map[receiptKey]int{}
	var buf []instrument.Receipt
	err := readLog(c.brokers, c.receipts, func(_ int32, v []byte) error {
		var err error
		if buf, err = instrument.DecodeReceiptBatch(buf[:0], v); err != nil {
			return fmt.Errorf("receipts topic %s holds a record the emitter did not write: %w", c.receipts, err)
		}
		for _, r := range buf {
			sent[receiptKey{r.Group, r.Topic, r.Partition, r.Offset}]++
		}
		return nil
	})
	return sent, err
}

// waitStored waits until latency_events (read through the first server) holds every sent key, or nothing new
// arrived for 30 s (then what is missing is lost, and counted so), or the survivor died.
func (s *stage) waitStored(ctx context.Context, survivor *replica, sent map[receiptKey]int) error {
	last, lastChange := -1, time.Now()
	for {
		var n uint64
		if err := s.ch.conns[0].QueryRow(ctx, `SELECT uniqExact(consumer_group, topic, partition, offset) FROM `+s.db+
			`.latency_events WHERE source = 'receipt'`).Scan(&n); err != nil {
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

// compareLag waits until the replica serves, as the cluster's active exporter, a lag snapshot observed after frozen,
// then compares its tidemark_lag_partition_offsets{cluster} with the cluster's own consumer-groups command for the
// bench's groups.
func (s *stage) compareLag(ctx context.Context, c *kcluster, r *replica, frozen time.Time) (mism []string, compared int, err error) {
	deadline := time.Now().Add(60 * time.Second)
	var fams benchproc.Families
	for {
		fams, err = benchproc.Scrape(ctx, r.url("/metrics"))
		if err == nil && s.isActive(fams, c.name) {
			at, ok := fams.Value("tidemark_lag_exporter_snapshot_timestamp_seconds", map[string]string{"cluster": c.name})
			if ok && at > float64(frozen.UnixNano())/1e9 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%s served no active lag snapshot of %s newer than %v within 60 s (last scrape error %v)",
				r.name, c.name, frozen.Format(time.RFC3339Nano), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	ours := map[gpKey]int64{}
	fams.Each("tidemark_lag_partition_offsets", func(l map[string]string, v float64) {
		if l["cluster"] != c.name {
			return
		}
		p, _ := strconv.Atoi(l["partition"])
		ours[gpKey{Group: l["group"], Topic: l["topic"], Partition: int32(p)}] = int64(v)
	})
	out, err := s.describeGroups(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	theirs, err := parseConsumerGroups(strings.NewReader(out), c.prefix)
	if err != nil {
		return nil, 0, err
	}
	logf("lag of %s: kafka-consumer-groups lists %d bench group-partitions with commits, %s exports %d",
		c.name, len(theirs), r.name, len(ours))
	return lagMismatches(theirs, ours), len(theirs), nil
}

// describeGroups runs Kafka's own `kafka-consumer-groups.sh --describe --all-groups` (its tool class) on c.
func (s *stage) describeGroups(ctx context.Context, c *kcluster) (string, error) {
	out, err := benchproc.DescribeGroups(ctx, s.kafkaLib, c.brokers)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.name, err)
	}
	return out, nil
}

// liveLagLoop compares, until ctx ends (the load is over), each cluster's lag as the active replica serves it with
// Kafka's command run just before and just after the scrape (liveLagMismatches), adding to res's LiveLag fields.
// The scrape must serve a snapshot whose reads began after the first command returned (benchproc.SnapshotReadsFrom),
// so every offset in it was read between the two commands. A round without an active replica serving such a snapshot
// within 15 s (the failover) is skipped and logged.
func (s *stage) liveLagLoop(ctx context.Context, res *result) {
	for ctx.Err() == nil {
		for _, c := range s.clusters {
			out, err := s.describeGroups(ctx, c)
			if err != nil {
				if ctx.Err() == nil {
					logf("live lag check on %s: %v", c.name, err)
				}
				return
			}
			beforeAt := time.Now()
			before, err := parseGroupOffsets(strings.NewReader(out), c.prefix)
			if err != nil {
				logf("live lag check on %s: %v", c.name, err)
				continue
			}
			ours, ok := s.snapshotAfter(ctx, c, beforeAt, 15*time.Second)
			if !ok {
				logf("live lag check on %s: no active replica served a snapshot newer than %s", c.name, beforeAt.Format("15:04:05.000"))
				continue
			}
			if out, err = s.describeGroups(ctx, c); err != nil {
				if ctx.Err() == nil {
					logf("live lag check on %s: %v", c.name, err)
				}
				return
			}
			after, err := parseGroupOffsets(strings.NewReader(out), c.prefix)
			if err != nil {
				logf("live lag check on %s: %v", c.name, err)
				continue
			}
			mism, compared := liveLagMismatches(before, after, ours)
			res.LiveLagChecks++
			res.LiveLagCompared += compared
			res.LiveLagMismatches += len(mism)
			logf("live lag check on %s: %d group-partitions compared, %d outside Kafka's bracket", c.name, compared, len(mism))
			for i, m := range mism {
				if i == 5 {
					logf("... %d more", len(mism)-5)
					break
				}
				logf("live lag mismatch on %s: %s", c.name, m)
			}
		}
	}
}

// snapshotAfter scrapes the live replicas every 100 ms until one is c's active lag exporter serving a snapshot whose
// reads began after `after`, and returns that snapshot's committed offsets and lags of the bench's groups.
func (s *stage) snapshotAfter(ctx context.Context, c *kcluster, after time.Time, timeout time.Duration) (map[gpKey]ourOffsets, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, r := range s.replicas {
			if r.proc.Exited() {
				continue
			}
			fams, err := benchproc.Scrape(ctx, r.url("/metrics"))
			if err != nil || !s.isActive(fams, c.name) {
				continue
			}
			if from, ok := benchproc.SnapshotReadsFrom(fams, c.name); !ok || from.Before(after) {
				continue
			}
			ours := benchproc.SnapshotOffsets(fams, c.name, c.prefix)
			return ours, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, false
}

// count fills the ClickHouse and probe-log figures, after every replica stopped. On a ClickHouse cluster every
// replica is synced and counted on its own; the worst replica's figures are reported.
func (s *stage) count(ctx context.Context, res *result, sent map[receiptKey]int, killAt time.Time) error {
	for _, t := range []string{"latency_events", "probe_events", "lag_snapshots", "latency_1m", "latency_1h"} {
		if err := s.ch.sync(ctx, s.db, t); err != nil {
			return err
		}
	}
	inserted, keys := 0, 0
	for i, conn := range s.ch.conns {
		stored := map[receiptKey]int{}
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k receiptKey
			var n uint64
			if err := sc(&k.Group, &k.Topic, &k.Partition, &k.Offset, &n); err != nil {
				return err
			}
			stored[k] = int(n)
			return nil
		}, `SELECT consumer_group, topic, partition, offset, toUInt64(count()) FROM `+s.db+`.`+s.ch.local("latency_events")+
			` FINAL WHERE source = 'receipt' GROUP BY consumer_group, topic, partition, offset`); err != nil {
			return fmt.Errorf("stored receipts on %s: %w", s.ch.addrs[i], err)
		}
		lost, dup, extra := receiptCounts(sent, stored)
		if len(s.ch.conns) > 1 {
			logf("ClickHouse replica %s: %d lost, %d duplicated, %d extra", s.ch.addrs[i], lost, dup, extra)
		}
		res.RowsLost, res.RowsDuplicated, res.RowsExtra = max(res.RowsLost, lost), max(res.RowsDuplicated, dup), max(res.RowsExtra, extra)
		var n uint64
		if err := conn.QueryRow(ctx, `SELECT count() FROM `+s.db+`.bench_receipt_inserts`).Scan(&n); err != nil {
			return fmt.Errorf("count inserts: %w", err)
		}
		inserted += int(n) // an insert reaches one replica's local table, whose view counts it; replication does not
		if i == 0 {
			keys = len(stored)
		}
	}
	res.RowsReinserted = inserted - keys
	if err := s.countRollups(ctx, res); err != nil {
		return err
	}

	conn := s.ch.conns[0]
	var hasInstance uint64
	if err := conn.QueryRow(ctx, `SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = 'instance'`,
		s.db, s.ch.local("probe_events")).Scan(&hasInstance); err != nil {
		return err
	}
	instCol := "''"
	if hasInstance > 0 {
		instCol = "instance"
	}
	for _, c := range s.clusters {
		var lost []probeKey
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k probeKey
			if err := sc(&k.Instance, &k.Partition, &k.Seq); err != nil {
				return err
			}
			lost = append(lost, k)
			return nil
		}, `SELECT `+instCol+`, partition, seq FROM `+s.db+`.`+s.ch.local("probe_events")+` FINAL WHERE topic = ? AND status = 'lost'`, c.probe); err != nil {
			return fmt.Errorf("lost probes: %w", err)
		}
		delivered := map[probeKey]bool{}
		if err := readLog(c.brokers, c.probe, func(p int32, v []byte) error {
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
		res.ProbesDelivered += len(delivered)
		res.ProbesReportedLost += len(lost)
		res.FalseProbeLoss += falseProbeLoss(lost, delivered, hasInstance > 0)

		var ats []int64
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var at int64
			if err := sc(&at); err != nil {
				return err
			}
			ats = append(ats, at)
			return nil
		}, `SELECT DISTINCT at_ms FROM `+s.db+`.`+s.ch.local("lag_snapshots")+` WHERE cluster = ?`, c.name); err != nil {
			return fmt.Errorf("lag snapshots: %w", err)
		}
		last := killAt
		for _, at := range ats {
			last = time.UnixMilli(max(last.UnixMilli(), at))
		}
		res.LagSnapshotMaxGapS = max(res.LagSnapshotMaxGapS, maxGap(ats, killAt, last).Seconds())
	}
	return nil
}

// countRollups compares each rollup tier, per (cluster, topic, group) and minute or hour, with the distinct keys
// (partition, offset, replay class) latency_events holds in that bucket, read without FINAL (rollupDiff): a tier
// counting more in a bucket aggregated a re-inserted row twice, one counting fewer missed rows. A re-inserted row
// that FINAL collapses is still counted twice by the views, so the raw side is the distinct keys, never a row count.
// Through the Distributed tables on a ClickHouse cluster.
func (s *stage) countRollups(ctx context.Context, res *result) error {
	conn := s.ch.conns[0]
	read := func(q string) (map[rollupKey]int64, int64, error) {
		out := map[rollupKey]int64{}
		var total int64
		err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k rollupKey
			var n uint64
			if err := sc(&k.Cluster, &k.Topic, &k.Group, &k.Bucket, &n); err != nil {
				return err
			}
			out[k] += int64(n)
			total += int64(n)
			return nil
		}, q)
		return out, total, err
	}
	for _, tier := range []struct{ table, col, fn string }{{"latency_1m", "minute", "toStartOfMinute"}, {"latency_1h", "hour", "toStartOfHour"}} {
		raw, rawTotal, err := read(`SELECT toString(cluster), topic, consumer_group, toInt64(toUInt32(` + tier.fn + `(observed_time))),
			toUInt64(uniqExact(partition, offset, replay_class)) FROM ` + s.db + `.latency_events
			GROUP BY cluster, topic, consumer_group, ` + tier.fn + `(observed_time)`)
		if err != nil {
			return fmt.Errorf("distinct keys of latency_events by %s: %w", tier.col, err)
		}
		rolled, rollTotal, err := read(`SELECT toString(cluster), topic, consumer_group, toInt64(toUInt32(` + tier.col + `)),
			toUInt64(sumMerge(live) + sumMerge(flagged) + sumMerge(replay) + sumMerge(backfill) + sumMerge(redelivery))
			FROM ` + s.db + `.` + tier.table + ` WHERE stage = 'e2e' GROUP BY cluster, topic, consumer_group, ` + tier.col)
		if err != nil {
			return fmt.Errorf("count %s: %w", tier.table, err)
		}
		doubled, missing := rollupDiff(raw, rolled)
		logf("%s counts %d rows, latency_events holds %d distinct keys in the same buckets: %d doubled, %d missing",
			tier.table, rollTotal, rawTotal, doubled, missing)
		res.RollupRawRows = rawTotal
		res.RollupDoubleCounted = max(res.RollupDoubleCounted, doubled)
		res.RollupMissing = max(res.RollupMissing, missing)
	}
	return nil
}

// deleteTopics removes the run's topics (best effort).
func (s *stage) deleteTopics() {
	for _, c := range s.clusters {
		adm, err := sarama.NewClusterAdmin(c.brokers, saramaConfig())
		if err != nil {
			continue
		}
		if topics, err := adm.ListTopics(); err == nil {
			for t := range topics {
				if strings.HasPrefix(t, "bs-"+s.id+"-") {
					_ = adm.DeleteTopic(t)
				}
			}
		}
		_ = adm.Close()
	}
}
