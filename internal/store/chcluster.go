package store

import (
	"fmt"
	"regexp"
	"strings"
)

// Cluster mode (Config.ClickHouseCluster, `clickhouse.cluster`): Tidemark's schema on a ClickHouse cluster of
// replicated shards, the layout ClickHouse documents for Replicated* engines and that runs unchanged from 18.16
// (tested here) to current releases:
//
//   - every table T of the single-server schema becomes T_local, created ON CLUSTER with the Replicated variant of its
//     engine, stored at ZooKeeper path /clickhouse/tables/{shard}/<database>/T with replica name {replica} (the
//     servers' macros), plus T itself, a Distributed table over T_local on every server. Every read and write names
//     T as before, so internal/store/query and the Grafana plugin need no cluster knowledge: a Distributed read sends
//     the query to one replica of each shard and merges the partial aggregates (quantilesTDigestMerge, sumMerge,
//     argMax, count) at the initiator.
//   - a Distributed table's sharding key is cityHash64 of its local table's ORDER BY columns: rows with the same
//     ReplacingMergeTree key land on the same shard, so FINAL and the merges still collapse duplicates.
//   - a materialized view reads T_local and writes U_local on each server: a block inserted into a shard is
//     aggregated by the replica that received it and the aggregate replicates with U_local, so it is counted once.
//   - schema_migrations is one ReplicatedMergeTree with every server of every shard as a replica (ZooKeeper path
//     /clickhouse/tables/all/<database>/schema_migrations, replica '{shard}_{replica}'): applied once, read locally on
//     every server.
//
// clusterTransform rewrites the single-server statements of the migrations, in order, into this layout, so migrations
// stay written once in plain DDL. It understands exactly the statement shapes Tidemark's migrations use (CREATE TABLE
// ... ENGINE = *MergeTree, CREATE MATERIALIZED VIEW ... TO, ALTER TABLE, DROP TABLE) and refuses anything else with
// an error naming the statement, so a new kind of migration cannot slip through untransformed.

// LocalSuffix is appended to a table's name for its replicated per-server table in cluster mode.
const LocalSuffix = "_local"

// clusterTable is a table the transform has seen created.
type clusterTable struct {
	shardingKey string // the Distributed table's sharding expression
}

// clusterTransform carries what the migrations so far created: later migrations ALTER and DROP those tables.
type clusterTransform struct {
	db, cluster string
	tables      map[string]clusterTable // replicated tables (with a Distributed front), by name
	views       map[string]bool         // materialized views, by name
	order       []string                // tables in the order they were created
}

func newClusterTransform(db, cluster string) *clusterTransform {
	return &clusterTransform{db: db, cluster: cluster, tables: map[string]clusterTable{}, views: map[string]bool{}}
}

var (
	reCreateTable = regexp.MustCompile(`(?s)^CREATE TABLE IF NOT EXISTS (\w+)\s*\n(\(.*\))\s*\nENGINE = (\w+)\(([^)]*)\)(.*)$`)
	reOrderBy     = regexp.MustCompile(`\nORDER BY \(([^)]*)\)`)
	reCreateView  = regexp.MustCompile(`(?s)^CREATE MATERIALIZED VIEW IF NOT EXISTS (\w+) TO (\w+) AS\n(.*)$`)
	reFromJoin    = regexp.MustCompile(`\b(FROM|JOIN)(\s+)(\w+)\b`)
	reAlter       = regexp.MustCompile(`(?s)^ALTER TABLE (\w+)(\s+)(.*)$`)
	reDrop        = regexp.MustCompile(`^DROP TABLE IF EXISTS (\w+)$`)
	reArrayJoin   = regexp.MustCompile(`\bARRAY\s+$`)
)

// onCluster is " ON CLUSTER <name>".
func (c *clusterTransform) onCluster() string { return " ON CLUSTER " + c.cluster }

func (c *clusterTransform) local(name string) string { return c.db + "." + name + LocalSuffix }

