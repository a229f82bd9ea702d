package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// tidemarkTool is the daemon as a user runs it: a config file, nothing else. The environment is the bench's minus
// every TIDEMARK_ variable (the stack's TIDEMARK_CLICKHOUSE_ADDR would configure ClickHouse).
// Its version is the commit the bench runs from.
func tidemarkTool(bin, dir string, brokers []string, prefix string, poll time.Duration, granularity string, pprof bool, res *result) *tool {
	return &tool{name: "tidemark", version: "commit " + res.Commit,
		names: seriesNames{lag: "tidemark_lag_partition_offsets", seconds: "tidemark_lag_partition_seconds",
			group: "group", topic: "topic", partition: "partition"},
		cmd: func(port int) (*exec.Cmd, error) {
			gran := ""
			if granularity != "" {
				gran = "\n  granularity: " + granularity
			}
			cfgPath := filepath.Join(dir, "tidemark.yaml")
			cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
lag:
  poll_interval: %s%s
  group_allow: ["%s_.*"]
  topic_allow: ["%s_.*"]
http:
  listen: 127.0.0.1:%d
  pprof: %v
`, strings.Join(brokers, ", "), poll, gran, prefix, prefix, port, pprof)
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
				return nil, err
			}
			cmd := exec.Command(bin, "run", "--config", cfgPath)
			cmd.Env = cleanEnv("TIDEMARK_")
			cmd.Stderr = &prefixWriter{prefix: "  tidemark: ", w: os.Stderr, keep: "level=ERROR|level=WARN"}
			return cmd, nil
		}}
}

// kminionTool: consumer groups through the admin API at partition granularity (its defaults), restricted to the
// bench's groups and topics, log dirs off. kminion reads Kafka when scraped; it exports no time lag.
func kminionTool(bin, version, dir string, brokers []string, prefix string) *tool {
	return &tool{name: "kminion", version: version,
		names: seriesNames{lag: "kminion_kafka_consumer_group_topic_partition_lag", group: "group_id", topic: "topic_name", partition: "partition_id"},
		cmd: func(port int) (*exec.Cmd, error) {
			cfgPath := filepath.Join(dir, "kminion.yaml")
			cfg := fmt.Sprintf(`kafka:
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
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
				return nil, err
			}
			cmd := exec.Command(bin)
			cmd.Env = append(cleanEnv("TIDEMARK_"), "CONFIG_FILEPATH="+cfgPath)
			cmd.Stderr = &prefixWriter{prefix: "  kminion: ", w: os.Stderr, keep: `"level":"(error|warn)"`}
			return cmd, nil
		}}
}

// kafkaExporterTool: danielqsj/kafka_exporter with the bench's group and topic filters and the protocol version set
// to one Kafka 4 accepts (its default, 2.0.0, asks for request versions Kafka 4 removed). It reads Kafka when
// scraped; it exports no time lag.
func kafkaExporterTool(bin, version string, brokers []string, prefix string) *tool {
	return &tool{name: "kafka_exporter", version: version,
		names: seriesNames{lag: "kafka_consumergroup_lag", group: "consumergroup", topic: "topic", partition: "partition"},
		cmd: func(port int) (*exec.Cmd, error) {
			args := []string{"--web.listen-address=127.0.0.1:" + fmt.Sprint(port), "--kafka.version=3.6.0",
				"--group.filter=^" + prefix + "_.*", "--topic.filter=^" + prefix + "_.*"}
			for _, b := range brokers {
				args = append(args, "--kafka.server="+b)
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = cleanEnv("TIDEMARK_")
			cmd.Stderr = &prefixWriter{prefix: "  kafka_exporter: ", w: os.Stderr, keep: `level=(error|warn)|level=ERROR|level=WARN|(?i)error`}
			return cmd, nil
		}}
}

// buildPeers runs peers.sh (beside this file) and returns name → {version, path} of each peer it built.
func buildPeers(ctx context.Context, logf func(string, ...any)) (map[string][2]string, error) {
	logf("building the peers (cmd/bench-lag/peers.sh)")
	cmd := exec.CommandContext(ctx, "bash", "cmd/bench-lag/peers.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("peers.sh: %v\n%s", err, tail(stderr.Bytes(), 2000))
	}
	peers := map[string][2]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			continue
		}
		peers[f[0]] = [2]string{f[1] + " " + f[2][:12], f[3]}
		logf("peer %s %s (commit %s): %s", f[0], f[1], f[2], f[3])
	}
	return peers, nil
}
