package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cluster is the Kafka cluster the bench runs on: started for it by deploy/local/kafka.sh (its own state directory
// and ports, JMX on), so that the broker's request counters hold the bench's traffic only.
type cluster struct {
	brokers  []string // bootstrap addresses
	jmxPorts []int
	stateDir string
	lib      string // Kafka's jars (the tools: JmxTool, the consumer-groups command)
	env      []string
	owned    bool
	kafkaSh  string
}

// startCluster starts n brokers with kafka.sh on a free block of loopback ports, JMX on. With reuse it attaches to a
// cluster started earlier the same way (state directory and ports given) and leaves it running.
func startCluster(ctx context.Context, n, port, jmxPort int, stateDir string, reuse bool, logf func(string, ...any)) (*cluster, error) {
	c := &cluster{kafkaSh: "deploy/local/kafka.sh", owned: !reuse}
	if port == 0 {
		var err error
		if port, jmxPort, err = freeBlock(n); err != nil {
			return nil, err
		}
	}
	if stateDir == "" {
		d, err := os.MkdirTemp("", "bench-lag-kafka")
		if err != nil {
			return nil, err
		}
		stateDir = d
	}
	c.stateDir = stateDir
	c.env = append(cleanEnv("TIDEMARK_"), "TIDEMARK_STATE_DIR="+stateDir,
		"TIDEMARK_KAFKA_PORT="+strconv.Itoa(port), "TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(port+100),
		"TIDEMARK_KAFKA_JMX_PORT="+strconv.Itoa(jmxPort), "TIDEMARK_OIDC_PORT="+strconv.Itoa(port+150))
	if cache := os.Getenv("TIDEMARK_CACHE_DIR"); cache != "" {
		c.env = append(c.env, "TIDEMARK_CACHE_DIR="+cache)
	}
	for i := range n {
		c.brokers = append(c.brokers, fmt.Sprintf("127.0.0.1:%d", port+i))
		c.jmxPorts = append(c.jmxPorts, jmxPort+i)
	}
	if !reuse {
		logf("starting %d Kafka broker(s) for the bench on %s (state %s, JMX from port %d)", n, strings.Join(c.brokers, ","), stateDir, jmxPort)
		if out, err := c.sh(ctx, "start", "--brokers", strconv.Itoa(n)); err != nil {
			return nil, fmt.Errorf("kafka.sh start: %v\n%s", err, out)
		}
	}
	out, err := c.sh(ctx, "env")
	if err != nil {
		return nil, fmt.Errorf("kafka.sh env: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export TIDEMARK_KAFKA_LIB="); ok {
			c.lib = strings.Trim(v, `"'`)
		}
	}
	if c.lib == "" {
		return nil, fmt.Errorf("kafka.sh env names no TIDEMARK_KAFKA_LIB (is the cluster at %s running?)", stateDir)
	}
	return c, nil
}

func (c *cluster) sh(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.kafkaSh}, args...)...)
	cmd.Env = c.env
	return cmd.CombinedOutput()
}

// stop stops the brokers the bench started (kafka.sh stop with the bench's state directory: only its pid files).
func (c *cluster) stop() {
	if !c.owned {
		return
	}
	_, _ = c.sh(context.Background(), "stop")
	_ = os.RemoveAll(c.stateDir)
}

