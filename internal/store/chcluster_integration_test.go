package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/testenv"
)

// These tests run on a real ClickHouse 18.16 cluster of the test's own (ZooKeeper + 2 shards x 2 replicas, started
// by deploy/local/chcluster.sh through testenv.StartClickHouseCluster): clickhouse.cluster mode end to end.

// clusterCtx bounds a cluster test's waits only against hangs: a cluster of four servers, ZooKeeper and ON CLUSTER
// DDL on a machine other engineers load takes minutes when a 60 s bound (testCtx) expired mid-migrate (seen at load
// 50), and no assertion may depend on that.
func clusterCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// clusterDB returns a fresh database name on c, dropped ON CLUSTER when the test ends.
func clusterDB(t *testing.T, c *testenv.ClickHouseCluster) string {
	t.Helper()
	db := testenv.Name(t, "tmc")
	admin := c.Conn(1, "")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" ON CLUSTER "+c.Name)
	})
	return db
}

// clusterStore opens a Store on db in cluster mode, over every node's address (connection failover).
func clusterStore(t *testing.T, c *testenv.ClickHouseCluster, db string, mod func(*Config)) *Store {
	t.Helper()
	cfg := Config{Addr: c.Addrs, Database: db, ClickHouseCluster: c.Name, MaxExecutionTime: 60 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(clusterCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// syncReplicas waits (SYSTEM SYNC REPLICA: the server returns once the replica has fetched every part its shard
// logged) until every local table of db is complete on every node.
func syncReplicas(t *testing.T, c *testenv.ClickHouseCluster, db string) {
	t.Helper()
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		for _, tb := range retentionTables {
			if err := conn.Exec(clusterCtx(t), "SYSTEM SYNC REPLICA "+db+"."+tb.Name+LocalSuffix); err != nil {
				t.Fatalf("node %d: sync replica %s: %v", i+1, tb.Name, err)
			}
		}
	}
}

// clusterLatencyRows are n live rows over 16 partitions of two topics, every value derived from the index.
func clusterLatencyRows(from, n int) []LatencyRow {
	var rows []LatencyRow
	for i := from; i < from+n; i++ {
		rows = append(rows, LatencyRow{
			Group: "g", Topic: []string{"orders", "payments"}[i%2], Partition: int32(i % 16), Offset: int64(i),
			Class: ClassLive, Source: SourceReceipt, AppendMs: 1764374400000 + int64(i), ObservedMs: 1764374400000 + int64(i) + 500,
			E2EMs: int64(i%997) + 1, QueueMs: int64(i % 89), Valid: ValidE2E | ValidQueue,
			ProducerHost: "prod-1", ConsumerHost: fmt.Sprintf("cons-%d", i%3), TraceID: fmt.Sprintf("%032x", i),
		})
	}
	return rows
}

// latencyDigest is what a node answers for the latency rows, through the Distributed table: every row, in key order.
func latencyDigest(t *testing.T, conn driver.Conn) []string {
	t.Helper()
	rows, err := conn.Query(clusterCtx(t), "SELECT topic, partition, offset, e2e_ms, queue_ms, consumer_host, trace_id "+
		"FROM latency_events ORDER BY topic, partition, offset")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var topic, host, trace string
		var part int32
		var off, e2e, queue int64
		if err := rows.Scan(&topic, &part, &off, &e2e, &queue, &host, &trace); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s/%d/%d %d %d %s %s", topic, part, off, e2e, queue, host, trace))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func wantDigest(rows []LatencyRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s/%d/%d %d %d %s %s", r.Topic, r.Partition, r.Offset, r.E2EMs, r.QueueMs, r.ConsumerHost, r.TraceID))
	}
	return out
}

