package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// MigrateResult reports what Migrate did.
type MigrateResult struct {
	Server  string   // server version, e.g. "18.16.1"
	Dialect Dialect  // the database's dialect
	From    int      // schema version before
	To      int      // schema version after (CurrentSchemaVersion)
	Applied []string // names of the migrations applied now, in order; empty when the schema was current
}

// appliedMigration is a row of schema_migrations.
type appliedMigration struct {
	Version  uint32 `ch:"version"`
	Name     string `ch:"name"`
	Dialect  string `ch:"dialect"`
	Checksum string `ch:"checksum"`
}

// Migrate brings the database to CurrentSchemaVersion: it creates the database and schema_migrations when missing,
// then applies, in order, every embedded migration above the recorded version, recording each after all its
// statements succeeded. It is idempotent: on a current schema it changes nothing but the modern dialect's TTLs (set
// to the configured retention). The dialect is the one recorded in schema_migrations; a fresh database gets
// Config.Dialect, or the server's (DialectFor) when "auto".
//
// Errors: ErrMigrationTable when schema_migrations holds a row Tidemark would not write (version 0, unknown or mixed
// dialects); ErrSchemaNewer when the database is ahead of this build; ErrChecksumMismatch when an applied migration's
// name or checksum differs from the embedded one; otherwise the failing statement's error. Nothing is changed in
// the database's tables before these checks pass.
//
// With Config.ClickHouseCluster every statement runs ON CLUSTER (chcluster.go): ClickHouse runs it on every server of the
// cluster and answers when all have, so Migrate needs every server up (else it fails after the server's
// distributed_ddl_task_timeout, default 180 s, naming the servers that did not answer; the statement stays queued in ZooKeeper and those servers run it when
// they return). Each migration is recorded once, with insert_quorum = every server, so it is visible on every
// server when Migrate returns. ErrNoCluster when the server does not know the cluster, ErrClusterMode when the
// database was created in the other mode.
func (s *Store) Migrate(ctx context.Context) (MigrateResult, error) {
	var res MigrateResult
	major, err := s.createDatabase(ctx, &res)
	if err != nil {
		return res, err
	}
	if err := s.checkMode(ctx); err != nil {
		return res, err
	}
	bookkeeping := schemaMigrationsDDL
	if s.cfg.ClickHouseCluster != "" {
		bookkeeping = clusterSchemaMigrationsDDL(s.cfg.Database, s.cfg.ClickHouseCluster)
	}
	if err := s.conn.Exec(ctx, bookkeeping); err != nil {
		return res, fmt.Errorf("create %s: %w", TableSchemaMigrations, err)
	}
	var applied []appliedMigration
	if err := s.conn.Select(ctx, &applied,
		"SELECT version, name, dialect, checksum FROM "+TableSchemaMigrations+" ORDER BY version"); err != nil {
		return res, fmt.Errorf("read %s: %w", TableSchemaMigrations, err)
	}

	st, err := parseApplied(applied)
	if err != nil {
		return res, err
	}
	res.Dialect, res.From = st.dialect, st.version
	if res.Dialect == "" {
		if res.Dialect, err = s.freshDialect(major); err != nil {
			return res, err
		}
	}
	ms, err := Migrations(s.schemaParams(res.Dialect))
	if err != nil {
		return res, err
	}
	if err := st.verify(ms, s.cfg.Database); err != nil {
		return res, err
	}
	done := st.done
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if err := s.exec(ctx, stmt); err != nil && !ColumnAlreadyAdded(stmt, err) {
				return res, fmt.Errorf("apply migration %s statement %d: %w", m.Name, i+1, err)
			}
		}
		if err := s.recordMigration(ctx, m, res.Dialect); err != nil {
			return res, err
		}
		res.Applied = append(res.Applied, m.Name)
	}
	res.To = CurrentSchemaVersion
	ensure, err := EnsureStatements(s.schemaParams(res.Dialect))
	if err != nil {
		return res, err
	}
	for _, stmt := range ensure {
		if err := s.conn.Exec(ctx, stmt); err != nil {
			return res, fmt.Errorf("ensure distributed tables: %w", err)
		}
	}
	retention, err := RetentionStatements(s.schemaParams(res.Dialect))
	if err != nil {
		return res, err
	}
	for _, stmt := range retention {
		// Metadata only: parts already written are not rewritten (they expire as whole parts anyway).
		ctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"materialize_ttl_after_modify": 0}))
		if err := s.conn.Exec(ctx, stmt); err != nil {
			return res, fmt.Errorf("set retention: %w", err)
		}
	}
	return res, nil
}

