package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// clusterGoldenParams renders the cluster-mode golden files: default retention, cluster tidemark_ch, database
// tidemark.
func clusterGoldenParams(d Dialect) SchemaParams {
	p := goldenParams(d)
	p.ClickHouseCluster, p.Database = "tidemark_ch", "tidemark"
	return p
}

func TestClusterSchemaGolden(t *testing.T) {
	for _, d := range []Dialect{DialectLegacy, DialectModern} {
		t.Run(string(d), func(t *testing.T) {
			got, err := RenderSchema(clusterGoldenParams(d))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", string(d)+"-cluster.sql")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/store -run TestClusterSchemaGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s cluster DDL differs from %s; if the change is intended, rerun with -update and review the diff", d, path)
			}
		})
	}
}

// TestClusterTransformEveryMigration: every statement of every migration comes out ON CLUSTER and qualified with the
// database, every table as a Replicated* local table with a Distributed front sharded by its ORDER BY, every view
// reading and writing local tables; the checksums are the single-server ones.
func TestClusterTransformEveryMigration(t *testing.T) {
	single, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Migrations(clusterGoldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if m.Checksum != single[i].Checksum || m.Name != single[i].Name {
			t.Errorf("migration %s: cluster checksum %s, single-server %s", m.Name, m.Checksum, single[i].Checksum)
		}
		for _, st := range m.Statements {
			if !strings.Contains(st, " ON CLUSTER tidemark_ch") && !PerShard(st) {
				t.Errorf("migration %s: statement not ON CLUSTER: %.100q", m.Name, st)
			}
			for _, tb := range retentionTables {
				for _, kw := range []string{"FROM ", "TO ", "TABLE ", "IF EXISTS ", "IF NOT EXISTS "} {
					if strings.Contains(st, kw+tb.Name+" ") || strings.Contains(st, kw+tb.Name+"\n") {
						t.Errorf("migration %s: unqualified %s%s in %.100q", m.Name, kw, tb.Name, st)
					}
				}
			}
		}
	}
	all, err := RenderSchema(clusterGoldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE IF NOT EXISTS tidemark.latency_events_local ON CLUSTER tidemark_ch\n(",
		"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/tidemark/latency_events', '{replica}', ver)",
		"ENGINE = Distributed(tidemark_ch, tidemark, latency_events_local, cityHash64(topic, consumer_group, partition, offset, replay_class))",
		"ENGINE = ReplicatedAggregatingMergeTree('/clickhouse/tables/{shard}/tidemark/latency_1m', '{replica}')",
		"CREATE MATERIALIZED VIEW IF NOT EXISTS tidemark.latency_1m_mv ON CLUSTER tidemark_ch TO tidemark.latency_1m_local AS",
		"FROM tidemark.latency_events_local\nARRAY JOIN\n",
		// 0003 changes lag_snapshots' columns: its Distributed front is re-created to carry them (18.16 refuses
		// ALTER ON CLUSTER on a Distributed table over replicated shards)
		"DROP TABLE IF EXISTS tidemark.lag_snapshots ON CLUSTER tidemark_ch;\n\nCREATE TABLE IF NOT EXISTS tidemark.lag_snapshots ON CLUSTER tidemark_ch AS tidemark.lag_snapshots_local",
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/tidemark/schema_migrations', '{shard}_{replica}')",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("cluster DDL lacks %q", want)
		}
	}
	if _, err := Migrations(SchemaParams{Dialect: DialectLegacy, ClickHouseCluster: "c", Database: "bad-name"}); err == nil {
		t.Error("a database name that is no identifier was spliced into cluster DDL")
	}
}

// TestClusterTransformModifyOrderBy: MODIFY ORDER BY (branches' migrations 0005/0006 add a key column) is run on one
// replica per shard, since 18.16's distributed DDL refuses it, and the Distributed front is re-created for the column.
func TestClusterTransformModifyOrderBy(t *testing.T) {
	tr, err := clusterSchema(clusterGoldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.migration("0099_x", []string{"ALTER TABLE probe_events\n    ADD COLUMN instance String AFTER trace_id, MODIFY ORDER BY (topic, partition, seq, instance)"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ALTER TABLE tidemark.probe_events_local\n    ADD COLUMN instance String AFTER trace_id, MODIFY ORDER BY (topic, partition, seq, instance)",
		"DROP TABLE IF EXISTS tidemark.probe_events ON CLUSTER tidemark_ch",
		"CREATE TABLE IF NOT EXISTS tidemark.probe_events ON CLUSTER tidemark_ch AS tidemark.probe_events_local\n" +
			"ENGINE = Distributed(tidemark_ch, tidemark, probe_events_local, cityHash64(topic, partition, seq))",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if !PerShard(got[0]) || PerShard(got[1]) || PerShard(got[2]) {
		t.Errorf("PerShard marks %v %v %v, want only the ALTER", PerShard(got[0]), PerShard(got[1]), PerShard(got[2]))
	}
}

// TestClusterTransformRefusesUnknownShapes: a statement the transform does not understand fails rendering, naming it,
// instead of running unchanged on one server of the cluster.
func TestClusterTransformRefusesUnknownShapes(t *testing.T) {
	for _, tc := range []struct{ name, stmt, msg string }{
		{"log engine", "CREATE TABLE IF NOT EXISTS t\n(\n    a Int8\n)\nENGINE = Log()", "no Replicated variant"},
		{"no order by", "CREATE TABLE IF NOT EXISTS t\n(\n    a Int8\n)\nENGINE = MergeTree()\nPARTITION BY a", "no ORDER BY"},
		{"alter unknown table", "ALTER TABLE nope ADD COLUMN a Int8", "not a table the migrations created"},
		{"view over unknown table", "CREATE MATERIALIZED VIEW IF NOT EXISTS v TO latency_events AS\nSELECT 1 FROM other", "reads other"},
		{"insert", "INSERT INTO latency_events SELECT 1", "not understood"},
		{"rename", "RENAME TABLE latency_events TO x", "not understood"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newClusterTransform("db", "c")
			if _, err := tr.migration("0001_init", []string{"CREATE TABLE IF NOT EXISTS latency_events\n(\n    a Int8\n)\nENGINE = ReplacingMergeTree(a)\nORDER BY (a)"}); err != nil {
				t.Fatal(err)
			}
			_, err := tr.migration("0099_x", []string{tc.stmt})
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "0099_x statement 1") {
				t.Errorf("error %v, want one naming 0099_x statement 1 and %q", err, tc.msg)
			}
		})
	}
}

// TestModernClusterDDLParsesInChDB: the modern-dialect cluster DDL parses in a current ClickHouse engine (chDB). It
// cannot run there (no cluster, no ZooKeeper in chDB); the 18.16 cluster tests run the legacy one for real.
func TestModernClusterDDLParsesInChDB(t *testing.T) {
	dir := "chdbtest"
	testenv.ChDB(t, dir)
	ddl, err := RenderSchema(clusterGoldenParams(DialectModern))
	if err != nil {
		t.Fatal(err)
	}
	n := len(SplitStatements(ddl))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "run.mjs", "--parse", filepath.Join("..", "testdata", "golden", "modern-cluster.sql"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chdb does not parse the modern cluster DDL: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if want := fmt.Sprintf("ok %d statements parsed, engine ", n); !strings.HasPrefix(lines[len(lines)-1], want) {
		t.Fatalf("run.mjs said %q, want %q...", lines[len(lines)-1], want)
	}
	t.Log(lines[len(lines)-1])
}