func count(t *testing.T, conn driver.Conn, sql string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(clusterCtx(t), sql).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestClusterMigrateWriteReadEveryReplica(t *testing.T) {
	c := testenv.StartClickHouseCluster(t, 2, 2)
	db := clusterDB(t, c)
	s := clusterStore(t, c, db, nil)
	ctx := clusterCtx(t)

	at := time.Now()
	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("migrate ON CLUSTER from scratch: %v", time.Since(at).Round(time.Millisecond))
	ms, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	if res.From != 0 || res.To != CurrentSchemaVersion || !slices.Equal(res.Applied, names) || res.Dialect != DialectLegacy {
		t.Fatalf("first migrate on the cluster: %+v", res)
	}
	at = time.Now()
	again, err := s.Migrate(ctx)
	if err != nil {
		t.Fatalf("re-run migrate: %v", err)
	}
	t.Logf("migrate ON CLUSTER again: %v", time.Since(at).Round(time.Millisecond))
	if again.From != CurrentSchemaVersion || len(again.Applied) != 0 {
		t.Fatalf("re-run migrate applied %v from %d, want nothing", again.Applied, again.From)
	}

	// Migration 0005 adds a key column (ADD COLUMN + MODIFY ORDER BY): run on one replica of each shard, it reached
	// every server, and the re-created Distributed front has the column.
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		var local, dist string
		if err := conn.QueryRow(ctx, "SELECT sorting_key FROM system.tables WHERE database = ? AND name = ?", db, TableProbe+LocalSuffix).Scan(&local); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = 'instance'", db, TableProbe).Scan(&dist); err != nil {
			t.Fatalf("node %d: the Distributed %s has no instance column: %v", i+1, TableProbe, err)
		}
		if local != "topic, partition, seq, instance, cluster" || dist != "String" {
			t.Errorf("node %d: %s_local sorted by %q, Distributed instance column %q", i+1, TableProbe, local, dist)
		}
	}

	// The store's session carries cluster mode's settings.
	for name, want := range map[string]string{"insert_distributed_sync": "1", "distributed_ddl_task_timeout": "180"} {
		var got string
		if err := s.Conn().QueryRow(ctx, "SELECT value FROM system.settings WHERE name = ?", name).Scan(&got); err != nil || got != want {
			t.Errorf("setting %s = %q (%v), want %s", name, got, err, want)
		}
	}

	// Every node: the schema version, each migration recorded once, and the layout of chcluster.go.
	want := map[string]string{TableSchemaMigrations: "ReplicatedMergeTree", ViewLatency1m: "MaterializedView", ViewLatency1h: "MaterializedView"}
	for _, tb := range retentionTables {
		engine := "ReplicatedReplacingMergeTree"
		if tb.Rollup {
			engine = "ReplicatedAggregatingMergeTree"
		}
		want[tb.Name+LocalSuffix], want[tb.Name] = engine, "Distributed"
	}
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		if v, err := ReadSchemaVersion(ctx, conn); err != nil || v != CurrentSchemaVersion {
			t.Errorf("node %d: schema version %d, %v; want %d", i+1, v, err, CurrentSchemaVersion)
		}
		if n := count(t, conn, "SELECT count() FROM schema_migrations"); n != uint64(CurrentSchemaVersion) {
			t.Errorf("node %d: schema_migrations has %d rows after two migrates, want %d (once each)", i+1, n, CurrentSchemaVersion)
		}
		var tables []struct {
			Name   string `ch:"name"`
			Engine string `ch:"engine"`
		}
		if err := conn.Select(ctx, &tables, "SELECT name, engine FROM system.tables WHERE database = ?", db); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, tb := range tables {
			got[tb.Name] = tb.Engine
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node %d tables:\n got %v\nwant %v", i+1, got, want)
		}
	}

	// Write through the Distributed tables with the real writer, read back from every node.
	w := newTestWriter(t, s, nil, nil)
	rows := clusterLatencyRows(0, 4000)
	for i := 0; i < len(rows); i += 1000 {
		writeAndFlush(t, w, Rows{Latency: rows[i : i+1000]})
	}
	lag := []LagRow{{At: time.UnixMilli(1764374400000).UTC(), Cluster: "prod", Group: "g", Topic: "orders", Partition: 3,
		Committed: 90, LogStart: 10, End: 100, Lag: 10, TimeLagMs: 1234, Status: StatusOK, PartitionStatus: StatusOK}}
	writeAndFlush(t, w, Rows{Lag: lag})
	syncReplicas(t, c, db)

	want4000 := latencyDigestSorted(wantDigest(rows))
	var shardRows [2]uint64
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		if got := latencyDigestSorted(latencyDigest(t, conn)); !slices.Equal(got, want4000) {
			t.Fatalf("node %d reads %d latency rows through the Distributed table, want the %d written (first difference %s)",
				i+1, len(got), len(want4000), firstDiff(got, want4000))
		}
		var lagN, end int64
		var cl string
		if err := conn.QueryRow(ctx, "SELECT cluster, lag, end_offset FROM lag_snapshots").Scan(&cl, &lagN, &end); err != nil || cl != "prod" || lagN != 10 || end != 100 {
			t.Errorf("node %d lag snapshot: %s %d %d %v", i+1, cl, lagN, end, err)
		}
		// Each replica of a shard holds the same rows; the two shards split the 4000.
		local := count(t, conn, "SELECT count() FROM latency_events"+LocalSuffix)
		shard := i / c.Replicas
		if i%c.Replicas == 0 {
			shardRows[shard] = local
		} else if local != shardRows[shard] {
			t.Errorf("node %d (shard %d replica 2) holds %d rows, its replica 1 %d", i+1, shard+1, local, shardRows[shard])
		}
		// The rollups count every row once, whichever replica received it (the views fire on the receiving replica).
		if n := count(t, conn, "SELECT sumMerge(live) FROM latency_1m WHERE stage = 'e2e'"); n != 4000 {
			t.Errorf("node %d: latency_1m counts %d live e2e samples, want 4000", i+1, n)
		}
	}
	if shardRows[0] == 0 || shardRows[1] == 0 || shardRows[0]+shardRows[1] != 4000 {
		t.Errorf("shards hold %d + %d rows, want both non-empty, 4000 in all", shardRows[0], shardRows[1])
	}

	// Re-delivered rows (a new writer: no dedup window) count twice in the rollups until RebuildRollup recomputes the
	// day from latency_events FINAL, on every shard.
	w2 := newTestWriter(t, s, nil, nil)
	writeAndFlush(t, w2, Rows{Latency: rows[:1500]})
	day := time.UnixMilli(rows[0].ObservedMs)
	if err := s.RebuildRollup(ctx, day); err != nil {
		t.Fatal(err)
	}
	syncReplicas(t, c, db)
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		for _, tier := range []string{TableLatency1m, TableLatency1h} {
			if n := count(t, conn, "SELECT sumMerge(live) FROM "+tier+" WHERE stage = 'e2e'"); n != 4000 {
				t.Errorf("node %d: %s counts %d live e2e samples after the rebuild, want 4000", i+1, tier, n)
			}
		}
	}

	// Retention drops the day's partitions on every shard.
	dropped, err := s.DropExpired(ctx, day.AddDate(0, 0, 100))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dropped, DroppedPartition{Table: TableLatency, Day: day.UTC().Format("20060102")}) {
		t.Errorf("DropExpired dropped %v, want latency_events' day among them", dropped)
	}
	syncReplicas(t, c, db)
	for i := range c.Addrs {
		conn := c.Conn(i+1, db)
		if n := count(t, conn, "SELECT count() FROM latency_events"+LocalSuffix) + count(t, conn, "SELECT count() FROM lag_snapshots"+LocalSuffix); n != 0 {
			t.Errorf("node %d holds %d raw rows after retention dropped their day", i+1, n)
		}
	}
}

