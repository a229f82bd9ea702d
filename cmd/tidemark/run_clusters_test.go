package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
)

// lagCluster is one cluster of TestRunTwoClusters: a topic with a group whose commits leave known lag.
type lagCluster struct {
	name, topic, group string
	brokers            []string
}

// seedLag creates topic (2 partitions) on brokers, produces perPartition records to each partition and commits
// commits for group through the group coordinator.
func seedLag(t *testing.T, brokers []string, topic, group string, perPartition int, commits map[int32]int64) {
	t.Helper()
	adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(topic, 2, nil); err != nil {
		t.Fatal(err)
	}
	testenvWaitTopic(t, brokers, topic)
	if err := adm.Produce(topic, []int32{0, 1}, perPartition); err != nil {
		t.Fatal(err)
	}
	reader, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	// A fresh cluster's offsets topic (every group coordinator) appears a moment after the first FindCoordinator.
	for deadline := time.Now().Add(90 * time.Second); ; {
		err := reader.CommitOffsets(context.Background(), group, map[string]map[int32]int64{topic: commits})
		if err == nil {
			return
		}
		if !errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testenvWaitTopic waits until every partition of topic has a leader on the cluster of brokers.
func testenvWaitTopic(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := sarama.NewClient(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := cl.RefreshMetadata(topic); err != nil {
			return err
		}
		ps, err := cl.Partitions(topic)
		if err != nil || len(ps) != 2 {
			return fmt.Errorf("topic %s on %v: partitions %v (%v), want 2", topic, brokers, ps, err)
		}
		for _, p := range ps {
			if _, err := cl.Leader(topic, p); err != nil {
				return fmt.Errorf("topic %s/%d on %v: %w", topic, p, brokers, err)
			}
		}
		return nil
	})
}

// consumerGroupsLag is Kafka's own consumer-groups command's LAG column for group on brokers, by partition.
func consumerGroupsLag(t *testing.T, brokers []string, group string) map[int32]int64 {
	t.Helper()
	out := testenv.KafkaTool(t, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
		strings.Join(brokers, ","), "--describe", "--group", group)
	line := regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\S+)`)
	lags := map[int32]int64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := line.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != group {
			continue
		}
		p, _ := strconv.Atoi(m[3])
		lag, err := strconv.ParseInt(m[6], 10, 64)
		if err != nil {
			t.Fatalf("consumer-groups LAG %q of %s/%d: %v\n%s", m[6], group, p, err, out)
		}
		lags[int32(p)] = lag
	}
	if len(lags) != 2 {
		t.Fatalf("consumer-groups command: %d partitions of %s, want 2:\n%s", len(lags), group, out)
	}
	return lags
}

// TestRunTwoClusters: one `tidemark run` watching the shared stack's Kafka and a
// second single-broker cluster of the test's own (started only here, on free ports). Each cluster's lag, labelled
// by its name, equals its own consumer-groups command. Then the second cluster's broker stops: /readyz stays 200
// and names it (its own entry 503), while the first cluster's lag exporter keeps publishing (its last-success time
// keeps advancing) with the same lag.
func TestRunTwoClusters(t *testing.T) {
	first := lagCluster{name: "prod", brokers: testenv.Kafka(t)}
	priv := testenv.StartPrivateKafka(t)
	second := lagCluster{name: "dr", brokers: priv.Brokers}
	first.topic, first.group = testenv.Name(t, "orders"), testenv.Name(t, "billing")
	second.topic, second.group = first.topic, first.group // the same names in both: only the cluster tells them apart
	seedLag(t, first.brokers, first.topic, first.group, 10, map[int32]int64{0: 3, 1: 10})
	seedLag(t, second.brokers, second.topic, second.group, 20, map[int32]int64{0: 5, 1: 12})
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(first.brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			_ = adm.DeleteGroup(first.group)
			_ = adm.DeleteTopic(first.topic)
			_ = adm.Close()
		}
	})

	httpAddr := testenv.FreeAddr(t)
	var yaml strings.Builder
	yaml.WriteString("clusters:\n")
	for _, c := range []lagCluster{first, second} {
		fmt.Fprintf(&yaml, "  - name: %s\n    kafka: {brokers: [%s]}\n    lag: {poll_interval: 1s, cycle_timeout: 2s, group_allow: [%q], topic_allow: [%q]}\n",
			c.name, strings.Join(c.brokers, ", "), c.group, c.topic)
	}
	fmt.Fprintf(&yaml, "http: {listen: %q}\n", httpAddr)
	p := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(p, []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInTest(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	defer stopChecked(t, stop)
	base := "http://" + httpAddr
	if body := waitStatus(t, base+"/readyz", http.StatusOK, 90*time.Second); !strings.Contains(body, "cluster prod: ready") ||
		!strings.Contains(body, "cluster dr: ready") {
		// 200 with one cluster ready: wait for both
		waitStatus(t, base+"/readyz?cluster=dr", http.StatusOK, 90*time.Second)
		waitStatus(t, base+"/readyz?cluster=prod", http.StatusOK, 90*time.Second)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// value returns the sample of family with exactly labels (rendered in name order), or -1.
	value := func(body, family, labels string) float64 {
		for _, l := range strings.Split(body, "\n") {
			if rest, ok := strings.CutPrefix(l, family+"{"+labels+"} "); ok {
				v, err := strconv.ParseFloat(rest, 64)
				if err != nil {
					t.Fatalf("%s: %v", l, err)
				}
				return v
			}
		}
		return -1
	}
	checkLag := func(body string, c lagCluster, want map[int32]int64) {
		t.Helper()
		var total int64
		for part, lag := range want {
			total += lag
			labels := fmt.Sprintf(`cluster=%q,group=%q,partition="%d",topic=%q`, c.name, c.group, part, c.topic)
			if got := value(body, "tidemark_lag_partition_offsets", labels); got != float64(lag) {
				t.Errorf("%s %s/%d: Tidemark lag %v, the cluster's consumer-groups command %d", c.name, c.topic, part, got, lag)
			}
		}
		if got := value(body, "tidemark_lag_group_offsets", fmt.Sprintf(`cluster=%q,group=%q`, c.name, c.group)); got != float64(total) {
			t.Errorf("%s group lag %v, want %d", c.name, got, total)
		}
	}
	wantFirst := consumerGroupsLag(t, first.brokers, first.group)
	wantSecond := consumerGroupsLag(t, second.brokers, second.group)
	if fmt.Sprint(wantFirst) == fmt.Sprint(wantSecond) {
		t.Fatalf("both clusters have lag %v: the test cannot tell them apart", wantFirst)
	}
	_, body := get("/metrics")
	checkLag(body, first, wantFirst)
	checkLag(body, second, wantSecond)
	if n := strings.Count(body, "# TYPE tidemark_lag_partition_offsets "); n != 1 {
		t.Errorf("tidemark_lag_partition_offsets has %d TYPE lines, want 1 (one family, both clusters' series)", n)
	}

	priv.Run("stop")
	stoppedAt := time.Now()
	// The second cluster's own entry turns 503 once its last poll is stale; the process stays ready for the first.
	drBody := waitStatus(t, base+"/readyz?cluster=dr", http.StatusServiceUnavailable, 60*time.Second)
	if !strings.Contains(drBody, "cluster dr: not ready: lag exporter: no successful poll cycle") {
		t.Errorf("/readyz?cluster=dr: %q", drBody)
	}
	code, all := get("/readyz")
	if code != http.StatusOK || !strings.Contains(all, "ready: 1 of 2 clusters") || !strings.Contains(all, "cluster dr: not ready") ||
		!strings.Contains(all, "cluster prod: ready") {
		t.Errorf("/readyz with dr down: %d %q, want 200 naming dr", code, all)
	}
	if code, _ := get("/readyz?cluster=prod"); code != http.StatusOK {
		t.Errorf("/readyz?cluster=prod %d with dr down, want 200", code)
	}
	// The first cluster's samples keep advancing after the second stopped: a cycle that ended after the stop.
	var last float64
	testenv.Eventually(t, 30*time.Second, func() error {
		_, body = get("/metrics")
		last = value(body, "tidemark_lag_exporter_last_success_timestamp_seconds", `cluster="prod"`)
		if last > float64(stoppedAt.Add(time.Second).UnixMilli())/1000 {
			return nil
		}
		return fmt.Errorf("prod's last successful cycle %v is not after dr stopped (%v)", last, stoppedAt)
	})
	checkLag(body, first, wantFirst)
	if v := value(body, "tidemark_lag_exporter_last_success_timestamp_seconds", `cluster="dr"`); v < 0 || v > last {
		t.Errorf("dr's last success %v, want a time before prod's %v", v, last)
	}
}

// TestClusterErrorStopsOnlyItsCluster: one cluster of two ends with an error that is not an outage (its lag.election
// lease topic exists with two partitions, which election.Run refuses). That cluster stops alone: its /readyz entry says
// why, /readyz stays 200 naming it, the process keeps running and the other cluster keeps polling and serving its
// lag; on the stop, run returns that cluster's error.
func TestClusterErrorStopsOnlyItsCluster(t *testing.T) {
	brokers := testenv.Kafka(t)
	good := lagCluster{name: "prod", brokers: brokers, topic: testenv.Name(t, "orders"), group: testenv.Name(t, "billing")}
	seedLag(t, brokers, good.topic, good.group, 10, map[int32]int64{0: 4, 1: 9})
	lease := testenv.CreateTopic(t, "lease2", testenv.Topic{Partitions: 2})
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			_ = adm.DeleteGroup(good.group)
			_ = adm.DeleteTopic(good.topic)
			_ = adm.Close()
		}
	})
	httpAddr := testenv.FreeAddr(t)
	yaml := fmt.Sprintf(`clusters:
  - name: prod
    kafka: {brokers: [%[1]s]}
    lag: {poll_interval: 1s, cycle_timeout: 2s, group_allow: [%[2]q], topic_allow: [%[3]q]}
  - name: broken
    kafka: {brokers: [%[1]s]}
    lag: {poll_interval: 1s, cycle_timeout: 2s, group_allow: [%[2]q], topic_allow: [%[3]q],
          election: {enabled: true, topic: %[4]q, group: %[5]q, session_timeout: 6s}}
http: {listen: %[6]q}
`, strings.Join(brokers, ", "), good.group, good.topic, lease, testenv.Name(t, "lease-group"), httpAddr)
	p := filepath.Join(t.TempDir(), "clusters.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInTest(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	base := "http://" + httpAddr
	body := waitStatus(t, base+"/readyz?cluster=broken", http.StatusServiceUnavailable, 90*time.Second)
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(body, "stopped after an error"); {
		if time.Now().After(deadline) { // 503 while it connects, then for the error
			t.Fatalf("/readyz?cluster=broken still %q", body)
		}
		time.Sleep(100 * time.Millisecond)
		body = waitStatus(t, base+"/readyz?cluster=broken", http.StatusServiceUnavailable, 10*time.Second)
	}
	if want := fmt.Sprintf("lease topic %s has 2 partitions, want 1", lease); !strings.Contains(body, want) {
		t.Errorf("/readyz?cluster=broken: %q, want it to say %q", body, want)
	}
	waitStatus(t, base+"/readyz?cluster=prod", http.StatusOK, 90*time.Second)
	all := waitStatus(t, base+"/readyz", http.StatusOK, 10*time.Second)
	if !strings.Contains(all, "ready: 1 of 2 clusters") || !strings.Contains(all, "cluster broken: not ready: stopped after an error") {
		t.Errorf("/readyz: %q, want 200 naming the stopped cluster", all)
	}
	// prod polls on after broken stopped: a cycle that succeeded after the stop was seen, with Kafka's lag
	want := consumerGroupsLag(t, brokers, good.group)
	seen := time.Now()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics := string(b)
		last := -1.0
		for _, l := range strings.Split(metrics, "\n") {
			if rest, ok := strings.CutPrefix(l, `tidemark_lag_exporter_last_success_timestamp_seconds{cluster="prod"} `); ok {
				last, _ = strconv.ParseFloat(rest, 64)
			}
		}
		if last > float64(seen.Add(time.Second).UnixMilli())/1000 {
			for part, lag := range want {
				line := fmt.Sprintf(`tidemark_lag_partition_offsets{cluster="prod",group=%q,partition="%d",topic=%q} %d`, good.group, part, good.topic, lag)
				if !strings.Contains(metrics, line+"\n") {
					t.Errorf("metrics lack %s", line)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prod's last successful cycle %v is not after broken stopped (%v)", last, seen)
		}
	}
	if err := stop(); err == nil || !strings.Contains(err.Error(), "cluster broken: lease topic") {
		t.Errorf("run returned %v, want the broken cluster's error", err)
	}
}
