package store

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"text/template"
)

// Table names of the schema (docs/schema.md describes every column). Read queries use these constants.
const (
	TableLatency          = "latency_events"    // raw latency rows, ReplacingMergeTree
	TableProbe            = "probe_events"      // raw probe rows, ReplacingMergeTree
	TableLag              = "lag_snapshots"     // lag snapshots, ReplacingMergeTree
	TableClockOffsets     = "clock_offsets"     // clock-offset estimates, ReplacingMergeTree
	TableLatency1m        = "latency_1m"        // per-minute stage rollups, AggregatingMergeTree
	ViewLatency1m         = "latency_1m_mv"     // the materialized view feeding TableLatency1m
	TableLatency1h        = "latency_1h"        // per-hour stage rollups, AggregatingMergeTree (migration 0002)
	ViewLatency1h         = "latency_1h_mv"     // the materialized view feeding TableLatency1h, on TableLatency
	TableSchemaMigrations = "schema_migrations" // one row per applied migration
)

// RollupQuantiles are the levels the rollup's quantilesTDigest states are declared with. A t-digest state does not
// depend on its levels, so reads may merge with any levels, e.g. quantilesTDigestMerge(0.5, 0.95)(latency_ms).
var RollupQuantiles = []float64{0.5, 0.9, 0.99, 0.999}

// schemaMigrationsDDL creates the bookkeeping table. It is the same in both dialects and never changes: every Tidemark
// version must be able to read it to tell an older or newer schema.
const schemaMigrationsDDL = `CREATE TABLE IF NOT EXISTS schema_migrations
(
    version    UInt32,
    name       String,
    dialect    String,
    checksum   String,
    applied_at DateTime('UTC')
)
ENGINE = MergeTree()
ORDER BY version`

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migration is one versioned schema step rendered for a dialect.
type Migration struct {
	Version    int      // 1, 2, ...: the number the file name starts with
	Name       string   // file name without ".sql", e.g. "0001_init"
	SQL        string   // the rendered file, comments included
	Statements []string // SQL split into statements, comments removed, without the trailing ';'
	Checksum   string   // hex SHA-256 of the dialect and the template (not of SQL: retention days may change)
}

// SchemaParams are the values a migration template is rendered with.
type SchemaParams struct {
	Dialect             Dialect
	RetentionDays       int // raw tables' TTL on the modern dialect
	RollupRetentionDays int // rollup TTL on the modern dialect
	// ClickHouseCluster, when set, renders the schema for that ClickHouse cluster (Config.ClickHouseCluster;
	// chcluster.go): ON CLUSTER DDL,
	// Replicated* local tables and Distributed tables under the single-server names. Database then names the
	// database the DDL qualifies every table with; both are ignored when Cluster is "".
	ClickHouseCluster, Database string
	// Cluster is the cluster name migration 0006 gives the rows stored before the tables had a cluster column; ""
	// is DefaultCluster. It is not part of a migration's checksum (the template's source is).
	Cluster string
}

// DefaultCluster is the cluster name of a configuration that names none (lag.cluster's default).
const DefaultCluster = "default"

// CurrentSchemaVersion is the schema version this build of Tidemark writes and reads: the highest migration version
// embedded in the binary. A database at a lower version needs `tidemark migrate`; at a higher one, a newer Tidemark.
var CurrentSchemaVersion = mustCurrentVersion()

func mustCurrentVersion() int {
	names, err := migrationNames()
	if err != nil || len(names) == 0 {
		panic(fmt.Sprintf("store: embedded migrations unreadable: %v", err))
	}
	v, err := versionOf(names[len(names)-1])
	if err != nil {
		panic(err)
	}
	return v
}

func migrationNames() ([]string, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".sql"))
	}
	sort.Strings(names)
	return names, nil
}

func versionOf(name string) (int, error) {
	num, _, ok := strings.Cut(name, "_")
	v, err := strconv.Atoi(num)
	if !ok || err != nil || v <= 0 {
		return 0, fmt.Errorf("migration file %q: want NNNN_name.sql", name)
	}
	return v, nil
}

