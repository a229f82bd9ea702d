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
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
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
