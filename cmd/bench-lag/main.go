// Command bench-lag measures the lag exporter on the real local broker (run as `make bench-lag`, which starts the
// stack if needed). It builds G groups × P partitions (G groups spread over T topics of P partitions, offsets
// committed through the admin API), then:
//
//   - peer: at min(G, -peer-groups) groups, times `tidemark lag --output json` against Apache Kafka's own
//     consumer-groups command (--describe --all-groups, from TIDEMARK_KAFKA_LIB) on the same cluster, and checks
//     that both report the same offset lag for every bench group-partition;
//   - loop: with all G groups, runs poll cycles (ClusterReader + Loop, the exporter's code) and times them, counts
//     Kafka requests per steady cycle, times /metrics scrapes over HTTP (gzip, as Prometheus asks) and reads RSS.
//
// The LAST line of output is one JSON object: group_partitions, cycle_p50_s, requests_per_cycle, scrape_p50_s,
// rss_mb, peer_ratio, and the details behind them. Small runs: `go run ./cmd/bench-lag -groups 200 -partitions 5`.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
)

type result struct {
	GroupPartitions   int     `json:"group_partitions"`
	Groups            int     `json:"groups"`
	Partitions        int     `json:"partitions"`
	Topics            int     `json:"topics"`
	Brokers           int     `json:"brokers"`
	Coordinators      int     `json:"coordinators"`
	CycleP50          float64 `json:"cycle_p50_s"`
	CycleMax          float64 `json:"cycle_max_s"`
	FirstCycle        float64 `json:"first_cycle_s"`
	RequestsPerCycle  int64   `json:"requests_per_cycle"`
	RequestsLimit     int     `json:"requests_limit"`
	ScrapeP50         float64 `json:"scrape_p50_s"`
	ScrapeBytes       int     `json:"scrape_bytes_gzip"`
	RenderP50         float64 `json:"render_p50_s"`
	RSSMB             float64 `json:"rss_mb"`
	RSSPeakMB         float64 `json:"rss_peak_mb"`
	PeerGroups        int     `json:"peer_groups"`
	PeerTidemark      float64 `json:"peer_tidemark_s"`
	PeerKafka         float64 `json:"peer_kafka_s"`
	PeerRatio         float64 `json:"peer_ratio"`
	PeerRowsCompared  int     `json:"peer_rows_compared"`
	PeerLagMismatches int     `json:"peer_lag_mismatches"`
	SetupS            float64 `json:"setup_s"`
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
	cycles := flag.Int("cycles", 7, "measured poll cycles (after one warm-up cycle)")
	scrapes := flag.Int("scrapes", 3, "scrapes after each measured cycle")
	keep := flag.Bool("keep", false, "keep the topics and groups afterwards")
	memProfile := flag.String("memprofile", "", "write a heap profile after the measured cycles to this file")
	flag.Parse()
	brokers := strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ",")
	if brokers[0] == "" {
		return errors.New("TIDEMARK_KAFKA_BROKERS unset: run through `make bench-lag` (or eval \"$(bash deploy/local/stack.sh up)\")")
	}
	ctx := context.Background()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "benchlag_" + hex.EncodeToString(b[:])
	res := result{Groups: *groups, Partitions: *parts, Topics: *topics, GroupPartitions: *groups * *parts}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench-lag: "+format+"\n", args...) }

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
		if err := peer(ctx, &res, brokers, prefix, peerAt, logf); err != nil {
			return fmt.Errorf("peer comparison: %w", err)
		}
	}
	if err := commit(peerAt, *groups); err != nil {
		return err
	}
	res.SetupS = time.Since(start).Seconds()
	logf("built %d groups in %.1fs", *groups, res.SetupS)

	// The exporter, as `tidemark run` wires it: loop, collector, pre-rendering handler, HTTP server.
	cfg := &lagexporter.Config{Cluster: "bench", GroupAllow: []string{prefix + "_.*"}, TopicAllow: []string{prefix + "_.*"}}
	cfg.SetDefaults()
	cfg.CycleTimeout = 2 * time.Minute
	if err := cfg.Validate(); err != nil {
		return err
	}
	loop, err := lagexporter.NewLoop(cfg, reader, time.Now)
	if err != nil {
		return err
	}
	handler := promexport.NewHandler(promexport.NewCollector(cfg, loop), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/metrics"

	// Warm-up: the first cycle reads every lagging partition's first unconsumed record; later cycles hit the cache.
	t0 := time.Now()
	snap, err := loop.Cycle(ctx)
	if err != nil {
		return err
	}
	res.FirstCycle = time.Since(t0).Seconds()
	if n := countGP(snap); n != res.GroupPartitions {
		logf("warning: first snapshot has %d group-partitions, want %d (group listing lag?)", n, res.GroupPartitions)
	}
	var cycleS, scrapeS, renderS []float64
	var reqs []int64
	for range *cycles {
		before := reader.Requests()
		t := time.Now()
		snap, err = loop.Cycle(ctx)
		if err != nil {
			return err
		}
		cycleS = append(cycleS, time.Since(t).Seconds())
		reqs = append(reqs, reader.Requests()-before)
		for _, e := range snap.Errors {
			logf("cycle error: %s", e.Error())
		}
		t = time.Now()
		handler.Refresh() // what Handler.Follow does on each new snapshot
		renderS = append(renderS, time.Since(t).Seconds())
		for range *scrapes {
			d, n, err := scrape(url)
			if err != nil {
				return err
			}
			scrapeS = append(scrapeS, d)
			res.ScrapeBytes = n
		}
	}
	res.GroupPartitions = countGP(snap)
	res.Brokers, res.Coordinators = len(reader.Brokers()), reader.Coordinators()
	res.RequestsLimit = 10 * (res.Brokers + res.Coordinators)
	res.CycleP50, res.CycleMax = p50(cycleS), slices.Max(cycleS)
	res.ScrapeP50, res.RenderP50 = p50(scrapeS), p50(renderS)
	slices.Sort(reqs)
	res.RequestsPerCycle = reqs[len(reqs)/2]
	res.RSSMB, res.RSSPeakMB = procStatusMB("VmRSS"), procStatusMB("VmHWM")
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			return err
		}
		_ = f.Close()
	}
	srv.Close()
	cleanup() // before the result, so that the JSON object is the last line
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return nil
}

func countGP(s *lagexporter.Snapshot) int {
	n := 0
	for _, g := range s.Groups {
		n += len(g.Partitions)
	}
	return n
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

func scrape(url string) (float64, int, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Accept-Encoding", "gzip")
	t := time.Now()
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		return 0, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t).Seconds(), int(n), err
}

func p50(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func procStatusMB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}

var cgRow = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)`)

// peer times `tidemark lag --output json` (all groups) against Kafka's consumer-groups command (--all-groups) and
// compares the offset lag of every bench group-partition.
func peer(ctx context.Context, res *result, brokers []string, prefix string, n int, logf func(string, ...any)) error {
	lib := os.Getenv("TIDEMARK_KAFKA_LIB")
	if lib == "" {
		return errors.New("TIDEMARK_KAFKA_LIB unset (deploy/local/stack.sh exports it)")
	}
	dir, err := os.MkdirTemp("", "bench-lag")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "tidemark")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/tidemark").CombinedOutput(); err != nil {
		return fmt.Errorf("build tidemark: %v\n%s", err, out)
	}
	bs := strings.Join(brokers, ",")
	// The group listing of a coordinator can trail a commit by a moment: wait until tidemark sees all n groups.
	var ours []byte
	var dur float64
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
	return nil
}
