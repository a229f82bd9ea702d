// Command bench-lag measures the lag exporter users run: the real `tidemark run` binary, started with a user's
// configuration (lag exporter on, no collector paths, no clickhouse block: a pure lag exporter), measured from
// outside over its real endpoints. Run it as `make bench-lag` (100,000 group-partitions) or `make bench-lag-large`
// (500,000), which start the stack if needed. It builds G groups × P partitions (G groups spread over T topics of P
// partitions, offsets committed through the admin API; setup_s is reported apart), then:
//
//   - peer: at min(G, -peer-groups) groups, times `tidemark lag --output json` against Apache Kafka's own
//     consumer-groups command (--describe --all-groups, from TIDEMARK_KAFKA_LIB) on the same cluster, and checks
//     that both report the same offset lag for every bench group-partition;
//   - daemon: starts `tidemark run` and scrapes /metrics over HTTP as Prometheus does (OpenMetrics Accept header,
//     gzip): first_complete_s is process start → first scrape holding all G×P group-partitions; then, over a -window
//     (180 s) with a scrape every -scrape-every (30 s, the interval of the side-by-side runs), the scrape
//     times, the CPU seconds (utime+stime from /proc/PID/stat, scaled to exactly 180 s: cpu_s_per_180s), the RSS
//     (VmRSS from /proc/PID/status every second: median and max), each cycle's duration as the daemon reports it
//     (reads + evaluation), its Kafka requests per cycle, and the series per group-partition of one scrape;
//   - kminion (with -kminion PATH, a kminion binary built beside the project): the same measurements of kminion on
//     the same groups in the same run, and Tidemark/kminion ratios.
//
// With -live (the default) the workload moves from before the daemon starts to the end of the window (live.go):
// every -move-every (5 s) -move-records records go to every partition, and the groups commit after each move, 7 in
// 10 within a few records of the end, 2 in 10 half as fast as the end grows, 1 in 10 never again; so time lag needs
// fresh record reads every cycle, as in a real cluster. Throughout the window, the exported lag of -check-groups
// groups is compared with Kafka's consumer-groups command run just before and just after a snapshot whose reads
// began after the first command (benchproc.LiveLagMismatches); a run that compared nothing, or found a mismatch,
// fails after printing its line. -live=false is the static workload (offsets committed once, nothing moves).
//
// The LAST line of output is one JSON object (result), with its provenance (commit, versions, load average per
// phase). Small runs: `go run ./cmd/bench-lag -groups 200 -partitions 5 -window 40s -scrape-every 10s`.
package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/lagexporter"
)

// exporterResult is what the bench measures of one exporter process.
type exporterResult struct {
	FirstCompleteS float64 `json:"first_complete_s"`
	// FirstCompleteCPU is the process's CPU seconds (utime + stime) at its first complete scrape: the start-up's
	// work, which unlike first_complete_s hardly moves with the machine's load.
	FirstCompleteCPU float64 `json:"first_complete_cpu_s"`
	ScrapeP50        float64 `json:"scrape_p50_s"`
	ScrapeMax        float64 `json:"scrape_max_s"`
	Scrapes          int     `json:"scrapes"`
	ScrapeBytes      int     `json:"scrape_bytes_gzip"`
	CPUPer180S       float64 `json:"cpu_s_per_180s"`
	RSSMB            float64 `json:"rss_mb"` // median over the window
	RSSMaxMB         float64 `json:"rss_max_mb"`
	Series           int     `json:"series"`
	SeriesPerGP      float64 `json:"series_per_group_partition"`
	// RequestsPerCycle: Kafka requests per poll cycle (Tidemark) or per scrape (kminion, which reads Kafka when
	// scraped), from the exporter's own request counter.
	RequestsPerCycle float64 `json:"requests_per_cycle"`
	WindowS          float64 `json:"window_s"`
}

