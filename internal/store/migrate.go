package store

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
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
// Errors: ErrSchemaNewer when the database is ahead of this build; ErrChecksumMismatch when an applied migration
// differs from the embedded one; otherwise the failing statement's error.
func (s *Store) Migrate(ctx context.Context) (MigrateResult, error) {
	var res MigrateResult
	major, err := s.createDatabase(ctx, &res)
	if err != nil {
		return res, err
	}
	if err := s.conn.Exec(ctx, schemaMigrationsDDL); err != nil {
		return res, fmt.Errorf("create %s: %w", TableSchemaMigrations, err)
	}
	var applied []appliedMigration
	if err := s.conn.Select(ctx, &applied,
		"SELECT version, name, dialect, checksum FROM "+TableSchemaMigrations+" ORDER BY version"); err != nil {
		return res, fmt.Errorf("read %s: %w", TableSchemaMigrations, err)
	}

	res.Dialect, err = s.dialect(applied, major)
	if err != nil {
		return res, err
	}
	ms, err := Migrations(s.schemaParams(res.Dialect))
	if err != nil {
		return res, err
	}
	done := map[int]bool{}
	for _, a := range applied {
		v := int(a.Version)
		done[v] = true
		res.From = max(res.From, v)
		if v > len(ms) {
			continue
		}
		if m := ms[v-1]; a.Checksum != m.Checksum {
			return res, fmt.Errorf("migration %s recorded checksum %.12s, embedded %.12s: %w",
				m.Name, a.Checksum, m.Checksum, ErrChecksumMismatch)
		}
	}
	if res.From > CurrentSchemaVersion {
		return res, fmt.Errorf("database %s at schema version %d, this build knows up to %d: %w",
			s.cfg.Database, res.From, CurrentSchemaVersion, ErrSchemaNewer)
	}
	for _, m := range ms {
		if done[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if err := s.conn.Exec(ctx, stmt); err != nil {
				return res, fmt.Errorf("apply migration %s statement %d: %w", m.Name, i+1, err)
			}
		}
		if err := s.recordMigration(ctx, m, res.Dialect); err != nil {
			return res, err
		}
		res.Applied = append(res.Applied, m.Name)
	}
	res.To = CurrentSchemaVersion
	for _, stmt := range retentionStatements(s.schemaParams(res.Dialect)) {
		// Metadata only: parts already written are not rewritten (they expire as whole parts anyway).
		ctx := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"materialize_ttl_after_modify": 0}))
		if err := s.conn.Exec(ctx, stmt); err != nil {
			return res, fmt.Errorf("set retention: %w", err)
		}
	}
	return res, nil
}

func (s *Store) schemaParams(d Dialect) SchemaParams {
	return SchemaParams{Dialect: d, RetentionDays: s.cfg.RetentionDays, RollupRetentionDays: s.cfg.RollupRetentionDays}
}

// dialect returns the database's recorded dialect, or for a fresh database the configured or detected one.
func (s *Store) dialect(applied []appliedMigration, major uint64) (Dialect, error) {
	if len(applied) > 0 {
		d, err := ParseDialect(applied[0].Dialect)
		if err != nil || d == "" {
			return "", fmt.Errorf("%s records dialect %q: want legacy or modern", TableSchemaMigrations, applied[0].Dialect)
		}
		return d, nil
	}
	d, err := ParseDialect(s.cfg.Dialect)
	if err != nil {
		return "", err
	}
	if d == "" {
		d = DialectFor(major)
	}
	return d, nil
}

// createDatabase creates the configured database through a connection to the user's default database (a connection
// naming a missing database is refused at the handshake), and records the server version in res.
func (s *Store) createDatabase(ctx context.Context, res *MigrateResult) (major uint64, err error) {
	admin, err := clickhouse.Open(s.cfg.options(""))
	if err != nil {
		return 0, fmt.Errorf("open clickhouse %v: %w", s.cfg.Addr, err)
	}
	defer admin.Close()
	if err := admin.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+s.cfg.Database); err != nil {
		return 0, fmt.Errorf("create database %s: %w", s.cfg.Database, err)
	}
	v, err := admin.ServerVersion()
	if err != nil {
		return 0, fmt.Errorf("server version of %v: %w", s.cfg.Addr, err)
	}
	res.Server = fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	return v.Version.Major, nil
}

func (s *Store) recordMigration(ctx context.Context, m Migration, d Dialect) error {
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
