package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The broker's own count of the requests it answered (-broker-requests): the bench runs on a one-broker Kafka
// cluster of its own (kafka.sh with its own state directory and ports), so that nothing but the bench and the
// exporter talks to it, and reads Kafka's RequestMetrics (kafka.network:type=RequestMetrics,name=RequestsPerSec,
// request=*,version=*, attribute Count) over JMX, as a peer harness would: a local JMX agent is started in the broker
// with jcmd (ManagementAgent.start_local, no port opened) and read with Kafka's own JmxTool.

// exporterRequests are the request types a lag exporter sends; the bench's live workload sends Produce,
// OffsetCommit and FindCoordinator, which are left out. Metadata is counted: the workload's clients refresh theirs
// every 10 minutes (sarama's default), never within a window.
var exporterRequests = []string{"Metadata", "ListGroups", "DescribeGroups", "ConsumerGroupDescribe", "OffsetFetch",
	"ListOffsets", "Fetch"}

// ownKafka starts the bench's one-broker cluster (ports TIDEMARK_BENCH_LAG_KAFKA_PORT, default 19762, and
// TIDEMARK_BENCH_LAG_KAFKA_CONTROLLER_PORT, 19772; state TIDEMARK_STATE_DIR + "-bench-lag") and returns its
// brokers, the broker's pid and a stop func.
func ownKafka(ctx context.Context) (brokers []string, pid int, stop func(), err error) {
	state := os.Getenv("TIDEMARK_STATE_DIR")
	if state == "" {
		base := os.Getenv("XDG_STATE_HOME")
		if base == "" {
			base = filepath.Join(os.Getenv("HOME"), ".local/state")
		}
		state = filepath.Join(base, "tidemark/local")
	}
	port := os.Getenv("TIDEMARK_BENCH_LAG_KAFKA_PORT")
	if port == "" {
		port = "19762"
	}
	cport := os.Getenv("TIDEMARK_BENCH_LAG_KAFKA_CONTROLLER_PORT")
	if cport == "" {
		cport = "19772"
	}
	env := append(os.Environ(), "TIDEMARK_STATE_DIR="+state+"-bench-lag", "TIDEMARK_KAFKA_PORT="+port,
		"TIDEMARK_KAFKA_CONTROLLER_PORT="+cport, "TIDEMARK_KAFKA_NODE_PORTS=")
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "bash", append([]string{"deploy/local/kafka.sh"}, args...)...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("kafka.sh %s: %v\n%s", strings.Join(args, " "), err, errb.String())
		}
		return out.String(), nil
	}
	if _, err := run("start", "--brokers", "1"); err != nil {
		return nil, 0, nil, err
	}
	stop = func() {
		if _, err := run("stop"); err != nil {
			fmt.Fprintln(os.Stderr, "bench-lag: stop its Kafka:", err)
		}
	}
	b, err := os.ReadFile(filepath.Join(state+"-bench-lag", "kafka", "node-1", "pid"))
	if err == nil {
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if err != nil {
		stop()
		return nil, 0, nil, fmt.Errorf("the bench's broker's pid: %w", err)
	}
	return []string{"127.0.0.1:" + port}, pid, stop, nil
}

// connectorRe finds the local JMX connector's address in `jcmd PID ManagementAgent.status` (its "URL" line on
// Java 17, "Connector Address" on older ones).
var connectorRe = regexp.MustCompile(`(?m)^\s*(?:URL|Connector Address)\s*:\s*(service:jmx:\S+)`)

// brokerJMX starts the broker's local JMX agent and returns its connector address.
func brokerJMX(ctx context.Context, pid int) (string, error) {
	p := strconv.Itoa(pid)
	if out, err := exec.CommandContext(ctx, "jcmd", p, "ManagementAgent.start_local").CombinedOutput(); err != nil {
		return "", fmt.Errorf("jcmd %s ManagementAgent.start_local: %v\n%s", p, err, out)
	}
	out, err := exec.CommandContext(ctx, "jcmd", p, "ManagementAgent.status").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("jcmd %s ManagementAgent.status: %v\n%s", p, err, out)
	}
	m := connectorRe.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("jcmd %s ManagementAgent.status shows no connector address:\n%s", p, out)
	}
	return string(m[1]), nil
}