type result struct {
	GroupPartitions int     `json:"group_partitions"`
	Groups          int     `json:"groups"`
	Partitions      int     `json:"partitions"`
	Topics          int     `json:"topics"`
	Brokers         int     `json:"brokers"`
	Coordinators    int     `json:"coordinators"`
	Granularity     string  `json:"granularity"`
	CycleP50        float64 `json:"cycle_p50_s"` // reads + evaluation, as the daemon reports its cycles
	CycleReadP50    float64 `json:"cycle_read_p50_s"`
	CycleEvalP50    float64 `json:"cycle_eval_p50_s"`
	CycleMax        float64 `json:"cycle_max_s"`
	Cycles          int     `json:"cycles"`
	// FirstCycleRead / FirstCycleEval are the first cycle's reads (cold: every lagging partition's record is read)
	// and evaluation, behind first_complete_s.
	FirstCycleRead float64 `json:"first_cycle_read_s"`
	FirstCycleEval float64 `json:"first_cycle_eval_s"`
	RequestsLimit  int     `json:"requests_limit"` // 10 × (brokers + coordinators)
	exporterResult
	PeerGroups        int         `json:"peer_groups"`
	PeerTidemark      float64     `json:"peer_tidemark_s"`
	PeerKafka         float64     `json:"peer_kafka_s"`
	PeerRatio         float64     `json:"peer_ratio"`
	PeerRowsCompared  int         `json:"peer_rows_compared"`
	PeerLagMismatches int         `json:"peer_lag_mismatches"`
	Live              *liveResult `json:"live,omitempty"`
	// BrokerRequestsPerCycle (-broker-requests): the exporter's request types (exporterRequests) the broker
	// answered between two cycle ends, per cycle, from Kafka's RequestMetrics; BrokerRequests per type;
	// BrokerCycles the cycles they cover.
	BrokerRequestsPerCycle float64            `json:"broker_requests_per_cycle,omitempty"`
	BrokerRequests         map[string]float64 `json:"broker_requests_per_cycle_by_type,omitempty"`
	BrokerCycles           float64            `json:"broker_cycles,omitempty"`
	SetupS                 float64            `json:"setup_s"`
	Kminion                *exporterResult    `json:"kminion,omitempty"`
	// Tidemark / kminion, each figure measured in this run (lower is better for all four).
	VsKminionScrape *float64 `json:"vs_kminion_scrape_p50,omitempty"`
	VsKminionCPU    *float64 `json:"vs_kminion_cpu,omitempty"`
	VsKminionRSS    *float64 `json:"vs_kminion_rss,omitempty"`
	VsKminionFirst  *float64 `json:"vs_kminion_first_complete,omitempty"`
	LoadAvg         string   `json:"loadavg"`
	*benchproc.Provenance
}

