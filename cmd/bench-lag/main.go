// Command bench-lag measures the lag exporter users run, the real `tidemark run` binary started with a user's
// configuration (lag exporter on, no collector paths, no clickhouse block), beside the peers a user would compare it
// with: kminion and kafka_exporter, built from their repositories' pinned commits by peers.sh (versions printed).
// Run it as `make bench-lag` (100,000 group-partitions) or `make bench-lag-large` (500,000).
//
// Cluster. The bench starts its own Kafka brokers with deploy/local/kafka.sh (own state directory and ports, JMX on),
// so that the brokers' request counters hold its traffic only, and stops them at the end.
//
// Live workload. G groups × P partitions: T topics of P partitions, group g reads every partition of topic g mod T.
// One producer writes -rate records per second to every partition through the whole run (timestamps are the
// producer's; the bench keeps each acknowledged record's offset and timestamp), and one client commits for every
// moving group once per -commit-every through OffsetCommit requests: 80% of the groups keep up (commit the end
// offset), 15% lag (advance at half the produce rate, their lag grows), 5% are stopped (no commit after setup, their
// lag and time lag grow). Time lag therefore needs fresh record reads every cycle.
//
// Phases. First an idle phase (no exporter: the workload's broker requests of the exporters' types and broker CPU,
// which the exporters' figures are net of), then -rounds rounds, each measuring every exporter alone in turn, the order
// rotated each round, on the same cluster, cadence (-poll-interval = -scrape-every) and -window. For each exporter
// and round: start → first scrape with a lag series for every group-partition (first_complete_s), that scrape
// checked against Kafka's consumer-groups command run right after it (first_correct), then over the window the
// scrape times (gzip, Prometheus's Accept header), its CPU (utime+stime from /proc, scaled to 180 s), RSS (VmRSS every
// second: median, max), the brokers' RequestMetrics (RequestsPerSec Count by request type, read with Kafka's JmxTool
// at the window's ends, the workload's request types left out) and broker CPU; after the window, the workload and the
// exporter still running, a scrape checked against Kafka's command run just before it (so the command's requests
// stay out of the window's count). A check compares every group-partition of Kafka's command with the
// exporter's lag series (and time-lag series, for an exporter that has one: Tidemark) from its /metrics, within the
// tolerance one poll interval of the live workload allows (tolerance in truth.go). A check with 0 rows fails the run.
//
// The LAST line of output is one JSON object (result). Small runs: `make bench-lag BENCH_LAG_ARGS='-groups 500'`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"crypto/rand"
	"encoding/hex"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/lagexporter"
)

// toolResult is one exporter's figures over the rounds: medians with min and max, and the checks summed.
type toolResult struct {
	Version           string             `json:"version"`
	Rounds            int                `json:"rounds"`
	ScrapeP50         stat               `json:"scrape_p50_s"`
	ScrapeP99         float64            `json:"scrape_p99_s"` // over every window scrape of every round
	CPUPer180S        stat               `json:"cpu_s_per_180s"`
	RSSMB             stat               `json:"rss_mb"`
	RSSMaxMB          float64            `json:"rss_max_mb"`
	FirstCompleteS    stat               `json:"first_complete_s"`
	FirstCompleteCPU  stat               `json:"first_complete_cpu_s"`
	FirstCorrect      int                `json:"first_correct_rounds"` // rounds whose first complete scrape was also correct
	BrokerReqPerCycle stat               `json:"broker_requests_per_cycle"`
	BrokerReqByType   map[string]float64 `json:"broker_requests_per_cycle_by_type"` // medians, net of the idle phase
	BrokerCPUPer180S  stat               `json:"broker_cpu_s_per_180s"`             // net of the idle phase
	Series            int                `json:"series"`
	RowsCompared      int                `json:"rows_compared"`
	RowsMissing       int                `json:"rows_missing"`
	LagErrors         int                `json:"lag_errors"`
	LagAbsErrMax      float64            `json:"lag_abs_err_max"`
	TimeRowsCompared  int                `json:"time_lag_rows_compared"`
	TimeErrors        int                `json:"time_lag_errors"`
	TimeAbsErrMax     float64            `json:"time_lag_abs_err_max_s"`
	TimeLag           string             `json:"time_lag"` // "exported" or why it is not judged
}

