package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestRunLagServesWhileClickHouseSilent: with a clickhouse block whose server accepts connections and never answers,
// `tidemark run` serves the group's lag from the real Kafka (the lag exporter does not wait for its history store),
// and /readyz names the collector as what waits, for ClickHouse.
func TestRunLagServesWhileClickHouseSilent(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic := testenv.CreateTopic(t, "lagnostore", testenv.Topic{Partitions: 1})
	group := testenv.Name(t, "g")
	adm, err := lagread.NewAdmin(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.Produce(topic, []int32{0}, 10); err != nil {
		t.Fatal(err)
	}
	reader, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("tidemark-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	for deadline := time.Now().Add(60 * time.Second); ; { // a fresh cluster's coordinators appear a moment later
		err := reader.CommitOffsets(context.Background(), group, map[string]map[int32]int64{topic: {0: 4}})
		if err == nil {
			break
		}
		if !errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { _ = adm.DeleteGroup(group) })

	chAddr := silentListener(t)
	d := startRun(t, fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse: {addr: [%s], database: %s, dial_timeout: 1s}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  receipts: {enabled: true, topic: %s, group: %s, partitions: 1}
lag: {cluster: it, poll_interval: 1s, group_allow: [%q], topic_allow: [%q]}
`, strings.Join(brokers, ", "), chAddr, testenv.Name(t, "db"), testenv.Name(t, "dlq"), testenv.Name(t, "rs"),
		testenv.Name(t, "rc"), testenv.Name(t, "rg"), group, topic))

	want := fmt.Sprintf(`tidemark_lag_partition_offsets{cluster="it",group=%q,partition="0",topic=%q} 6`, group, topic)
	for deadline := time.Now().Add(60 * time.Second); ; { // a hang guard: the first cycle runs at once
		_, body := get(d.base + "/metrics")
		if strings.Contains(body, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s while ClickHouse does not answer", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	code, body := get(d.base + "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: collector waits for ClickHouse (connecting to ClickHouse") ||
		!strings.Contains(body, "; lag exporter ready") {
		t.Fatalf("/readyz %d %q, want 503 naming the collector as waiting for ClickHouse and the lag exporter ready", code, body)
	}
	if err := d.stop(); err != nil {
		t.Fatalf("stop while ClickHouse does not answer: %v, want a clean stop", err)
	}
}