// liveResult describes the live workload of the window and its lag check against Kafka's command.
type liveResult struct {
	MoveEveryS     float64 `json:"move_every_s"`
	RecordsPerMove int     `json:"records_per_move"` // per partition
	Mix            string  `json:"mix"`
	// Moves completed from the exporter's start to the end of the window, and failed produce or commit calls.
	Moves      int64 `json:"moves"`
	MoveErrors int64 `json:"move_errors"`
	// CheckGroups groups' lag compared Checks times during the window: Compared group-partitions in all,
	// Mismatches outside Kafka's bracket.
	CheckGroups int `json:"check_groups"`
	Checks      int `json:"checks"`
	Compared    int `json:"compared"`
	Mismatches  int `json:"mismatches"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lag:", err)
		os.Exit(1)
	}
}

func run() error {
	groups := flag.Int("groups", 5000, "consumer groups (G)")
	parts := flag.Int("partitions", 20, "partitions per topic (P); each group commits on every partition of one topic")
	topics := flag.Int("topics", 10, "topics the groups are spread over")
	records := flag.Int("records", 200, "records written to every partition")
	peerGroups := flag.Int("peer-groups", 1000, "groups at which tidemark lag is timed against Kafka's consumer-groups command (0: skip)")
	window := flag.Duration("window", 180*time.Second, "measurement window of CPU, RSS, scrapes and cycles")
	scrapeEvery := flag.Duration("scrape-every", 30*time.Second, "scrape interval in the window")
	poll := flag.Duration("poll-interval", 30*time.Second, "the daemon's lag.poll_interval")
	granularity := flag.String("granularity", "", "the daemon's lag.granularity (empty: its default)")
	kminionBin := flag.String("kminion", os.Getenv("TIDEMARK_BENCH_KMINION"), "a kminion binary: measure it too, on the same groups (default $TIDEMARK_BENCH_KMINION)")
	keep := flag.Bool("keep", false, "keep the topics and groups afterwards")
	live := flag.Bool("live", true, "keep producing and committing through the window (70% of groups keep up, 20% lag, 10% stopped); false: the static workload")
	moveEvery := flag.Duration("move-every", 5*time.Second, "-live: how often records are produced to every partition and the groups commit")
	moveRecords := flag.Int("move-records", 5, "-live: records produced to every partition per move")
	checkGroups := flag.Int("check-groups", 30, "-live: groups whose exported lag is checked against Kafka's command during the window")
	brokerReqs := flag.Bool("broker-requests", false, "run on a one-broker Kafka of the bench's own and count the exporter's requests at the broker (RequestMetrics over JMX); the live lag check then runs after the count, from about a third of the window on")
	pprofDir := flag.String("pprof", "", "write the daemon's CPU profile over the window and a heap profile after it to this directory")
	flag.Parse()
	brokers := strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		return errors.New("TIDEMARK_KAFKA_BROKERS unset: run through `make bench-lag` (or eval \"$(bash deploy/local/stack.sh up)\")")
	}
	ctx := context.Background()
	brokerPid := 0
	if *brokerReqs {
		bs, pid, stop, err := ownKafka(ctx)
		if err != nil {
			return err
		}
		defer stop()
		brokers, brokerPid = bs, pid
		fmt.Fprintf(os.Stderr, "bench-lag: on the bench's own broker %s (pid %d)\n", bs[0], pid)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "benchlag_" + hex.EncodeToString(b[:])
	prov := benchproc.NewProvenance(ctx, "github.com/IBM/sarama")
	prov.Rounds = 1
	prov.Peers["kafka"] = strings.TrimPrefix(filepath.Base(filepath.Dir(os.Getenv("TIDEMARK_KAFKA_LIB"))), "kafka-")
	res := result{Groups: *groups, Partitions: *parts, Topics: *topics, GroupPartitions: *groups * *parts, Provenance: prov}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench-lag: "+format+"\n", args...) }

	dir, err := os.MkdirTemp("", "bench-lag")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "tidemark")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tidemark").CombinedOutput(); err != nil {
		return fmt.Errorf("build tidemark: %v\n%s", err, out)
	}

	conf := kafka.NewReaderConfig("tidemark-bench-lag")
	reader, err := kafka.NewClusterReader(brokers, conf)
	if err != nil {
		return err
	}
	defer reader.Close()
	adm, err := kafka.NewAdmin(brokers, kafka.NewReaderConfig("tidemark-bench-lag-admin"))
	if err != nil {
		return err
	}
	defer adm.Close()

	start := time.Now()
	topicName := func(t int) string { return fmt.Sprintf("%s_t%02d", prefix, t) }
	groupName := func(g int) string { return fmt.Sprintf("%s_g%05d", prefix, g) }
	// committed offset of group g on partition p: spread over [0, records] so lags differ
	offsetOf := func(g, p int) int64 { return int64((g*7 + p*13) % (*records + 1)) }
	for t := range *topics {
		if err := adm.CreateTopic(topicName(t), int32(*parts), nil); err != nil {
			return err
		}
	}
	cleaned := *keep
	cleanup := func() {
		if cleaned {
			return
		}
		cleaned = true
		logf("cleaning up")
		_ = forEach(*groups, 8, func(g int) error { return adm.DeleteGroup(groupName(g)) })
		for t := range *topics {
			_ = adm.DeleteTopic(topicName(t))
		}
	}
	defer cleanup()
	if err := waitTopics(ctx, reader, prefix, *topics, *parts); err != nil {
		return err
	}
	all := make([]int32, *parts)
	for p := range all {
		all[p] = int32(p)
	}
	for t := range *topics {
		if err := adm.Produce(topicName(t), all, *records); err != nil {
			return err
		}
	}
	commit := func(from, to int) error {
		return forEach(to-from, 8, func(i int) error {
			g := from + i
			offs := map[int32]int64{}
			for p := range *parts {
				offs[int32(p)] = offsetOf(g, p)
			}
			return reader.CommitOffsets(ctx, groupName(g), map[string]map[int32]int64{topicName(g % *topics): offs})
		})
	}
	peerAt := min(*peerGroups, *groups)
	if err := commit(0, peerAt); err != nil {
		return err
	}
	logf("built %d topics x %d partitions, %d groups in %.1fs", *topics, *parts, peerAt, time.Since(start).Seconds())

	if peerAt > 0 {
		if err := peer(ctx, &res, bin, brokers, prefix, peerAt, logf); err != nil {
			return fmt.Errorf("peer comparison: %w", err)
		}
	}
	if err := commit(peerAt, *groups); err != nil {
		return err
	}
	res.SetupS = time.Since(start).Seconds()
	prov.Phase("setup")
	logf("built %d groups in %.1fs", *groups, res.SetupS)
	if _, err := reader.Metadata(ctx); err != nil {
		return err
	}
	if _, err := reader.Groups(ctx); err != nil { // learns each group's coordinator
		return err
	}
	res.Brokers, res.Coordinators = len(reader.Brokers()), reader.Coordinators()
	res.RequestsLimit = 10 * (res.Brokers + res.Coordinators)

	var mv *mover
	var lc *liveCheck
	stopMoving := func() {}
	if *live {
		mv = &mover{every: *moveEvery, records: *moveRecords, topics: *topics, groups: *groups, parts: *parts,
			initial: *records, base: offsetOf, topic: topicName, group: groupName, adm: adm, reader: reader, logf: logf, all: all}
		mctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); mv.run(mctx) }()
		stopMoving = func() { cancel(); <-done; stopMoving = func() {} }
		defer stopMoving()
		lc = &liveCheck{cluster: "bench", prefix: prefix, lib: os.Getenv("TIDEMARK_KAFKA_LIB"), brokers: brokers, logf: logf}
		for g := 0; g < min(*checkGroups, *groups); g++ {
			lc.groups = append(lc.groups, groupName(g*(*groups)/min(*checkGroups, *groups)))
		}
		logf("live workload: %d records to every partition every %v; 70%% of groups keep up, 20%% lag, 10%% stopped",
			*moveRecords, *moveEvery)
	}

	// The daemon, as a user runs it: a config file, nothing else. The environment is the bench's minus every
	// TIDEMARK_ variable (the stack's TIDEMARK_CLICKHOUSE_ADDR would configure ClickHouse).
	port, err := benchproc.FreePort()
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "tidemark.yaml")
	gran := ""
	if *granularity != "" {
		gran = "\n  granularity: " + *granularity
	}
	pprofOn := *pprofDir != ""
	cfgText := fmt.Sprintf(`kafka:
  brokers: [%s]
lag:
  cluster: bench
  poll_interval: %s%s
  group_allow: ["%s_.*"]
  topic_allow: ["%s_.*"]
http:
  listen: 127.0.0.1:%d
  pprof: %v
`, strings.Join(brokers, ", "), *poll, gran, prefix, prefix, port, pprofOn)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return err
	}
	logf("tidemark run --config (%d group-partitions):\n%s", res.GroupPartitions, cfgText)
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Env = benchproc.CleanEnv()
	cmd.Stderr = &prefixWriter{prefix: "  tidemark: ", w: os.Stderr, keep: "level=ERROR|level=WARN"}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	var cycles []cycleSample
	var profiles func() error
	var startup func() error
	if pprofOn {
		profiles = func() error { return fetchProfiles(base, *pprofDir, *window) }
		startup = func() error { return fetchStartupProfile(base, *pprofDir) }
	}
	var checkErr, brokerErr error
	if lc != nil || *brokerReqs {
		prof := profiles
		profiles = func() error {
			done := make(chan error, 1)
			go func() {
				if prof == nil {
					done <- nil
					return
				}
				done <- prof()
			}()
			end := time.Now().Add(*window - 5*time.Second)
			if *brokerReqs {
				// a quarter of the window, then the first cycle end after it: at the default 30 s poll about two
				// cycles, counted whole, and the rest of the window for the live lag check (a minute a check here)
				brokerErr = brokerCount(ctx, &res, brokerPid, base+"/metrics", time.Now().Add(*window/4))
			}
			if lc != nil {
				lc.url = base + "/metrics"
				checkErr = lc.run(ctx, end)
			}
			return <-done
		}
	}
	tm, err := measure(cmd, base+"/metrics", measureOpts{
		window: *window, every: *scrapeEvery, gp: res.GroupPartitions,
		// Complete is judged from the exposition, as kminion's is: one lag series per group-partition. At
		// granularity topic there are none, and the daemon's own count of group-partitions is the fallback.
		complete: func(m metrics) bool {
			if *granularity == string(lagexporter.GranularityTopic) {
				return m.value("tidemark_lag_exporter_group_partitions") == float64(res.GroupPartitions)
			}
			return m.count("tidemark_lag_partition_offsets") == res.GroupPartitions
		},
		series: func(name string) bool {
			return strings.HasPrefix(name, "tidemark_lag_") && !strings.HasPrefix(name, "tidemark_lag_exporter_") || strings.HasPrefix(name, "tidemark_partition_")
		},
		requests: "tidemark_lag_exporter_kafka_requests_total", perCycle: "tidemark_lag_exporter_cycles_total",
		onScrape: func(m metrics) {
			c := cycleSample{n: m.value("tidemark_lag_exporter_cycles_total"), read: m.value("tidemark_lag_exporter_cycle_duration_seconds"),
				eval: m.value("tidemark_lag_exporter_evaluation_duration_seconds")}
			if len(cycles) == 0 || cycles[len(cycles)-1].n != c.n {
				cycles = append(cycles, c)
			}
		},
		during: profiles, startup: startup,
	}, logf)
	if err != nil {
		return fmt.Errorf("tidemark run: %w", err)
	}
	res.exporterResult = *tm
	prov.Phase("tidemark")
	if mv != nil {
		res.Live = &liveResult{MoveEveryS: moveEvery.Seconds(), RecordsPerMove: *moveRecords,
			Mix: "70% keep up, 20% lag, 10% stopped", Moves: mv.moves.Load(), MoveErrors: mv.errs.Load(),
			CheckGroups: len(lc.groups), Checks: lc.checks, Compared: lc.compared, Mismatches: lc.mism}
		if checkErr != nil {
			return fmt.Errorf("live lag check: %w", checkErr)
		}
	}
	if brokerErr != nil {
		return fmt.Errorf("broker requests: %w", brokerErr)
	}
	res.Granularity = *granularity
	if res.Granularity == "" {
		res.Granularity = string(lagexporter.GranularityPartition)
	}
	if len(cycles) > 0 {
		res.FirstCycleRead, res.FirstCycleEval = cycles[0].read, cycles[0].eval
	}
	if len(cycles) > 1 {
		cycles = cycles[1:] // the first sample is the cycle behind the first complete scrape (cold caches)
	}
	var tot, rd, ev []float64
	for _, c := range cycles {
		tot, rd, ev = append(tot, c.read+c.eval), append(rd, c.read), append(ev, c.eval)
	}
	if len(tot) > 0 {
		res.Cycles = len(tot)
		res.CycleP50, res.CycleReadP50, res.CycleEvalP50, res.CycleMax = p50(tot), p50(rd), p50(ev), slices.Max(tot)
	}

	if *kminionBin != "" {
		km, err := runKminion(*kminionBin, dir, brokers, prefix, *window, *scrapeEvery, res.GroupPartitions, logf)
		if err != nil {
			return fmt.Errorf("kminion: %w", err)
		}
		res.Kminion = km
		prov.Phase("kminion")
		ratio := func(a, b float64) *float64 { r := a / b; return &r }
		res.VsKminionScrape = ratio(res.ScrapeP50, km.ScrapeP50)
		res.VsKminionCPU = ratio(res.CPUPer180S, km.CPUPer180S)
		res.VsKminionRSS = ratio(res.RSSMB, km.RSSMB)
		res.VsKminionFirst = ratio(res.FirstCompleteS, km.FirstCompleteS)
	}
	stopMoving() // kminion, when measured, ran under the same live workload
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	cleanup() // before the result, so that the JSON object is the last line
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	if res.PeerLagMismatches > 0 {
		return fmt.Errorf("%d of %d group-partitions' lag differ from Kafka's consumer-groups command", res.PeerLagMismatches, res.PeerRowsCompared)
	}
	if res.Live != nil && (res.Live.Compared == 0 || res.Live.Mismatches > 0) {
		return fmt.Errorf("live lag check: %d mismatches in %d group-partitions compared (none compared is no check)",
			res.Live.Mismatches, res.Live.Compared)
	}
	return nil
}

type cycleSample struct{ n, read, eval float64 }

// runKminion measures kminion on the same groups: consumer groups through the admin API at partition granularity
// (its defaults), restricted to the bench's groups and topics, log dirs off.
func runKminion(bin, dir string, brokers []string, prefix string, window, every time.Duration, gp int,
	logf func(string, ...any)) (*exporterResult, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "kminion.yaml")
	cfgText := fmt.Sprintf(`kafka:
  brokers: [%s]
  clientId: kminion-bench
minion:
  consumerGroups:
    enabled: true
    scrapeMode: adminApi
    granularity: partition
    allowedGroups: ["/^%s_.*/"]
  topics:
    granularity: partition
    allowedTopics: ["/^%s_.*/"]
  logDirs:
    enabled: false
exporter:
  host: 127.0.0.1
  port: %d
logger:
  level: warn
`, strings.Join(brokers, ", "), prefix, prefix, port)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		return nil, err
	}
	logf("kminion (%d group-partitions):\n%s", gp, cfgText)
	cmd := exec.Command(bin)
	cmd.Env = append(benchproc.CleanEnv(), "CONFIG_FILEPATH="+cfgPath)
	cmd.Stderr = &prefixWriter{prefix: "  kminion: ", w: os.Stderr, keep: `"level":"(error|warn)"`}
	lagSeries := "kminion_kafka_consumer_group_topic_partition_lag"
	return measure(cmd, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), measureOpts{
		window: window, every: every, gp: gp,
		complete: func(m metrics) bool { return m.count(lagSeries) == gp },
		series: func(name string) bool {
			return strings.HasPrefix(name, "kminion_kafka_consumer_group") || strings.HasPrefix(name, "kminion_kafka_topic")
		},
		requests: "kminion_kafka_requests_sent_total",
	}, logf)
}

type measureOpts struct {
	window, every time.Duration
	gp            int
	complete      func(metrics) bool
	series        func(name string) bool // the series that grow with groups and partitions
	// requests is the exporter's Kafka request counter; perCycle the counter of its cycles ("": per scrape).
	requests, perCycle string
	onScrape           func(metrics)
	during             func() error // runs concurrently with the window (profiles)
	// startup runs from the first answer of the HTTP server on (the start-up profile); during starts after it ends.
	startup func() error
}

// measure starts cmd, waits for its first complete scrape, then measures one window, and stops it (SIGTERM).
func measure(cmd *exec.Cmd, url string, o measureOpts, logf func(string, ...any)) (*exporterResult, error) {
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	defer stop()
	pid := cmd.Process.Pid
	var r exporterResult
	// first complete metrics: scrape back to back (100 ms apart) until every group-partition is there
	var first metrics
	var startupDone chan error
	for {
		select {
		case err := <-exited:
			stopped = true
			return nil, fmt.Errorf("exited before its first complete scrape: %v", err)
		default:
		}
		if time.Since(t0) > 15*time.Minute {
			return nil, errors.New("no complete scrape within 15 minutes")
		}
		_, _, m, err := scrape(url)
		if err == nil && o.startup != nil && startupDone == nil {
			startupDone = make(chan error, 1)
			go func() { startupDone <- o.startup() }()
		}
		if err == nil && o.complete(m) {
			r.FirstCompleteS = time.Since(t0).Seconds()
			if r.FirstCompleteCPU, err = procCPUSeconds(pid); err != nil {
				return nil, err
			}
			first = m
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for name, n := range first.counts {
		if o.series(name) {
			r.Series += n
		}
	}
	r.SeriesPerGP = float64(r.Series) / float64(o.gp)
	logf("first complete scrape after %.2fs (%.2f CPU s): %d series (%.2f per group-partition)", r.FirstCompleteS,
		r.FirstCompleteCPU, r.Series, r.SeriesPerGP)
	if o.onScrape != nil {
		o.onScrape(first)
	}

	var during chan error
	if o.during != nil {
		during = make(chan error, 1)
		go func() {
			if startupDone != nil {
				if err := <-startupDone; err != nil {
					logf("start-up profile: %v", err)
				}
			}
			during <- o.during()
		}()
	}
	w0 := time.Now()
	cpu0, err := procCPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	var rss, scrapes []float64
	var req0, req1, per0, per1 float64
	nScrapes := 0
	nextScrape := w0.Add(o.every / 2) // mid-interval: never on a cycle boundary
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(w0) < o.window {
		select {
		case err := <-exited:
			stopped = true
			return nil, fmt.Errorf("exited during the window: %v", err)
		case <-tick.C:
		}
		if v, err := benchproc.StatusMB(pid, "VmRSS"); err == nil {
			rss = append(rss, v)
		}
		if time.Now().After(nextScrape) {
			nextScrape = nextScrape.Add(o.every)
			d, n, m, err := scrape(url)
			if err != nil {
				return nil, fmt.Errorf("scrape: %w", err)
			}
			scrapes, r.ScrapeBytes = append(scrapes, d), n
			if nScrapes == 0 {
				req0, per0 = m.value(o.requests), m.value(o.perCycle)
			}
			req1, per1 = m.value(o.requests), m.value(o.perCycle)
			nScrapes++
			if o.onScrape != nil {
				o.onScrape(m)
			}
		}
	}
	cpu1, err := procCPUSeconds(pid)
	if err != nil {
		return nil, err
	}
	r.WindowS = time.Since(w0).Seconds()
	r.CPUPer180S = (cpu1 - cpu0) / r.WindowS * 180
	if len(rss) == 0 || len(scrapes) == 0 {
		return nil, errors.New("window too short: no RSS sample or no scrape")
	}
	r.RSSMB, r.RSSMaxMB = p50(rss), slices.Max(rss)
	r.ScrapeP50, r.ScrapeMax, r.Scrapes = p50(scrapes), slices.Max(scrapes), len(scrapes)
	switch {
	case o.perCycle != "" && per1 > per0:
		r.RequestsPerCycle = (req1 - req0) / (per1 - per0)
	case o.perCycle == "" && nScrapes > 1:
		r.RequestsPerCycle = (req1 - req0) / float64(nScrapes-1)
	}
	if during != nil {
		if err := <-during; err != nil {
			logf("profiles: %v", err)
		}
	}
	logf("window %.0fs: scrape p50 %.3fs, CPU %.1fs per 180s, RSS median %.0f MB (max %.0f), %.1f requests per cycle",
		r.WindowS, r.ScrapeP50, r.CPUPer180S, r.RSSMB, r.RSSMaxMB, r.RequestsPerCycle)
	return &r, nil
}

// fetchProfiles writes the daemon's CPU profile over most of the window and a heap profile after it.
func fetchProfiles(base, dir string, window time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secs := max(int((window - 10*time.Second).Seconds()), 5)
	get := func(path, file string) error {
		resp, err := (&http.Client{Timeout: window + time.Minute}).Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}
	if err := get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), "tidemark-cpu.pprof"); err != nil {
		return err
	}
	if err := get("/debug/pprof/heap?gc=1", "tidemark-heap.pprof"); err != nil {
		return err
	}
	return get("/debug/pprof/allocs", "tidemark-allocs.pprof")
}

// startupProfileSeconds is the length of the start-up CPU profile: the first cycle and its rendering at 100,000
// group-partitions on a loaded machine.
const startupProfileSeconds = 15

// fetchStartupProfile writes the daemon's CPU profile of its first startupProfileSeconds after its HTTP server
// answered (the cold first cycle, its evaluation and first rendering): tidemark-startup-cpu.pprof.
func fetchStartupProfile(base, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * startupProfileSeconds * time.Second}).Get(
		fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, startupProfileSeconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("start-up profile: %s", resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, "tidemark-startup-cpu.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// metrics is one scrape, parsed just enough: series per metric name and the value of each name's first series.
type metrics struct {
	counts map[string]int
	first  map[string]float64
}

func (m metrics) value(name string) float64 { return m.first[name] }
func (m metrics) count(name string) int     { return m.counts[name] }

func parseMetrics(text []byte) metrics {
	m := metrics{counts: map[string]int{}, first: map[string]float64{}}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		end := bytes.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := string(line[:end])
		m.counts[name]++
		if m.counts[name] == 1 {
			rest := line[end:]
			if rest[0] == '{' {
				if i := bytes.LastIndexByte(rest, '}'); i >= 0 {
					rest = rest[i+1:]
				}
			}
			f := strings.Fields(string(rest))
			if len(f) > 0 {
				m.first[name], _ = strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return m
}

// prometheusAccept is the Accept header Prometheus sends by default.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrape GETs url as Prometheus does (gzip) and returns the time until the whole compressed body was read, its
// size, and the parsed metrics.
func scrape(url string) (float64, int, metrics, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, 0, metrics{}, err
	}
	req.Header.Set("Accept", prometheusAccept)
	req.Header.Set("Accept-Encoding", "gzip")
	t := time.Now()
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return 0, 0, metrics{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t).Seconds()
	if err != nil {
		return 0, 0, metrics{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, metrics{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	text := body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return 0, 0, metrics{}, err
		}
		if text, err = io.ReadAll(zr); err != nil {
			return 0, 0, metrics{}, err
		}
	}
	return d, len(body), parseMetrics(text), nil
}

// procCPUSeconds returns the user + system CPU time of process pid (fields 14 and 15 of /proc/PID/stat, in clock
// ticks of 1/100 s: USER_HZ is 100 on Linux).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])) // after "pid (comm) ": field 3 is f[0]
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return (ut + st) / 100, nil
}

// prefixWriter passes on the lines matching keep (warnings and errors of the process under test), prefixed.
type prefixWriter struct {
	prefix string
	w      io.Writer
	keep   string
	re     *regexp.Regexp
	mu     sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.re == nil {
		p.re = regexp.MustCompile(p.keep)
	}
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		if line := p.buf[:i+1]; p.re.Match(line) {
			_, _ = fmt.Fprintf(p.w, "%s%s", p.prefix, line)
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func waitTopics(ctx context.Context, r *kafka.ClusterReader, prefix string, topics, parts int) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		md, err := r.Metadata(ctx)
		if err == nil {
			ready := 0
			for _, t := range md {
				if strings.HasPrefix(t.Topic, prefix) && len(t.Partitions) == parts {
					ok := true
					for _, p := range t.Partitions {
						ok = ok && p.Leader >= 0
					}
					if ok {
						ready++
					}
				}
			}
			if ready == topics {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("topics not ready after 60s")
}

// forEach runs fn(0..n-1) on workers goroutines and returns the first error.
func forEach(n, workers int, fn func(i int) error) error {
	var mu sync.Mutex
	var first error
	next := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

func p50(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

var cgRow = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)`)

