package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
)

// scrape returns the value of every series of /metrics at addr whose line starts with prefix (name and labels), or
// nil when the endpoint does not answer.
func scrape(addr, prefix string) []string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var vals []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, prefix) {
			vals = append(vals, line[strings.LastIndexByte(line, ' ')+1:])
		}
	}
	return vals
}

func activeOf(addr string) string {
	v := scrape(addr, `tidemark_lag_exporter_active{cluster="c1"}`)
	if len(v) != 1 {
		return "?"
	}
	return v[0]
}

// TestLagExporterFailover runs two `tidemark run` replicas with the lag exporter's election on the real servers:
// exactly one is active (tidemark_lag_exporter_active 1, lag series on /metrics, lag_snapshots rows), the other
// standby (0, health series only). The active one is SIGKILLed; the standby takes the lease when the coordinator
// expires the dead member's session, and lag snapshots resume from it.
func TestLagExporterFailover(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, conn := testenv.ClickHouseDB(t)
	topic := testenv.CreateTopic(t, "orders", testenv.Topic{Partitions: 1})
	group := testenv.Name(t, "app")
	// The watched group: 10 records, 4 consumed and committed.
	sc := testenv.SaramaConfig(t)
	prod, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatal(err)
		}
	}
	_ = prod.Close()
	testenv.CommitOffsets(t, brokers, group, map[string]map[int32]int64{topic: {0: 4}})

	const session = 6 * time.Second // the broker's group.min.session.timeout.ms
	electGroup, leaseTopic, dlq := testenv.Name(t, "elect"), testenv.Name(t, "lease"), testenv.Name(t, "dlq")
	t.Cleanup(func() {
		adm := testenv.Admin(t)
		_ = adm.DeleteTopic(leaseTopic)
		_ = adm.DeleteTopic(dlq)
	})
	addrs := []string{testenv.FreeAddr(t), testenv.FreeAddr(t)}
	procs := make([]*exec.Cmd, 2)
	for i, addr := range addrs {
		cfgPath := filepath.Join(t.TempDir(), fmt.Sprintf("run%d.yaml", i))
		cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse: {addr: [%s], database: %s, writer: {flush_interval: 100ms}}
collector: {dead_letter_topic: %s}
lag:
  cluster: c1
  poll_interval: 500ms
  group_allow: [%s]
  election: {enabled: true, group: %s, topic: %s, session_timeout: %s}
http: {listen: "%s"}
`, strings.Join(brokers, ", "), testenv.ClickHouseAddr(t), db, dlq, group, electGroup, leaseTopic, session, addr)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		procs[i] = startDaemon(t, cfgPath)
	}

	// Exactly one replica takes the lease.
	active := -1
	deadline := time.Now().Add(60 * time.Second)
	for active < 0 {
		a, b := activeOf(addrs[0]), activeOf(addrs[1])
		switch {
		case a == "1" && b == "0":
			active = 0
		case a == "0" && b == "1":
			active = 1
		case a == "1" && b == "1":
			t.Fatal("both replicas active")
		}
		if active < 0 && time.Now().After(deadline) {
			t.Fatalf("no single active replica after 60s: active %s and %s", a, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	standby := 1 - active
	lagSeries := fmt.Sprintf(`tidemark_lag_partition_offsets{cluster="c1",group="%s",partition="0",topic="%s"}`, group, topic)
	snaps := fmt.Sprintf("SELECT count() FROM lag_snapshots WHERE consumer_group = '%s' AND lag = 6", group)
	if got := waitRows(t, conn, snaps, 3, 60*time.Second); got < 3 {
		t.Fatalf("%d lag snapshots of the watched group, want >= 3", got)
	}
	if v := scrape(addrs[active], lagSeries); len(v) != 1 || v[0] != "6" {
		t.Fatalf("active replica serves lag %v, want [6]", v)
	}
	if v := scrape(addrs[standby], lagSeries); len(v) != 0 {
		t.Fatalf("standby replica serves lag %v, want no series", v)
	}
	if v := scrape(addrs[standby], `tidemark_lag_exporter_cycles_total{cluster="c1"}`); len(v) != 1 || v[0] == "0" {
		t.Fatalf("standby replica's cycles %v: it should poll too", v)
	}

	if err := procs[active].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_, _ = procs[active].Process.Wait()
	for activeOf(addrs[standby]) != "1" {
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("standby not active 60s after the active replica was killed (session timeout %s)", session)
		}
		time.Sleep(50 * time.Millisecond)
	}
	failover := time.Since(killed)
	after := fmt.Sprintf("%s AND at_ms > %d", snaps, killed.UnixMilli())
	if got := waitRows(t, conn, after, 2, 60*time.Second); got < 2 {
		t.Fatalf("%d lag snapshots written after the kill, want >= 2", got)
	}
	if v := scrape(addrs[standby], lagSeries); len(v) != 1 || v[0] != "6" {
		t.Fatalf("new active replica serves lag %v, want [6]", v)
	}
	var ats []struct {
		At int64 `ch:"at_ms"`
	}
	if err := conn.Select(t.Context(), &ats, fmt.Sprintf("SELECT DISTINCT at_ms FROM lag_snapshots WHERE consumer_group = '%s' ORDER BY at_ms", group)); err != nil {
		t.Fatal(err)
	}
	var gapMs int64
	for i := 1; i < len(ats); i++ {
		gapMs = max(gapMs, ats[i].At-ats[i-1].At)
	}
	t.Logf("failover: standby active %.2fs after SIGKILL (session timeout %s); longest gap between lag snapshots %.2fs",
		failover.Seconds(), session, float64(gapMs)/1e3)
}