// Migrations renders every embedded migration for p, in version order. Versions must be 1, 2, 3, ... without gaps.
func Migrations(p SchemaParams) ([]Migration, error) {
	if p.Dialect != DialectLegacy && p.Dialect != DialectModern {
		return nil, fmt.Errorf("render migrations: dialect %q: want legacy or modern", p.Dialect)
	}
	names, err := migrationNames()
	if err != nil {
		return nil, fmt.Errorf("list embedded migrations: %w", err)
	}
	modern := p.Dialect == DialectModern
	funcs := template.FuncMap{
		"codec": func(c string) string {
			if modern {
				return " CODEC(" + c + ")"
			}
			return ""
		},
		// addColumn is ADD COLUMN, idempotent where the server can say so (18.16 has no IF NOT EXISTS there; its
		// migrations run once each, recorded in schema_migrations)
		"addColumn": func() string {
			if modern {
				return "ADD COLUMN IF NOT EXISTS"
			}
			return "ADD COLUMN"
		},
		// quote is a ClickHouse string literal of s (backslash and single quote escaped)
		"quote": func(s string) string {
			return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
		},
		"ttl": func(column string, days int) string {
			if modern {
				return fmt.Sprintf("\nTTL %s + toIntervalDay(%d)\nSETTINGS ttl_only_drop_parts = 1", column, days)
			}
			return ""
		},
	}
	if p.Cluster == "" {
		p.Cluster = DefaultCluster
	}
	data := struct {
		SchemaParams
		Str string
	}{p, "String"}
	if modern {
		data.Str = "LowCardinality(String)"
	}
	var out []Migration
	for i, name := range names {
		v, err := versionOf(name)
		if err != nil {
			return nil, err
		}
		if v != i+1 {
			return nil, fmt.Errorf("migration %s: version %d, want %d (no gaps, no duplicates)", name, v, i+1)
		}
		src, err := migrationFiles.ReadFile(path.Join("migrations", name+".sql"))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		tmpl, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("parse migration %s: %w", name, err)
		}
		var buf bytes.Buffer
		if err := tmpl.Execute(&buf, data); err != nil {
			return nil, fmt.Errorf("render migration %s: %w", name, err)
		}
		sum := sha256.Sum256(append([]byte(string(p.Dialect)+"\x00"), src...))
		out = append(out, Migration{
			Version: v, Name: name, SQL: buf.String(), Statements: SplitStatements(buf.String()),
			Checksum: hex.EncodeToString(sum[:]),
		})
	}
	if p.ClickHouseCluster != "" {
		if _, err := clusterMigrations(p, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// clusterMigrations rewrites ms in place for p.ClickHouseCluster (chcluster.go) and returns the transform, which knows
// every table the migrations created. The checksum stays the template's: a migration is the same step on a single
// server and on a cluster (Migrate refuses to mix the two modes in one database, see checkMode).
func clusterMigrations(p SchemaParams, ms []Migration) (*clusterTransform, error) {
	if !ValidIdentifier(p.ClickHouseCluster) || !ValidIdentifier(p.Database) {
		return nil, fmt.Errorf("render migrations: cluster %q / database %q: want letters, digits and '_'", p.ClickHouseCluster, p.Database)
	}
	tr := newClusterTransform(p.Database, p.ClickHouseCluster)
	for i := range ms {
		stmts, err := tr.migration(ms[i].Name, ms[i].Statements)
		if err != nil {
			return nil, err
		}
		ms[i].Statements = stmts
		ms[i].SQL = strings.Join(stmts, ";\n\n") + ";\n"
	}
	return tr, nil
}

// SplitStatements splits a migration file into statements: full-line "--" comments are dropped and a statement ends
// with a ';' at the end of a line. Migration files must not put ';' at a line end inside a string literal.
func SplitStatements(sql string) []string {
	var stmts []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(strings.TrimRight(line, " \t"))
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		stmts = append(stmts, s)
	}
	return stmts
}

// RenderSchema returns every migration for p concatenated, each under a header line: the golden DDL files and the
// chDB check execute exactly this text.
func RenderSchema(p SchemaParams) (string, error) {
	ms, err := Migrations(p)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	bookkeeping := schemaMigrationsDDL
	if p.ClickHouseCluster != "" {
		fmt.Fprintf(&b, "-- Tidemark schema version %d, dialect %s, ClickHouse cluster %s, database %s (generated by internal/store; do not edit).\n",
			len(ms), p.Dialect, p.ClickHouseCluster, p.Database)
		bookkeeping = clusterSchemaMigrationsDDL(p.Database, p.ClickHouseCluster)
	} else {
		fmt.Fprintf(&b, "-- Tidemark schema version %d, dialect %s (generated by internal/store; do not edit).\n", len(ms), p.Dialect)
	}
	fmt.Fprintf(&b, "\n-- bookkeeping: one row per applied migration (created before any migration runs)\n%s;\n", bookkeeping)
	for _, m := range ms {
		fmt.Fprintf(&b, "\n-- migration %s\n%s", m.Name, m.SQL)
	}
	ensure, err := EnsureStatements(p)
	if err != nil {
		return "", err
	}
	if len(ensure) > 0 {
		fmt.Fprintf(&b, "\n-- every Distributed table: re-created by every migrate if missing\n")
		for _, s := range ensure {
			fmt.Fprintf(&b, "%s;\n", s)
		}
	}
	stmts, err := RetentionStatements(p)
	if err != nil {
		return "", err
	}
	if len(stmts) > 0 {
		fmt.Fprintf(&b, "\n-- retention: re-applied by every migrate so a changed retention_days takes effect\n")
		for _, s := range stmts {
			fmt.Fprintf(&b, "%s;\n", s)
		}
	}
	return b.String(), nil
}

// retentionTable is a table with daily partitions and the DateTime column they are derived from.
type retentionTable struct {
	Name, TimeColumn string
	Rollup           bool // kept RollupRetentionDays instead of RetentionDays
}

// retentionTables lists every table retention applies to.
var retentionTables = []retentionTable{
	{TableLatency, "record_time", false},
	{TableProbe, "record_time", false},
	{TableLag, "at", false},
	{TableClockOffsets, "at", false},
	{TableLatency1m, "minute", true},
	{TableLatency1h, "hour", true},
}

// RetentionStatements returns the statements that set each table's TTL to the configured retention (see
// retentionStatements), for p's mode: in cluster mode on the local tables, ON CLUSTER. Migrate runs them every time.
func RetentionStatements(p SchemaParams) ([]string, error) {
	stmts := retentionStatements(p)
	if p.ClickHouseCluster == "" {
		return stmts, nil
	}
	tr, err := clusterSchema(p)
	if err != nil {
		return nil, err
	}
	return tr.retention(stmts)
}

// EnsureStatements returns what Migrate runs every time before the retention statements: nothing on a single server;
// in cluster mode the idempotent CREATE of every Distributed table, so a migration interrupted while it re-created
// one (chcluster.go) is healed by the next migrate.
func EnsureStatements(p SchemaParams) ([]string, error) {
	if p.ClickHouseCluster == "" {
		return nil, nil
	}
	tr, err := clusterSchema(p)
	if err != nil {
		return nil, err
	}
	return tr.ensureDistributed(), nil
}

// clusterSchema runs the cluster transform over every migration and returns it, knowing every table.
func clusterSchema(p SchemaParams) (*clusterTransform, error) {
	ms, err := Migrations(SchemaParams{Dialect: p.Dialect, RetentionDays: p.RetentionDays, RollupRetentionDays: p.RollupRetentionDays})
	if err != nil {
		return nil, err
	}
	return clusterMigrations(p, ms)
}

// retentionStatements returns the statements that set each table's TTL to the configured retention: none on the
// legacy dialect (no TTL in 18.16), an ALTER ... MODIFY TTL per table on the modern one.
func retentionStatements(p SchemaParams) []string {
	if p.Dialect != DialectModern {
		return nil
	}
	var out []string
	for _, t := range retentionTables {
		days := p.RetentionDays
		if t.Rollup {
			days = p.RollupRetentionDays
		}
		out = append(out, fmt.Sprintf("ALTER TABLE %s MODIFY TTL %s + toIntervalDay(%d)", t.Name, t.TimeColumn, days))
	}
	return out
}