// stat is a median over rounds with its min and max.
type stat struct {
	P50 float64 `json:"p50"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

func statOf(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	return stat{P50: p50(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
}

type result struct {
	Commit          string  `json:"commit"`
	GroupPartitions int     `json:"group_partitions"`
	Groups          int     `json:"groups"`
	Partitions      int     `json:"partitions"`
	Topics          int     `json:"topics"`
	Brokers         int     `json:"brokers"`
	Coordinators    int     `json:"coordinators"`
	Rounds          int     `json:"rounds"`
	WindowS         float64 `json:"window_s"`
	PollS           float64 `json:"poll_and_scrape_interval_s"`
	Granularity     string  `json:"granularity"`
	Workload        struct {
		RatePerPartition float64 `json:"records_per_s_per_partition"`
		CommitEveryS     float64 `json:"commit_every_s"`
		KeepingUp        int     `json:"groups_keeping_up"`
		Lagging          int     `json:"groups_lagging"`
		Stopped          int     `json:"groups_stopped"`
		Produced         int64   `json:"records_produced"`
		Commits          int64   `json:"commits"`
		Errors           int64   `json:"errors"`
	} `json:"workload"`
	SetupS float64 `json:"setup_s"`
	// Tidemark's own gauges (self-reported, not comparable with the peers): cycle reads + evaluation, after the first.
	TidemarkCycleP50 float64                `json:"tidemark_cycle_p50_s_self_reported"`
	TidemarkCycleMax float64                `json:"tidemark_cycle_max_s_self_reported"`
	Idle             *phase                 `json:"idle"`
	Tools            map[string]*toolResult `json:"tools"`
	Phases           []*phase               `json:"phases"`  // every round of every exporter, in the order run
	LoadAvg          []string               `json:"loadavg"` // at the end of each phase, in order
}

// tool is one exporter under test: how it starts with its config and where its series are.
type tool struct {
	name, version string
	names         seriesNames
	cmd           func(port int) (*exec.Cmd, error)
	onScrape      func(metrics)
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
	records := flag.Int("records", 200, "records written to every partition before the run")
	rate := flag.Int("rate", 1, "records per second the producer writes to every partition through the run")
	commitEvery := flag.Duration("commit-every", 10*time.Second, "interval of each moving group's commits")
	rounds := flag.Int("rounds", 3, "rounds; each measures every exporter once, the order rotated")
	window := flag.Duration("window", 180*time.Second, "measurement window of CPU, RSS, scrapes and broker requests")
	every := flag.Duration("interval", 30*time.Second, "scrape interval and the daemon's lag.poll_interval (the same cadence for every exporter)")
	granularity := flag.String("granularity", "", "the daemon's lag.granularity (empty: its default)")
	brokersN := flag.Int("brokers", 3, "Kafka brokers the bench starts for itself")
	reuse := flag.String("reuse", "", "STATEDIR:PORT:JMXPORT of a cluster started by kafka.sh with TIDEMARK_KAFKA_JMX_PORT (left running): skip starting one")
	peers := flag.String("peers", "kminion,kafka_exporter", "peers to build with peers.sh and measure (\"\": Tidemark only)")
	keep := flag.Bool("keep", false, "keep the topics and groups afterwards (with -reuse)")
	pprofDir := flag.String("pprof", "", "write the daemon's CPU profile over its first window and a heap profile after it to this directory")
	flag.Parse()
	if *rounds < 1 || *window < *every {
		return errors.New("need -rounds ≥ 1 and -window ≥ -interval")
	}
	ctx := context.Background()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench-lag: "+format+"\n", args...) }
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "benchlag_" + hex.EncodeToString(b[:])
	res := result{Groups: *groups, Partitions: *parts, Topics: *topics, GroupPartitions: *groups * *parts, Rounds: *rounds,
		WindowS: window.Seconds(), PollS: every.Seconds(), Tools: map[string]*toolResult{}}
	res.Commit = gitCommit()

	dir, err := os.MkdirTemp("", "bench-lag")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "tidemark")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tidemark").CombinedOutput(); err != nil {
		return fmt.Errorf("build tidemark: %v\n%s", err, out)
	}
	var peerBins map[string][2]string // name → version, path
	if *peers != "" {
		if peerBins, err = buildPeers(ctx, logf); err != nil {
			return err
		}
	}

	var cl *cluster
	if *reuse != "" {
		var port, jmx int
		f := strings.Split(*reuse, ":")
		if len(f) != 3 {
			return errors.New("-reuse wants STATEDIR:PORT:JMXPORT")
		}
		if _, err := fmt.Sscanf(f[1]+" "+f[2], "%d %d", &port, &jmx); err != nil {
			return fmt.Errorf("-reuse: %w", err)
		}
		cl, err = startCluster(ctx, *brokersN, port, jmx, f[0], true, logf)
	} else {
		cl, err = startCluster(ctx, *brokersN, 0, 0, "", false, logf)
	}
	if err != nil {
		return err
	}
	defer cl.stop()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() { // the brokers run in their own session: stop them on an interrupt too
		<-sig
		cl.stop()
		os.Exit(1)
	}()
	brokers := cl.brokers

	start := time.Now()
	reader, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("bench-lag-committer"))
	if err != nil {
		return err
	}
	defer reader.Close()
	adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("bench-lag-admin"))
	if err != nil {
		return err
	}
	defer adm.Close()
	topicName := func(t int) string { return fmt.Sprintf("%s_t%02d", prefix, t) }
	groupNames := make([]string, *groups)
	for g := range groupNames {
		groupNames[g] = fmt.Sprintf("%s_g%05d", prefix, g)
	}
	var topicNames []string
	for t := range *topics {
		topicNames = append(topicNames, topicName(t))
		if err := adm.CreateTopic(topicName(t), int32(*parts), nil); err != nil {
			return err
		}
	}
	if *reuse == "" || !*keep {
		defer func() {
			logf("cleaning up")
			_ = forEach(*groups, 8, func(g int) error { return adm.DeleteGroup(groupNames[g]) })
			for _, t := range topicNames {
				_ = adm.DeleteTopic(t)
			}
		}()
	}
	if err := waitTopics(ctx, reader, prefix, *topics, *parts); err != nil {
		return err
	}
	wl, err := newWorkload(brokers, topicNames, *parts, groupNames, func(g int) string { return topicName(g % *topics) },
		*rate, *commitEvery)
	if err != nil {
		return err
	}
	defer wl.close()
	if err := wl.produce(*records); err != nil {
		return err
	}
	// starting offsets spread over [0, records] so that lags differ from the first cycle on
	if err := wl.commitAll(ctx, func(g, p int) int64 { return int64((g*7 + p*13) % (*records + 1)) }); err != nil {
		return err
	}
	for g := range *groups {
		switch classOf(g) {
		case keepingUp:
			res.Workload.KeepingUp++
		case lagging:
			res.Workload.Lagging++
		default:
			res.Workload.Stopped++
		}
	}
	wctx, stopWorkload := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { wl.run(wctx); close(wdone) }()
	defer func() { stopWorkload(); <-wdone }()
	res.Workload.RatePerPartition, res.Workload.CommitEveryS = float64(*rate), commitEvery.Seconds()
	time.Sleep(*commitEvery) // every moving group commits once live before anything is measured
	res.SetupS = time.Since(start).Seconds()
	logf("built %d topics x %d partitions, %d groups (%d keeping up, %d lagging, %d stopped) in %.1fs; workload live",
		*topics, *parts, *groups, res.Workload.KeepingUp, res.Workload.Lagging, res.Workload.Stopped, res.SetupS)
	if _, err := reader.Metadata(ctx); err != nil {
		return err
	}
	if _, err := reader.Groups(ctx); err != nil { // learns each group's coordinator
		return err
	}
	res.Brokers, res.Coordinators = len(reader.Brokers()), reader.Coordinators()

	opts := measureOpts{window: *window, every: *every, poll: *every, gp: res.GroupPartitions, prefix: prefix, cl: cl, wl: wl, logf: logf}
	tools := []*tool{tidemarkTool(bin, dir, brokers, prefix, *every, *granularity, *pprofDir != "", &res)}
	res.Granularity = *granularity
	if res.Granularity == "" {
		res.Granularity = string(lagexporter.GranularityPartition)
	}
	for _, name := range strings.Split(*peers, ",") {
		if name == "" {
			continue
		}
		pb, ok := peerBins[name]
		if !ok {
			return fmt.Errorf("peer %q: peers.sh built no such exporter", name)
		}
		switch name {
		case "kminion":
			tools = append(tools, kminionTool(pb[1], pb[0], dir, brokers, prefix))
		case "kafka_exporter":
			tools = append(tools, kafkaExporterTool(pb[1], pb[0], brokers, prefix))
		default:
			return fmt.Errorf("peer %q: the bench does not know how to run it", name)
		}
	}

	logf("idle phase (the workload only, %s)", *window)
	idle, err := measure(ctx, "idle", nil, "", opts)
	if err != nil {
		return fmt.Errorf("idle phase: %w", err)
	}
	res.Idle = idle
	res.LoadAvg = append(res.LoadAvg, idle.LoadAvg)
	logf("idle: %.0f broker requests (exporter types), broker CPU %.1fs per 180s", idle.BrokerRequests.total(), idle.BrokerCPUPer180S)

	var cycles []cycleSample
	for r := range *rounds {
		for i := range tools {
			t := tools[(i+r)%len(tools)]
			port, err := benchproc.FreePort()
			if err != nil {
				return err
			}
			cmd, err := t.cmd(port)
			if err != nil {
				return err
			}
			o := opts
			o.names, o.onScrape = t.names, t.onScrape
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			if t.name == "tidemark" && *pprofDir != "" && r == 0 {
				o.during = func() error { return fetchProfiles(base, *pprofDir, *window) }
				o.startup = func() error { return fetchStartupProfile(base, *pprofDir) }
			}
			var tc []cycleSample
			if t.name == "tidemark" {
				o.onScrape = func(m metrics) {
					c := cycleSample{n: m.value("tidemark_lag_exporter_cycles_total"), read: m.value("tidemark_lag_exporter_cycle_duration_seconds"),
						eval: m.value("tidemark_lag_exporter_evaluation_duration_seconds")}
					if len(tc) == 0 || tc[len(tc)-1].n != c.n {
						tc = append(tc, c)
					}
				}
			}
			logf("round %d/%d: %s", r+1, *rounds, t.name)
			ph, err := measure(ctx, t.name, cmd, base+"/metrics", o)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", t.name, r+1, err)
			}
			if len(tc) > 1 {
				cycles = append(cycles, tc[1:]...) // the first is the cold cycle behind the first complete scrape
			}
			ph.Round = r + 1
			res.Phases = append(res.Phases, ph)
			res.LoadAvg = append(res.LoadAvg, ph.LoadAvg)
			logf("%s round %d: scrape p50 %.3fs, CPU %.1fs per 180s, RSS median %.0f MB, %.0f broker requests (idle %.0f), window check %d rows %d missing %d lag errors %d time-lag errors",
				t.name, r+1, p50(ph.Scrapes), ph.CPUPer180S, ph.RSSMB, ph.BrokerRequests.total(), idle.BrokerRequests.total(),
				ph.WindowCheck.Rows, ph.WindowCheck.Missing, ph.WindowCheck.LagErrors, ph.WindowCheck.TimeErrors)
		}
	}
	var tot []float64
	for _, c := range cycles {
		tot = append(tot, c.read+c.eval)
	}
	if len(tot) > 0 {
		res.TidemarkCycleP50, res.TidemarkCycleMax = p50(tot), slices.Max(tot)
	}
	cyclesPerWindow := window.Seconds() / every.Seconds()
	for _, t := range tools {
		res.Tools[t.name] = summarize(t, res.Phases, idle, cyclesPerWindow)
	}
	stopWorkload()
	<-wdone
	res.Workload.Produced, res.Workload.Commits, res.Workload.Errors = wl.produced.Load(), wl.commits.Load(), wl.errors.Load()
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return nil
}

// summarize folds an exporter's rounds: medians with min–max, broker requests per cycle net of the idle phase
// (scaled to the same window), the checks summed.
func summarize(t *tool, phases []*phase, idle *phase, cyclesPerWindow float64) *toolResult {
	tr := &toolResult{Version: t.version, TimeLag: "exported"}
	if t.names.seconds == "" {
		tr.TimeLag = "not exported by this exporter: not judged"
	}
	var sp50, cpu, rss, first, firstCPU, req, bcpu, all []float64
	byType := map[string][]float64{}
	for _, ph := range phases {
		if ph.Tool != t.name {
			continue
		}
		tr.Rounds++
		sp50, all = append(sp50, p50(ph.Scrapes)), append(all, ph.Scrapes...)
		cpu, rss, first, firstCPU = append(cpu, ph.CPUPer180S), append(rss, ph.RSSMB), append(first, ph.FirstCompleteS), append(firstCPU, ph.FirstCompleteCPU)
		tr.RSSMaxMB = max(tr.RSSMaxMB, ph.RSSMaxMB)
		if ph.FirstCorrect {
			tr.FirstCorrect++
		}
		scale := ph.WindowS / idle.WindowS
		var n float64
		for k := range union(ph.BrokerRequests, idle.BrokerRequests) {
			v := (ph.BrokerRequests[k] - idle.BrokerRequests[k]*scale) / cyclesPerWindow
			byType[k] = append(byType[k], v)
			n += v
		}
		req = append(req, n)
		bcpu = append(bcpu, ph.BrokerCPUPer180S-idle.BrokerCPUPer180S)
		tr.Series = ph.Series
		for _, c := range []*check{ph.FirstCheck, ph.WindowCheck} {
			tr.RowsCompared += c.Rows
			tr.RowsMissing += c.Missing
			tr.LagErrors += c.LagErrors
			tr.LagAbsErrMax = max(tr.LagAbsErrMax, c.LagAbsErrMax)
			tr.TimeRowsCompared += c.TimeRows
			tr.TimeErrors += c.TimeErrors
			tr.TimeAbsErrMax = max(tr.TimeAbsErrMax, c.TimeAbsErrMax)
		}
	}
	tr.ScrapeP50, tr.CPUPer180S, tr.RSSMB = statOf(sp50), statOf(cpu), statOf(rss)
	tr.FirstCompleteS, tr.FirstCompleteCPU = statOf(first), statOf(firstCPU)
	tr.BrokerReqPerCycle, tr.BrokerCPUPer180S = statOf(req), statOf(bcpu)
	if len(all) > 0 {
		tr.ScrapeP99 = p99(all)
	}
	tr.BrokerReqByType = map[string]float64{}
	for k, vs := range byType {
		tr.BrokerReqByType[k] = p50(vs)
	}
	return tr
}

func union(a, b requestCounts) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// gitCommit names the commit the bench runs from, "+dirty" when the tree has changes.
func gitCommit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "+dirty"
	}
	return c
}