// pids returns the broker JVMs' process ids (kafka.sh's pid files).
func (c *cluster) pids() []int {
	files, _ := filepath.Glob(filepath.Join(c.stateDir, "kafka", "node-*", "pid"))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cpuSeconds is the brokers' CPU seconds (utime + stime of each JVM).
func (c *cluster) cpuSeconds() (float64, error) {
	pids := c.pids()
	if len(pids) == 0 {
		return 0, fmt.Errorf("no broker pid files under %s", c.stateDir)
	}
	var sum float64
	for _, pid := range pids {
		s, err := procCPUSeconds(pid)
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// requestCounts is the brokers' RequestMetrics RequestsPerSec Count summed over brokers and versions, by request type.
type requestCounts map[string]float64

// requests reads every broker's kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=* Count with
// Kafka's own JmxTool (one JVM per broker, in parallel). A request type whose meter does not exist yet counts 0.
func (c *cluster) requests(ctx context.Context) (requestCounts, error) {
	out := requestCounts{}
	var mu sync.Mutex
	errs := make([]error, len(c.jmxPorts))
	var wg sync.WaitGroup
	for i, p := range c.jmxPorts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, "java", "-Xmx64m", "-cp", c.lib+"/*", "org.apache.kafka.tools.JmxTool",
				"--jmx-url", fmt.Sprintf("service:jmx:rmi:///jndi/rmi://127.0.0.1:%d/jmxrmi", p),
				"--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*",
				"--attributes", "Count", "--one-time", "true")
			b, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("JmxTool on port %d: %w", p, err)
				return
			}
			counts, err := parseJmxTool(b)
			if err != nil {
				errs[i] = fmt.Errorf("JmxTool on port %d: %w", p, err)
				return
			}
			mu.Lock()
			for k, v := range counts {
				out[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseJmxTool reads JmxTool's CSV (a header of "time" and "OBJECTNAME:Count" columns, then one row) into counts by
// the object name's request= key.
func parseJmxTool(b []byte) (requestCounts, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `"time"`) || len(lines) > 0 {
			lines = append(lines, sc.Text())
		}
	}
	if len(lines) < 2 {
		return nil, fmt.Errorf("no header and row in JmxTool output %.300q", b)
	}
	recs, err := csv.NewReader(strings.NewReader(lines[0] + "\n" + lines[1] + "\n")).ReadAll()
	if err != nil {
		return nil, err
	}
	head, row := recs[0], recs[1]
	if len(head) != len(row) {
		return nil, fmt.Errorf("JmxTool header has %d columns, row %d", len(head), len(row))
	}
	out := requestCounts{}
	for i, h := range head {
		_, after, ok := strings.Cut(h, ",request=")
		if !ok {
			continue
		}
		typ, _, _ := strings.Cut(after, ",")
		v, err := strconv.ParseFloat(row[i], 64)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", h, err)
		}
		out[typ] += v
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no RequestMetrics column in JmxTool output %.300q", b)
	}
	return out, nil
}

// workloadRequests are the request types left out of every exporter's count: those of the bench's own workload and
// of the cluster's internal traffic, never sent by a lag exporter (the idle phase measures what remains of the rest),
// and FetchConsumer and FetchFollower, which split the requests Fetch already counts.
var workloadRequests = map[string]bool{
	"FetchConsumer": true, "Produce": true, "OffsetCommit": true, "BrokerHeartbeat": true, "BrokerRegistration": true,
	"ControllerRegistration": true, "Vote": true, "BeginQuorumEpoch": true, "EndQuorumEpoch": true,
	"FetchSnapshot": true, "FetchFollower": true, "AllocateProducerIds": true, "InitProducerId": true,
}

// sub returns b − a by request type, without the workload's types.
func (b requestCounts) sub(a requestCounts) requestCounts {
	out := requestCounts{}
	for k, v := range b {
		if !workloadRequests[k] {
			if d := v - a[k]; d != 0 {
				out[k] = d
			}
		}
	}
	return out
}

func (r requestCounts) total() float64 {
	var s float64
	for _, v := range r {
		s += v
	}
	return s
}

// freeBlock finds a base port with n free PLAINTEXT ports, a free controller port at base+100, a free port at
// base+150 and n free JMX ports at base+200.
func freeBlock(n int) (int, int, error) {
	for base := 32000; base < 40000; base += 500 {
		ports := []int{base + 100, base + 150}
		for i := range n {
			ports = append(ports, base+i, base+200+i)
		}
		ok := true
		for _, p := range ports {
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), 200*time.Millisecond); err == nil {
				c.Close()
				ok = false
				break
			}
		}
		if ok {
			return base, base + 200, nil
		}
	}
	return 0, 0, fmt.Errorf("no free block of %d ports between 32000 and 40000", 2*n+2)
}