// distributed returns the statement creating name's Distributed table (with its local table's current columns).
func (c *clusterTransform) distributed(name string) string {
	return fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s%s AS %s\nENGINE = Distributed(%s, %s, %s%s, %s)",
		c.db, name, c.onCluster(), c.local(name), c.cluster, c.db, name, LocalSuffix, c.tables[name].shardingKey)
}

// migration transforms one migration's statements. A migration that changes a table's columns ends by re-creating the
// table's Distributed front (ClickHouse 18.16 refuses ALTER ... ON CLUSTER on a Distributed table over replicated
// shards, error 371; a Distributed table holds no data when inserts are synchronous, as Tidemark's are).
func (c *clusterTransform) migration(name string, stmts []string) ([]string, error) {
	var out, altered []string
	for i, st := range stmts {
		got, alteredTable, err := c.statement(st)
		if err != nil {
			return nil, fmt.Errorf("migration %s statement %d in cluster mode: %w", name, i+1, err)
		}
		out = append(out, got...)
		if alteredTable != "" && !contains(altered, alteredTable) {
			altered = append(altered, alteredTable)
		}
	}
	for _, t := range altered {
		out = append(out, fmt.Sprintf("DROP TABLE IF EXISTS %s.%s%s", c.db, t, c.onCluster()), c.distributed(t))
	}
	return out, nil
}

// statement transforms one statement; altered names a table whose columns it changes.
func (c *clusterTransform) statement(st string) (out []string, altered string, err error) {
	if m := reCreateTable.FindStringSubmatch(st); m != nil {
		name, cols, engine, args, rest := m[1], m[2], m[3], m[4], m[5]
		if !strings.HasSuffix(engine, "MergeTree") || strings.HasPrefix(engine, "Replicated") {
			return nil, "", fmt.Errorf("table %s: engine %s has no Replicated variant Tidemark knows", name, engine)
		}
		ob := reOrderBy.FindStringSubmatch(rest)
		if ob == nil {
			return nil, "", fmt.Errorf("table %s: no ORDER BY (...) to derive its sharding key from", name)
		}
		rargs := fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s', '{replica}'", c.db, name)
		if strings.TrimSpace(args) != "" {
			rargs += ", " + args
		}
		c.tables[name] = clusterTable{shardingKey: "cityHash64(" + ob[1] + ")"}
		c.order = append(c.order, name)
		return []string{
			fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s%s\n%s\nENGINE = Replicated%s(%s)%s", c.local(name), c.onCluster(), cols, engine, rargs, rest),
			c.distributed(name),
		}, "", nil
	}
	if m := reCreateView.FindStringSubmatch(st); m != nil {
		view, to, sel := m[1], m[2], m[3]
		if _, ok := c.tables[to]; !ok {
			return nil, "", fmt.Errorf("view %s: target %s is not a table the migrations created", view, to)
		}
		var bad error
		sel = replaceFromJoin(sel, func(kw, table string) string {
			if _, ok := c.tables[table]; !ok {
				bad = fmt.Errorf("view %s reads %s, not a table the migrations created", view, table)
				return table
			}
			return c.local(table)
		})
		if bad != nil {
			return nil, "", bad
		}
		c.views[view] = true
		return []string{fmt.Sprintf("CREATE MATERIALIZED VIEW IF NOT EXISTS %s.%s%s TO %s AS\n%s", c.db, view, c.onCluster(), c.local(to), sel)}, "", nil
	}
	if m := reAlter.FindStringSubmatch(st); m != nil {
		table, sep, body := m[1], m[2], m[3]
		if _, ok := c.tables[table]; !ok {
			return nil, "", fmt.Errorf("ALTER of %s, not a table the migrations created", table)
		}
		if strings.Contains(body, "COLUMN") {
			altered = table
		}
		// Every local table is Replicated*, and ReplicatedMergeTree replicates its own ALTERs (columns, sorting key)
		// through ZooKeeper to the shard's other replicas, waiting for the active ones: the statement is sent without
		// ON CLUSTER to one replica of each shard (Store.execPerShard). ON CLUSTER is not used for them: 18.16's
		// distributed DDL refuses MODIFY ORDER BY ("Unsupported type of ALTER query", code 48), and a MODIFY COLUMN
		// sent ON CLUSTER to both replicas of a shard was seen to hang past distributed_ddl_task_timeout with one
		// host "unfinished" (each replica's DDL worker waiting on the other's replicated ALTER). The Distributed
		// sharding key stays the old ORDER BY: a prefix of the new key, so same-key rows still share a shard.
		return []string{"ALTER TABLE " + c.local(table) + sep + body}, altered, nil
	}
	if m := reDrop.FindStringSubmatch(st); m != nil {
		name := m[1]
		switch {
		case c.views[name]:
			delete(c.views, name)
			return []string{fmt.Sprintf("DROP TABLE IF EXISTS %s.%s%s", c.db, name, c.onCluster())}, "", nil
		case c.tables[name] != clusterTable{}:
			delete(c.tables, name)
			return []string{
				fmt.Sprintf("DROP TABLE IF EXISTS %s.%s%s", c.db, name, c.onCluster()),
				fmt.Sprintf("DROP TABLE IF EXISTS %s%s", c.local(name), c.onCluster()),
			}, "", nil
		}
		return nil, "", fmt.Errorf("DROP of %s, not a table or view the migrations created", name)
	}
	return nil, "", fmt.Errorf("statement not understood by the cluster transform: %.80q", st)
}