func (s *Store) schemaParams(d Dialect) SchemaParams {
	return SchemaParams{Dialect: d, RetentionDays: s.cfg.RetentionDays, RollupRetentionDays: s.cfg.RollupRetentionDays,
		ClickHouseCluster: s.cfg.ClickHouseCluster, Database: s.cfg.Database,
		Cluster: s.cfg.Cluster}
}

// freshDialect returns the dialect for a database without migrations: the configured one, or the server's.
func (s *Store) freshDialect(major uint64) (Dialect, error) {
	d, err := ParseDialect(s.cfg.Dialect)
	if err != nil {
		return "", err
	}
	if d == "" {
		d = DialectFor(major)
	}
	return d, nil
}

// appliedState is what schema_migrations says about a database, after parseApplied checked every row.
type appliedState struct {
	dialect Dialect            // the dialect every row records; "" when there are no rows
	version int                // the highest recorded version; 0 when there are no rows
	done    map[int]bool       // every recorded version
	rows    []appliedMigration // the rows, as read
}

// parseApplied checks the rows of schema_migrations, read from a database this build did not necessarily write,
// and never panics on them. Each row must have a version >= 1 and the same dialect, legacy or modern; a version
// recorded twice is accepted (two concurrent migrates may both record it). Errors wrap ErrMigrationTable and name
// the row.
func parseApplied(rows []appliedMigration) (appliedState, error) {
	st := appliedState{done: map[int]bool{}, rows: rows}
	for _, a := range rows {
		if a.Version == 0 {
			return appliedState{}, fmt.Errorf("%s row %q has version 0, versions start at 1: %w",
				TableSchemaMigrations, a.Name, ErrMigrationTable)
		}
		d, err := ParseDialect(a.Dialect)
		if err != nil || d == "" {
			return appliedState{}, fmt.Errorf("%s row version %d records dialect %q, want legacy or modern: %w",
				TableSchemaMigrations, a.Version, a.Dialect, ErrMigrationTable)
		}
		if st.dialect != "" && d != st.dialect {
			return appliedState{}, fmt.Errorf("%s mixes dialects %s and %s (version %d): %w",
				TableSchemaMigrations, st.dialect, d, a.Version, ErrMigrationTable)
		}
		st.dialect = d
		v := int(a.Version)
		st.done[v] = true
		st.version = max(st.version, v)
	}
	return st, nil
}

// verify compares the recorded migrations with ms, the embedded ones rendered for st's dialect: ErrSchemaNewer when
// the database is ahead of this build, ErrChecksumMismatch when a recorded migration's name or checksum differs from
// the embedded one of the same version.
func (st appliedState) verify(ms []Migration, database string) error {
	for _, a := range st.rows {
		v := int(a.Version)
		if v < 1 || v > len(ms) {
			continue // parseApplied refused < 1; newer versions are reported below
		}
		m := ms[v-1]
		if a.Name != m.Name {
			return fmt.Errorf("migration version %d recorded as %q, embedded as %q: %w", v, a.Name, m.Name, ErrChecksumMismatch)
		}
		if a.Checksum != m.Checksum {
			return fmt.Errorf("migration %s recorded checksum %.12s, embedded %.12s: %w",
				m.Name, a.Checksum, m.Checksum, ErrChecksumMismatch)
		}
	}
	if st.version > len(ms) {
		return fmt.Errorf("database %s at schema version %d, this build knows up to %d: %w",
			database, st.version, len(ms), ErrSchemaNewer)
	}
	return nil
}

