package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMigrateClusterColumn upgrades, on the real server, a database written before the cluster column: the rows
// stored before (raw tables and the rollups their views fed) read as the configured cluster's name, also after a
// merge; afterwards two clusters' rows with the same topic, group, partition and offset are two rows, and the
// rollups keep their states apart (no cross-cluster merge).
func TestMigrateClusterColumn(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	ctx := testCtx(t)
	s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db, Cluster: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := Migrations(s.schemaParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.conn.Exec(ctx, schemaMigrationsDDL); err != nil {
		t.Fatal(err)
	}
	before := 0
	for ms[before].Name != "0006_cluster" {
		before++
	}
	for _, m := range ms[:before] {
		for _, st := range m.Statements {
			if err := s.conn.Exec(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.recordMigration(ctx, m, DialectLegacy); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for _, q := range []string{
		// written as a build without the column wrote them (two inserts: two parts, merged below)
		fmt.Sprintf(`INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, partition, offset,
			replay_class, e2e_ms, valid, consumer_host, ver) SELECT toDateTime(%d), toDateTime(%d), 'g', 't', 0, number,
			'live', 3, 8, 'c', 1 FROM numbers(10)`, at.Unix(), at.Unix()),
		fmt.Sprintf(`INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, partition, offset,
			replay_class, e2e_ms, valid, consumer_host, ver) SELECT toDateTime(%d), toDateTime(%d), 'g', 't', 0, number + 10,
			'live', 3, 8, 'c', 1 FROM numbers(5)`, at.Unix(), at.Unix()),
		fmt.Sprintf(`INSERT INTO probe_events (record_time, topic, partition, seq, status, ver) SELECT toDateTime(%d), 'p', 0, 1, 'ok', 1`, at.Unix()),
		fmt.Sprintf(`INSERT INTO clock_offsets (at, at_ms, host, kind, ver) SELECT toDateTime(%d), %d, 'h', 'synced', 1`, at.Unix(), at.UnixMilli()),
	} {
		if err := s.conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) == 0 || res.Applied[0] != "0006_cluster" {
		t.Fatalf("upgrade applied %v, want 0006_cluster first", res.Applied)
	}
	clusters := func(q string) map[string]uint64 {
		t.Helper()
		rows, err := conn.Query(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		out := map[string]uint64{}
		for rows.Next() {
			var c string
			var n uint64
			if err := rows.Scan(&c, &n); err != nil {
				t.Fatal(err)
			}
			out[c] = n
		}
		return out
	}
	want := func(what string, got map[string]uint64, w map[string]uint64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("%s: %v, want %v", what, got, w)
		}
	}
	queries := map[string]string{
		"latency_events": "SELECT cluster, count() FROM latency_events FINAL GROUP BY cluster",
		"latency_1m":     "SELECT cluster, sumMerge(live) FROM latency_1m WHERE stage = 'e2e' GROUP BY cluster",
		"latency_1h":     "SELECT cluster, sumMerge(live) FROM latency_1h WHERE stage = 'e2e' GROUP BY cluster",
		"probe_events":   "SELECT cluster, count() FROM probe_events FINAL GROUP BY cluster",
		"clock_offsets":  "SELECT cluster, count() FROM clock_offsets FINAL GROUP BY cluster",
	}
	old := map[string]map[string]uint64{"latency_events": {"prod": 15}, "latency_1m": {"prod": 15}, "latency_1h": {"prod": 15},
		"probe_events": {"prod": 1}, "clock_offsets": {"prod": 1}}
	for table, q := range queries {
		want(table+" before any merge", clusters(q), old[table])
	}
	// the same keys from cluster dr, through the writer
	var lat []LatencyRow
	for i := range 15 {
		ms := at.UnixMilli()
		lat = append(lat, LatencyRow{Cluster: "dr", Group: "g", Topic: "t", Offset: int64(i), Class: ClassLive, AppendMs: ms,
			ObservedMs: ms, E2EMs: 3, Valid: ValidE2E, ConsumerHost: "c"})
	}
	writeAndFlush(t, newTestWriter(t, s, nil, nil), Rows{Latency: lat,
		Probe:        []ProbeRow{{Cluster: "dr", Topic: "p", Partition: 0, Seq: 1, SendMs: at.UnixMilli(), Status: ProbeOK}},
		ClockOffsets: []ClockOffsetRow{{Cluster: "dr", At: at, Host: "h", Kind: ClockSynced}}})
	for _, table := range []string{"latency_events", "latency_1m", "latency_1h", "probe_events", "clock_offsets"} {
		if err := s.conn.Exec(ctx, "OPTIMIZE TABLE "+table+" FINAL"); err != nil {
			t.Fatal(err)
		}
	}
	for table, q := range queries {
		w := map[string]uint64{}
		for c, n := range old[table] {
			w[c], w["dr"] = n, n
		}
		want(table+" after dr's rows and a merge", clusters(q), w)
	}
}
