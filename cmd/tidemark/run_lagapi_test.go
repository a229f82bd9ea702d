package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter/lagapi"
)

// TestRunLagAPI: `tidemark run` serves a real group's lag on /api/v1/lag and Burrow's /v3/kafka endpoints, each
// partition's lag and committed offset equal to Kafka's own consumer-groups command, and a group it does not know is
// Burrow's 404 NOTFOUND. With TIDEMARK_BURROW_EXPORTER naming a burrow_exporter binary (a real Burrow client, built
// beside the project: docs/api.md), that client reads the same lag from Tidemark.
func TestRunLagAPI(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name(t, "orders"), testenv.Name(t, "billing")
	seedLag(t, brokers, topic, group, 20, map[int32]int64{0: 3, 1: 12})
	t.Cleanup(func() {
		if adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test")); err == nil {
			_ = adm.DeleteGroup(group)
			_ = adm.DeleteTopic(topic)
			_ = adm.Close()
		}
	})
	httpAddr := testenv.FreeAddr(t)
	p := filepath.Join(t.TempDir(), "run.yaml")
	yaml := fmt.Sprintf("kafka: {brokers: [%s]}\nlag: {poll_interval: 1s, cycle_timeout: 2s, group_allow: [%q], topic_allow: [%q]}\nhttp: {listen: %q}\n",
		strings.Join(brokers, ", "), group, topic, httpAddr)
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	runInTest(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	base := "http://" + httpAddr
	waitStatus(t, base+"/readyz", http.StatusOK, 90*time.Second) // ready: a cycle has published a snapshot

	want := consumerGroupsLag(t, brokers, group)
	commits := map[int32]int64{0: 3, 1: 12}
	getJSON := func(path string, wantCode int, v any) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantCode {
			t.Fatalf("%s: %d %s, want %d", path, resp.StatusCode, b, wantCode)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
	}

	var lag lagapi.LagResponse
	getJSON("/api/v1/lag?group="+group, http.StatusOK, &lag)
	if len(lag.Groups) != 1 || lag.Groups[0].Cluster != "default" || lag.Groups[0].Group != group {
		t.Fatalf("/api/v1/lag?group=%s: %+v, want the one group of cluster default", group, lag.Groups)
	}
	var total int64
	for part, l := range want {
		total += l
		pl := lag.Groups[0].Partition(topic, part)
		if pl == nil || !pl.Known || pl.Lag != l || pl.Committed != commits[part] {
			t.Errorf("/api/v1/lag %s/%d: %+v, want lag %d (consumer-groups command), committed %d", topic, part, pl, l, commits[part])
		}
	}
	if g := lag.Groups[0]; g.Total.Lag != total || !g.Total.Complete {
		t.Errorf("/api/v1/lag total %+v, want lag %d, complete", g.Total, total)
	}

	var st lagapi.BurrowConsumerStatus
	getJSON("/v3/kafka/default/consumer/"+group+"/lag", http.StatusOK, &st)
	if st.Error || st.Status.Group != group || st.Status.Cluster != "default" || st.Status.PartitionCount != 2 ||
		st.Status.TotalLag != uint64(total) || st.Status.Complete != 1 || len(st.Status.Partitions) != 2 {
		t.Errorf("Burrow /lag: %+v, want 2 partitions, totallag %d, complete", st.Status, total)
	}
	for _, ps := range st.Status.Partitions {
		if ps.Topic != topic || ps.CurrentLag != uint64(want[ps.Partition]) || ps.End == nil ||
			ps.End.Offset != commits[ps.Partition] {
			t.Errorf("Burrow /lag partition %+v, want lag %d (consumer-groups command), end offset %d", ps,
				want[ps.Partition], commits[ps.Partition])
		}
	}
	if st.Status.MaxLag == nil || st.Status.MaxLag.Partition != 0 || st.Status.MaxLag.CurrentLag != uint64(want[0]) {
		t.Errorf("Burrow maxlag %+v, want partition 0 with lag %d", st.Status.MaxLag, want[0])
	}
	var consumers lagapi.BurrowConsumerList
	getJSON("/v3/kafka/default/consumer", http.StatusOK, &consumers)
	if fmt.Sprint(consumers.Consumers) != fmt.Sprint([]string{group}) {
		t.Errorf("Burrow consumer list %v, want [%s]", consumers.Consumers, group)
	}
	var topicDetail lagapi.BurrowTopicDetail
	getJSON("/v3/kafka/default/topic/"+topic, http.StatusOK, &topicDetail)
	if fmt.Sprint(topicDetail.Offsets) != "[20 20]" {
		t.Errorf("Burrow topic offsets %v, want [20 20] (20 records produced to each partition)", topicDetail.Offsets)
	}
	var missing lagapi.BurrowConsumerStatus
	getJSON("/v3/kafka/default/consumer/"+group+"-absent/status", http.StatusNotFound, &missing)
	if missing.Status.Status != "NOTFOUND" {
		t.Errorf("unknown group: status %q, want NOTFOUND", missing.Status.Status)
	}

	bin := os.Getenv("TIDEMARK_BURROW_EXPORTER")
	if bin == "" {
		t.Log("TIDEMARK_BURROW_EXPORTER is not set: the real Burrow client (burrow_exporter) is not run")
		return
	}
	metricsAddr := testenv.FreeAddr(t)
	cmd := exec.Command(bin, "--burrow-addr", base, "--api-version", "3", "--metrics-addr", metricsAddr, "--interval", "1")
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	read := func() map[string]float64 {
		got := map[string]float64{}
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return got
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			name, val, ok := strings.Cut(sc.Text(), " ")
			if ok && strings.HasPrefix(name, "kafka_burrow_") {
				v, _ := strconv.ParseFloat(val, 64)
				got[name] = v
			}
		}
		return got
	}
	key := func(part int32) string {
		return fmt.Sprintf(`kafka_burrow_partition_lag{cluster="default",group=%q,partition="%d",topic=%q}`, group, part, topic)
	}
	totalKey := fmt.Sprintf(`kafka_burrow_total_lag{cluster="default",group=%q}`, group)
	var got map[string]float64
	testenv.Eventually(t, 30*time.Second, func() error {
		got = read()
		if _, ok := got[totalKey]; ok {
			return nil
		}
		return fmt.Errorf("burrow_exporter exported no lag of %s: %v", group, got)
	})
	for part, l := range want {
		if v, ok := got[key(part)]; !ok || v != float64(l) {
			t.Errorf("burrow_exporter %s = %v (present %v), want %d (consumer-groups command)", key(part), v, ok, l)
		}
	}
	if got[totalKey] != float64(total) {
		t.Errorf("burrow_exporter %s = %v, want %d", totalKey, got[totalKey], total)
	}
}