// requestCounts reads the broker's RequestMetrics RequestsPerSec Count per request type (summed over versions)
// with Kafka's JmxTool.
func requestCounts(ctx context.Context, kafkaLib, url string) (map[string]float64, error) {
	out, err := exec.CommandContext(ctx, "java", "-cp", kafkaLib+"/*", "org.apache.kafka.tools.JmxTool",
		"--jmx-url", url, "--object-name", "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=*,version=*",
		"--attributes", "Count", "--one-time", "true", "--report-format", "properties").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("JmxTool: %v\n%s", err, out)
	}
	return parseRequestCounts(out)
}

// countKey finds the request type in a JmxTool properties key such as
// kafka.network:type=RequestMetrics,name=RequestsPerSec,request=OffsetFetch,version=8:Count.
var countKey = regexp.MustCompile(`request=([A-Za-z]+)[,:]`)

// parseRequestCounts sums JmxTool's `--report-format properties` output (lines key=value, the first a time stamp)
// per request type.
func parseRequestCounts(out []byte) (map[string]float64, error) {
	counts := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		i := strings.LastIndexByte(line, '=')
		m := countKey.FindStringSubmatch(line)
		if i < 0 || m == nil {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[i+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("JmxTool line %q: %w", line, err)
		}
		counts[m[1]] += v
	}
	if len(counts) == 0 {
		return nil, fmt.Errorf("JmxTool printed no RequestsPerSec count:\n%s", out)
	}
	return counts, sc.Err()
}

// brokerCount counts the exporter's requests at the broker from one cycle end to the first cycle end after until,
// into res: within a second of the daemon's cycle counter moving (polled every second) the broker's counts are
// read, and the next cycle starts a poll interval after the last began, so the requests between two such readings
// are exactly those cycles' as long as the poll interval is well above a second plus JmxTool's start (a JVM: a few
// seconds here; the default poll interval is 30 s).
func brokerCount(ctx context.Context, res *result, pid int, metricsURL string, until time.Time) error {
	url, err := brokerJMX(ctx, pid)
	if err != nil {
		return err
	}
	// cycles reads the daemon's cycle counter with the window's own scrape (gzip, a byte scan: at 100k
	// group-partitions a full parse of the exposition takes seconds on this machine).
	cycles := func() (float64, error) {
		_, _, m, err := scrape(metricsURL)
		if err != nil {
			return 0, err
		}
		return m.value("tidemark_lag_exporter_cycles_total"), nil
	}
	// afterCycle waits for the cycle counter to move, then reads the broker's counts.
	afterCycle := func() (float64, map[string]float64, error) {
		c0, err := cycles()
		if err != nil {
			return 0, nil, err
		}
		for {
			c, err := cycles()
			if err != nil {
				return 0, nil, err
			}
			if c != c0 {
				counts, err := requestCounts(ctx, os.Getenv("TIDEMARK_KAFKA_LIB"), url)
				return c, counts, err
			}
			time.Sleep(time.Second)
		}
	}
	c0, n0, err := afterCycle()
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(until)):
	}
	c1, n1, err := afterCycle()
	if err != nil {
		return err
	}
	res.BrokerCycles = c1 - c0
	res.BrokerRequests = map[string]float64{}
	for _, t := range exporterRequests {
		if d := n1[t] - n0[t]; d > 0 {
			res.BrokerRequests[t] = d / res.BrokerCycles
			res.BrokerRequestsPerCycle += d / res.BrokerCycles
		}
	}
	return nil
}