// PerShard reports whether a cluster-mode statement is to be run on one replica of each shard rather than ON CLUSTER:
// an ALTER of a local table without ON CLUSTER (see statement).
func PerShard(stmt string) bool {
	head, _, _ := strings.Cut(stmt, "\n")
	return strings.HasPrefix(stmt, "ALTER TABLE ") && !strings.Contains(head, " ON CLUSTER ")
}

// replaceFromJoin replaces the table name after every FROM and JOIN keyword of a SELECT with f's answer; ARRAY JOIN
// (which names arrays, not tables) is left alone.
func replaceFromJoin(sel string, f func(kw, table string) string) string {
	var b strings.Builder
	last := 0
	for _, m := range reFromJoin.FindAllStringSubmatchIndex(sel, -1) {
		kw, table := sel[m[2]:m[3]], sel[m[6]:m[7]]
		if kw == "JOIN" && reArrayJoin.MatchString(sel[:m[0]]) {
			continue
		}
		b.WriteString(sel[last:m[6]])
		b.WriteString(f(kw, table))
		last = m[7]
	}
	b.WriteString(sel[last:])
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clusterSchemaMigrationsDDL is schemaMigrationsDDL in cluster mode: every server of every shard is a replica of one
// table, so the bookkeeping is written once and read locally everywhere.
func clusterSchemaMigrationsDDL(db, cluster string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.schema_migrations ON CLUSTER %s
(
    version    UInt32,
    name       String,
    dialect    String,
    checksum   String,
    applied_at DateTime('UTC')
)
ENGINE = ReplicatedMergeTree('/clickhouse/tables/all/%s/schema_migrations', '{shard}_{replica}')
ORDER BY version`, db, cluster, db)
}

// retention returns retention statements for the local tables: TTLs and partitions live on them.
func (c *clusterTransform) retention(stmts []string) ([]string, error) {
	var out []string
	for _, st := range stmts {
		got, _, err := c.statement(st)
		if err != nil {
			return nil, fmt.Errorf("retention in cluster mode: %w", err)
		}
		out = append(out, got...)
	}
	return out, nil
}

// ensureDistributed returns, for every table the migrations created, the idempotent statement creating its
// Distributed front: Migrate runs them every time, so a migration interrupted between dropping and re-creating a
// Distributed table (see migration) is healed by the next run.
func (c *clusterTransform) ensureDistributed() []string {
	var out []string
	for _, t := range c.order {
		if _, ok := c.tables[t]; ok {
			out = append(out, c.distributed(t))
		}
	}
	return out
}