// latencyDigestSorted sorts digests as strings: both sides are compared as sets of exact rows.
func latencyDigestSorted(d []string) []string {
	d = slices.Clone(d)
	slices.Sort(d)
	return d
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("got %q want %q", a[i], b[i])
		}
	}
	return "in length"
}

// TestClusterReplicaDown: with one replica of a shard stopped, inserts through the Distributed table still succeed
// (the shard's other replica takes them) and readiness stays true; the stopped replica catches up when it returns.
// With a whole shard stopped, inserts fail with a retryable error: the writer retries, Stalled (what /readyz
// reports) says so, and when the shard returns every row is stored exactly once.
func TestClusterReplicaDown(t *testing.T) {
	c := testenv.StartClickHouseCluster(t, 2, 2)
	db := clusterDB(t, c)
	s := clusterStore(t, c, db, func(cfg *Config) {
		cfg.Writer.StallTimeout = time.Second
		cfg.Writer.RetryMax = 200 * time.Millisecond
		cfg.Writer.InsertTimeout = 20 * time.Second
	})
	ctx := clusterCtx(t)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w := newTestWriter(t, s, nil, nil)

	// Node 1 is shard 1's first replica and the first address: the one every insert went to so far.
	c.StopNode(1)
	rows := clusterLatencyRows(0, 2000)
	at := time.Now()
	writeAndFlush(t, w, Rows{Latency: rows[:1000]})
	t.Logf("1000 rows stored with node 1 down in %v", time.Since(at).Round(time.Millisecond))
	if err := w.Stalled(); err != nil {
		t.Errorf("writer stalled with one replica down: %v", err)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Errorf("CheckSchema with one replica down: %v", err)
	}
	at = time.Now()
	c.StartNode(1)
	syncReplicas(t, c, db)
	t.Logf("node 1 restarted and caught up in %v", time.Since(at).Round(time.Millisecond))
	if n := count(t, c.Conn(1, db), "SELECT count() FROM latency_events"+LocalSuffix); n != count(t, c.Conn(2, db), "SELECT count() FROM latency_events"+LocalSuffix) {
		t.Errorf("node 1 after its restart holds %d rows, its replica node 2 differs", n)
	}

	// Shard 2 entirely down: nothing can take its rows.
	c.StopNode(3)
	c.StopNode(4)
	acked := make(chan error, 1)
	if err := w.Write(ctx, Rows{Latency: rows[1000:]}, func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	for w.Stalled() == nil {
		select {
		case err := <-acked:
			t.Fatalf("a write with a whole shard down was acknowledged (%v) before the writer reported a stall", err)
		case <-ctx.Done():
			t.Fatal("the writer never reported a stall with a whole shard down")
		case <-time.After(50 * time.Millisecond): // polling Stalled, which measures StallTimeout on the real clock
		}
	}
	if err := w.Stalled(); !errors.Is(err, ErrWriterStalled) {
		t.Fatalf("Stalled = %v", err)
	}
	at = time.Now()
	c.StartNode(3)
	c.StartNode(4)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("shard 2 restarted and the retried write stored in %v", time.Since(at).Round(time.Millisecond))
	if err := <-acked; err != nil {
		t.Fatalf("after the shard returned the write was given up: %v", err)
	}
	syncReplicas(t, c, db)
	for i := range c.Addrs {
		got := latencyDigestSorted(latencyDigest(t, c.Conn(i+1, db)))
		if want := latencyDigestSorted(wantDigest(rows)); !slices.Equal(got, want) {
			t.Errorf("node %d reads %d rows, want the %d written once each (%s)", i+1, len(got), len(want), firstDiff(got, want))
		}
	}
}

// TestClusterModeMismatch: a single-server database is refused in cluster mode and the other way round, before
// anything is changed; an unknown cluster name is refused with the names the server has.
func TestClusterModeMismatch(t *testing.T) {
	c := testenv.StartClickHouseCluster(t, 1, 2)
	ctx := clusterCtx(t)

	db := clusterDB(t, c)
	single, err := Open(ctx, Config{Addr: c.Addrs[:1], Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer single.Close()
	if _, err := single.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := clusterStore(t, c, db, nil).Migrate(ctx); !errors.Is(err, ErrClusterMode) || !strings.Contains(err.Error(), "single server") {
		t.Errorf("cluster migrate of a single-server database: %v, want ErrClusterMode", err)
	}

	db2 := clusterDB(t, c)
	if _, err := clusterStore(t, c, db2, nil).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	plain, err := Open(ctx, Config{Addr: c.Addrs[:1], Database: db2})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Migrate(ctx); !errors.Is(err, ErrClusterMode) || !strings.Contains(err.Error(), "clickhouse.cluster is not set") {
		t.Errorf("single-server migrate of a cluster database: %v, want ErrClusterMode", err)
	}

	unknown := clusterStore(t, c, testenv.Name(t, "tmc"), func(cfg *Config) { cfg.ClickHouseCluster = "nope" })
	if _, err := unknown.Migrate(ctx); !errors.Is(err, ErrNoCluster) || !strings.Contains(err.Error(), c.Name) {
		t.Errorf("migrate with an unknown cluster: %v, want ErrNoCluster naming %s", err, c.Name)
	}
}