// createDatabase creates the configured database through a connection to the user's default database (a connection
// naming a missing database is refused at the handshake), and records the server version in res. In cluster mode
// it first checks the server knows the cluster and creates the database ON CLUSTER.
func (s *Store) createDatabase(ctx context.Context, res *MigrateResult) (major uint64, err error) {
	opts, err := s.cfg.options("")
	if err != nil {
		return 0, fmt.Errorf("open clickhouse %v: %w", s.cfg.Addr, err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		return 0, fmt.Errorf("open clickhouse %v: %w", s.cfg.Addr, err)
	}
	defer admin.Close()
	v, err := admin.ServerVersion()
	if err != nil {
		return 0, fmt.Errorf("server version of %v: %w", s.cfg.Addr, err)
	}
	res.Server = fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	onCluster := ""
	if c := s.cfg.ClickHouseCluster; c != "" {
		if _, err := clusterHosts(ctx, admin, c); err != nil {
			return 0, err
		}
		onCluster = " ON CLUSTER " + c
	}
	if err := admin.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+s.cfg.Database+onCluster); err != nil {
		return 0, fmt.Errorf("create database %s%s: %w", s.cfg.Database, onCluster, err)
	}
	return v.Version.Major, nil
}

// clusterHosts returns how many servers cluster has in the server's remote_servers, or ErrNoCluster naming the
// clusters it does have.
func clusterHosts(ctx context.Context, conn driver.Conn, cluster string) (int, error) {
	var names []string
	var n uint64
	rows, err := conn.Query(ctx, "SELECT cluster, count() FROM system.clusters GROUP BY cluster ORDER BY cluster")
	if err != nil {
		return 0, fmt.Errorf("read system.clusters: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c uint64
		if err := rows.Scan(&name, &c); err != nil {
			return 0, fmt.Errorf("read system.clusters: %w", err)
		}
		names = append(names, name)
		if name == cluster {
			n = c
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("read system.clusters: %w", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("clickhouse.cluster %q: the server's remote_servers has %q: %w", cluster, names, ErrNoCluster)
	}
	return int(n), nil
}

// checkMode refuses a database whose schema_migrations was created in the other mode (single server or cluster):
// mixing them would ALTER a Distributed table as if it held the data, or create replicated tables beside plain
// ones. docs/schema.md says how to move a single-server database onto a cluster.
func (s *Store) checkMode(ctx context.Context) error {
	var engine string
	err := s.conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = ?",
		s.cfg.Database, TableSchemaMigrations).Scan(&engine)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the engine of %s.%s: %w", s.cfg.Database, TableSchemaMigrations, err)
	}
	replicated := strings.HasPrefix(engine, "Replicated")
	switch {
	case s.cfg.ClickHouseCluster != "" && !replicated:
		return fmt.Errorf("database %s was migrated for a single server (%s is %s), clickhouse.cluster is %q: %w",
			s.cfg.Database, TableSchemaMigrations, engine, s.cfg.ClickHouseCluster, ErrClusterMode)
	case s.cfg.ClickHouseCluster == "" && replicated:
		return fmt.Errorf("database %s was migrated for a ClickHouse cluster (%s is %s), clickhouse.cluster is not set: %w",
			s.cfg.Database, TableSchemaMigrations, engine, ErrClusterMode)
	}
	return nil
}

// recordMigration records m in schema_migrations; on a cluster with insert_quorum = the cluster's servers, so the
// row is on every server's replica when it returns.
func (s *Store) recordMigration(ctx context.Context, m Migration, d Dialect) error {
	if s.cfg.ClickHouseCluster != "" {
		hosts, err := clusterHosts(ctx, s.conn, s.cfg.ClickHouseCluster)
		if err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		if hosts > 1 {
			ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_quorum": hosts}))
		}
	}
	b, err := s.conn.PrepareBatch(ctx,
		"INSERT INTO "+TableSchemaMigrations+" (version, name, dialect, checksum, applied_at)")
	if err != nil {
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := b.Append(uint32(m.Version), m.Name, string(d), m.Checksum, s.now().UTC().Truncate(time.Second)); err != nil {
		_ = b.Abort()
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("record migration %s: %w", m.Name, err)
	}
	return nil
}

// ColumnAlreadyAdded reports whether err is ClickHouse refusing stmt, an ALTER TABLE ... ADD COLUMN, because the
// column exists: the statement was applied before and the migration not recorded (a crash in between, or two
// concurrent migrates). ClickHouse 18.16 has no ADD COLUMN IF NOT EXISTS, so this is how such a migration stays
// idempotent; a migration's ALTER applies all its commands or none (one metadata change), so nothing is half done.
// Codes: 44 ILLEGAL_COLUMN ("column with this name already exists", 18.16), 15 DUPLICATE_COLUMN (current releases).
func ColumnAlreadyAdded(stmt string, err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) || (ex.Code != 44 && ex.Code != 15) || !strings.Contains(ex.Message, "already exists") {
		return false
	}
	return strings.HasPrefix(stmt, "ALTER TABLE ") && strings.Contains(stmt, " ADD COLUMN ")
}

// exec runs a migration statement: on the connected server (ON CLUSTER statements fan out from there), or, for a
// statement PerShard marks, on one replica of each shard of the ClickHouse cluster.
func (s *Store) exec(ctx context.Context, stmt string) error {
	if s.cfg.ClickHouseCluster == "" || !PerShard(stmt) {
		return s.conn.Exec(ctx, stmt)
	}
	return s.execPerShard(ctx, stmt)
}

// execPerShard runs stmt on one replica of every shard of the cluster, as system.clusters names them (host_name and
// port), with the store's credentials and TLS; a shard's replicas are tried in order, so one stopped replica is
// skipped. A ReplicatedMergeTree ALTER run on one replica reaches the shard's others through ZooKeeper.
func (s *Store) execPerShard(ctx context.Context, stmt string) error {
	rows, err := s.conn.Query(ctx, "SELECT shard_num, host_name, port FROM system.clusters WHERE cluster = ? ORDER BY shard_num, replica_num",
		s.cfg.ClickHouseCluster)
	if err != nil {
		return fmt.Errorf("read the shards of %s: %w", s.cfg.ClickHouseCluster, err)
	}
	var shards [][]string
	last := uint32(0)
	for rows.Next() {
		var shard uint32
		var host string
		var port uint16
		if err := rows.Scan(&shard, &host, &port); err != nil {
			rows.Close()
			return fmt.Errorf("read the shards of %s: %w", s.cfg.ClickHouseCluster, err)
		}
		if shard != last || len(shards) == 0 {
			shards, last = append(shards, nil), shard
		}
		shards[len(shards)-1] = append(shards[len(shards)-1], fmt.Sprintf("%s:%d", host, port))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the shards of %s: %w", s.cfg.ClickHouseCluster, err)
	}
	for i, replicas := range shards {
		opts, err := s.cfg.options(s.cfg.Database)
		if err != nil {
			return err
		}
		opts.Addr = replicas
		conn, err := clickhouse.Open(opts)
		if err != nil {
			return fmt.Errorf("open shard %d (%v): %w", i+1, replicas, err)
		}
		err = conn.Exec(ctx, stmt)
		_ = conn.Close()
		if err != nil {
			return fmt.Errorf("shard %d (%v): %w", i+1, replicas, err)
		}
	}
	return nil
}
