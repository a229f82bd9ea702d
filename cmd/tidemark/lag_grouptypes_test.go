package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
)

// TestGroupTypesEndToEnd runs a KIP-848 consumer group (Kafka's console consumer, group.protocol=consumer), a share
// group (the console share consumer) and a streams group (the Kafka Streams test app) on the real broker, and follows
// their lag through every surface: `tidemark lag --group REGEX -o json` (groups[].group, group_type,
// partitions[].lag), /metrics (the lag families, typed by tidemark_lag_group_info), lag_snapshots in ClickHouse (type,
// status, lag, subtopologies) and the lag query the plugin runs, by group type and per subtopology. Each group ends with a known backlog: records produced after it consumed.
func TestGroupTypesEndToEnd(t *testing.T) {
	brokers := testenv.Kafka(t)
	lib := testenv.KafkaLib(t)
	app := testenv.StreamsAppClasspath(t)
	bootstrap := strings.Join(brokers, ",")
	prefix := testenv.Name(t, "gt")
	topic := func(s string) string {
		name := prefix + "_" + s
		testenv.CreateNamedTopic(t, name, testenv.Topic{Partitions: 1})
		return name
	}
	t848, tshare, tin, tout := topic("k848"), topic("share"), topic("in"), topic("out")
	produce := func(topic string, n int) {
		t.Helper()
		cfg := testenv.SaramaConfig(t)
		p, err := sarama.NewSyncProducer(brokers, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := range n {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprint(i % 3))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tp := range []string{t848, tshare, tin} {
		produce(tp, 20)
	}
	g848, gshare, gapp := prefix+"_c", prefix+"_s", prefix+"_app"
	t.Cleanup(func() {
		adm := testenv.Admin(t)
		for _, g := range []string{g848, gshare, gapp} {
			_ = adm.DeleteConsumerGroup(g)
		}
		_ = adm.DeleteTopic(gapp + "-counts-repartition")
		_ = adm.DeleteTopic(gapp + "-counts-changelog")
	})

	// each group reads its 20 records and leaves; then 7, 15 and 4 more records wait for it
	testenv.StartJava(t, lib+"/*", "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap,
		"--topic", t848, "--group", g848, "--from-beginning", "--max-messages", "20",
		"--consumer-property", "group.protocol=consumer").Wait(2 * time.Minute)
	testenv.KafkaTool(t, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", bootstrap, "--alter",
		"--entity-type", "groups", "--entity-name", gshare, "--add-config", "share.auto.offset.reset=earliest")
	testenv.StartJava(t, lib+"/*", "org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server", bootstrap,
		"--topic", tshare, "--group", gshare, "--max-messages", "5").Wait(2 * time.Minute)
	produce(t848, 7)

	cfg := &lagexporter.Config{Cluster: "e2e", GroupAllow: []string{prefix + ".*"}, TopicAllow: []string{prefix + ".*"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := lagread.NewClusterReader(brokers, lagread.NewReaderConfig("tidemark-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	loop, err := lagexporter.NewLoop(cfg, r, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cycle := func() *lagexporter.Snapshot {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := loop.Cycle(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// the streams app processes its 20 input records, then stops; 4 more arrive for it
	p := testenv.StartJava(t, app, "dev.tidemark.lagapp.LagStreamsApp", bootstrap, gapp, tin, tout, t.TempDir(), "0")
	p.WaitLine("RUNNING", 2*time.Minute)
	testenv.Eventually(t, 60*time.Second, func() error {
		g := cycle().Group(gapp)
		if g != nil && g.Topic(tin) != nil && g.Topic(tin).CommittedSum == 20 && g.Total.Lag == 0 && len(g.Topics) == 2 {
			return nil
		}
		return fmt.Errorf("streams app has not caught up: %+v", g)
	})
	p.Stop()
	produce(tin, 4)

	want := map[string]struct {
		typ string
		lag int64
	}{g848: {lagexporter.GroupConsumer, 7}, gshare: {lagexporter.GroupShare, 15}, gapp: {lagexporter.GroupStreams, 4}}
	var snap *lagexporter.Snapshot
	testenv.Eventually(t, 60*time.Second, func() error {
		snap = cycle()
		ok := len(snap.Groups) == 3
		for _, g := range snap.Groups {
			ok = ok && len(g.Members) == 0 && g.Total.Lag == want[g.Group].lag
		}
		if ok {
			return nil
		}
		b, _ := json.Marshal(snap.Groups)
		return fmt.Errorf("groups have not reached the expected backlogs %v: %s", want, b)
	})

	// tidemark lag --group REGEX -o json, the command a script runs: the same fields for every type
	out, err := runLag(t, "--brokers", bootstrap, "--group", prefix+".*", "--topic", prefix+".*", "-o", "json")
	if err != nil {
		t.Fatalf("tidemark lag: %v\n%s", err, out)
	}
	var js struct {
		Groups []struct {
			Group      string `json:"group"`
			GroupType  string `json:"group_type"`
			Partitions []struct {
				Topic       string `json:"topic"`
				Lag         int64  `json:"lag"`
				Subtopology string `json:"subtopology"`
			} `json:"partitions"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil {
		t.Fatalf("tidemark lag -o json: %v\n%s", err, out)
	}
	if len(js.Groups) != len(want) {
		t.Fatalf("tidemark lag lists %d groups, want %d:\n%s", len(js.Groups), len(want), out)
	}
	for _, g := range js.Groups {
		var lag int64
		for _, p := range g.Partitions {
			lag += p.Lag
			if g.Group == gapp && p.Subtopology == "" {
				t.Errorf("streams partition %s without subtopology", p.Topic)
			}
		}
		if w := want[g.Group]; g.GroupType != w.typ || lag != w.lag {
			t.Errorf("json %s: type %q lag %d, want %q %d", g.Group, g.GroupType, lag, w.typ, w.lag)
		}
	}

	// /metrics: one set of lag families, the type on the info series
	reg := prometheus.NewRegistry()
	if err := promexport.Register(reg, cfg, loop); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	metric := func(name string) map[string]*dto.Metric {
		out := map[string]*dto.Metric{}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					key := ""
					for _, l := range m.GetLabel() {
						if l.GetName() == "group" || l.GetName() == "group_type" {
							key += l.GetValue() + " "
						}
					}
					out[strings.TrimSpace(key)] = m
				}
			}
		}
		return out
	}
	lagSeries, info := metric("tidemark_lag_group_offsets"), metric("tidemark_lag_group_info")
	for g, w := range want {
		if m := lagSeries[g]; m == nil || int64(m.GetGauge().GetValue()) != w.lag {
			t.Errorf("tidemark_lag_group_offsets{group=%q} = %v, want %d", g, m, w.lag)
		}
		if info[g+" "+w.typ] == nil {
			t.Errorf("no tidemark_lag_group_info{group=%q,group_type=%q}", g, w.typ)
		}
	}

	// ClickHouse: the snapshot's rows, then the plugin's lag query by group type and per subtopology
	db, conn := testenv.ClickHouseDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := store.NewWriter(st, store.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if err := w.Write(ctx, store.Rows{Lag: store.LagRows(snap)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// the stored rows: each group's type and the snapshot's status, and its lag
	rows, err := conn.Query(ctx, "SELECT consumer_group, toString(any(group_type)), toString(any(status)), sum(lag), "+
		"groupUniqArray(subtopology) FROM lag_snapshots GROUP BY consumer_group ORDER BY consumer_group")
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for rows.Next() {
		var group, typ, status string
		var lag int64
		var subs []string
		if err := rows.Scan(&group, &typ, &status, &lag, &subs); err != nil {
			t.Fatal(err)
		}
		g, w := snap.Group(group), want[group]
		if g == nil {
			t.Fatalf("lag_snapshots has %s, which the snapshot has not", group)
		}
		if typ != w.typ || status != g.Status.String() || lag != w.lag {
			t.Errorf("lag_snapshots %s: type %s, status %s, lag %d; want %s, %s (the snapshot's), %d", group, typ, status, lag, w.typ, g.Status, w.lag)
		}
		if wantSubs := map[bool]int{true: 2, false: 1}[group == gapp]; len(subs) != wantSubs {
			t.Errorf("lag_snapshots %s: subtopologies %q, want %d distinct", group, subs, wantSubs)
		}
		stored++
	}
	if err := rows.Err(); err != nil || stored != len(want) {
		t.Fatalf("lag_snapshots: %d groups (%v), want %d", stored, err, len(want))
	}

	q := query.NewReader(conn)
	win := query.Window{From: snap.Time.Add(-time.Minute), To: snap.Time.Add(time.Minute), Step: 2 * time.Minute}
	byType, err := q.ConsumerLag(ctx, query.LagQuery{Window: win, GroupBy: query.DimGroupType})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, p := range byType {
		got[p.Key] += p.Lag
	}
	if got["consumer"] != 7 || got["share"] != 15 || got["streams"] != 4 || len(got) != 3 {
		t.Fatalf("lag by group type from ClickHouse: %v, want consumer 7, share 15, streams 4", got)
	}
	perSub, err := q.ConsumerLag(ctx, query.LagQuery{Window: win, GroupBy: query.DimSubtopology,
		Filter: query.Filter{GroupTypes: []string{"streams"}}})
	if err != nil {
		t.Fatal(err)
	}
	subs := map[string]int64{}
	for _, p := range perSub {
		subs[p.Key] += p.Lag
	}
	if subs[gapp+"/0"] != 4 || subs[gapp+"/1"] != 0 || len(subs) != 2 {
		t.Fatalf("streams lag per subtopology: %v, want %s/0 4 (the input) and %s/1 0 (the repartition topic)", subs, gapp, gapp)
	}
}