// peer times `tidemark lag --output json` (all groups) against Kafka's consumer-groups command (--all-groups) and
// compares the offset lag of every bench group-partition.
func peer(ctx context.Context, res *result, bin string, brokers []string, prefix string, n int, logf func(string, ...any)) error {
	lib := os.Getenv("TIDEMARK_KAFKA_LIB")
	if lib == "" {
		return errors.New("TIDEMARK_KAFKA_LIB unset (deploy/local/stack.sh exports it)")
	}
	bs := strings.Join(brokers, ",")
	// The group listing of a coordinator can trail a commit by a moment: wait until tidemark sees all n groups.
	var ours []byte
	var dur float64
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		t := time.Now()
		ours, err = exec.CommandContext(ctx, bin, "lag", "--output", "json", "--brokers", bs).Output()
		dur = time.Since(t).Seconds()
		if err != nil {
			return fmt.Errorf("tidemark lag: %w", err)
		}
		if bytes.Count(ours, []byte(`"group":"`+prefix)) >= n {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	res.PeerTidemark = dur
	t := time.Now()
	theirs, err := exec.CommandContext(ctx, "java", "-cp", lib+"/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", bs, "--describe", "--all-groups").Output()
	res.PeerKafka = time.Since(t).Seconds()
	if err != nil {
		return fmt.Errorf("kafka consumer-groups command: %w", err)
	}
	res.PeerRatio = res.PeerTidemark / res.PeerKafka
	res.PeerGroups = n
	var snap lagexporter.Snapshot
	if err := json.Unmarshal(ours, &snap); err != nil {
		return fmt.Errorf("decode tidemark json: %w", err)
	}
	lagOf := map[string]int64{}
	for _, g := range snap.Groups {
		for _, p := range g.Partitions {
			if p.HasCommit && p.Known {
				lagOf[g.Group+"/"+p.Topic+"/"+strconv.Itoa(int(p.Partition))] = p.Lag
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(theirs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := cgRow.FindStringSubmatch(sc.Text())
		if m == nil || !strings.HasPrefix(m[1], prefix) || m[6] == "-" {
			continue
		}
		want, _ := strconv.ParseInt(m[6], 10, 64)
		got, ok := lagOf[m[1]+"/"+m[2]+"/"+m[3]]
		res.PeerRowsCompared++
		if !ok || got != want {
			res.PeerLagMismatches++
			if res.PeerLagMismatches <= 5 {
				logf("lag mismatch %s %s/%s: kafka %d, tidemark %d (present %v)", m[1], m[2], m[3], want, got, ok)
			}
		}
	}
	logf("peer at %d groups: tidemark %.2fs, kafka %.2fs, %d rows compared, %d mismatches", n, res.PeerTidemark,
		res.PeerKafka, res.PeerRowsCompared, res.PeerLagMismatches)
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the consumer-groups command's output: %w", err)
	}
	if res.PeerRowsCompared == 0 {
		return fmt.Errorf("compared no row with Kafka's consumer-groups command (%d bytes of output): a check of nothing is no check", len(theirs))
	}
	return nil
}
