package main

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestRunLagExporterNeedsNoClickHouse: `tidemark run` without a clickhouse block is a pure lag
// exporter. ClickHouse is never contacted (the only address it could use is one nothing listens on), /readyz turns
// 200 once a poll cycle has published a snapshot, and /metrics serves the group's exact lag, pre-rendered, with the
// process's own metrics, in OpenMetrics (gzip, as Prometheus asks) and in the text format.
func TestRunLagExporterNeedsNoClickHouse(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.CreateTopic(t, "lagonly", testenv.Topic{Partitions: 2})
	group := testenv.Name(t, "g")
	adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.Produce(topic, []int32{0, 1}, 10); err != nil {
		t.Fatal(err)
	}
	reader, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	// On a fresh cluster the offsets topic (and so every group coordinator) appears a moment after the first
	// FindCoordinator: wait for it, as Kafka's clients do.
	for deadline := time.Now().Add(60 * time.Second); ; {
		err := reader.CommitOffsets(context.Background(), group, map[string]map[int32]int64{topic: {0: 3, 1: 10}})
		if err == nil {
			break
		}
		if !errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { _ = adm.DeleteGroup(group) })

	httpAddr := testenv.FreeAddr(t)
	p := filepath.Join(t.TempDir(), "lag.yaml")
	if err := os.WriteFile(p, []byte(fmt.Sprintf(`kafka: {brokers: [%s]}
lag: {cluster: it, poll_interval: 1s, group_allow: [%q], topic_allow: [%q]}
http: {listen: %q}
`, strings.Join(brokers, ", "), group, topic, httpAddr)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The stack's TIDEMARK_CLICKHOUSE_ADDR is in this test's environment: a user's shell may have it too, and it is a
	// clickhouse key. The daemon reads exactly the file here.
	cfg, err := loadConfig(p, nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.clickHouse {
		t.Fatal("config without a clickhouse block uses ClickHouse")
	}
	stop := runInTest(t, cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	defer stopChecked(t, stop)
	base := "http://" + httpAddr
	waitStatus(t, base+"/readyz", http.StatusOK, 60*time.Second)

	scrape := func(accept string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		req.Header.Set("Accept", accept)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	om := scrape("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
	text := scrape("text/plain")
	for _, body := range []string{om, text} {
		for _, want := range []string{
			fmt.Sprintf(`tidemark_lag_partition_offsets{cluster="it",group=%q,partition="0",topic=%q} 7`, group, topic),
			fmt.Sprintf(`tidemark_lag_partition_offsets{cluster="it",group=%q,partition="1",topic=%q} 0`, group, topic),
			fmt.Sprintf(`tidemark_lag_group_offsets{cluster="it",group=%q} 7`, group),
			"go_goroutines", "process_resident_memory_bytes",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if strings.Contains(body, "tidemark_store_writer") {
			t.Error("a pure lag exporter has writer metrics: it started a ClickHouse writer")
		}
	}
	if !strings.HasSuffix(om, "# EOF\n") || strings.Contains(text, "# EOF") {
		t.Error("OpenMetrics must end with # EOF, the text format must not have it")
	}
}
