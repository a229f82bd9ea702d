package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouse server error codes the store branches on.
const (
	codeUnknownTable    = 60
	codeUnknownDatabase = 81
)

// Store is a connection to Tidemark's ClickHouse database. It is safe for concurrent use.
type Store struct {
	cfg  Config
	conn driver.Conn
	now  func() time.Time
}

// Open connects to ClickHouse with cfg (defaults filled, then validated) and checks the server answers. A database
// that does not exist yet is not an error: Migrate creates it. Close releases the connections.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("store config: %w", err)
	}
	opts, err := cfg.options(cfg.Database)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %v: %w", cfg.Addr, err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open clickhouse %v: %w", cfg.Addr, err)
	}
	s := &Store{cfg: cfg, conn: conn, now: time.Now}
	if err := conn.Ping(ctx); err != nil && !isCode(err, codeUnknownDatabase) {
		_ = conn.Close()
		return nil, fmt.Errorf("ping clickhouse %v: %w", cfg.Addr, err)
	}
	return s, nil
}

// options returns clickhouse-go options for database ("" means the user's default database), reading the password
// and certificate files. Every query carries max_execution_time: cancelling a context does not stop a query on the
// server.
func (c *Config) options(database string) (*clickhouse.Options, error) {
	pw, err := c.ResolvePassword()
	if err != nil {
		return nil, err
	}
	dial, err := c.Dialer()
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	if dial == nil {
		d := &net.Dialer{Timeout: c.DialTimeout}
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	dial = writeDeadlines(dial, c.Writer.InsertTimeout)
	settings := clickhouse.Settings{"max_execution_time": int(c.MaxExecutionTime / time.Second)}
	if c.ClickHouseCluster != "" {
		// A Distributed insert returns once every shard's replica has the rows (not when the initiator queued
		// them on its disk): the writer's acknowledgement, and so the Kafka commit, then means stored.
		settings["insert_distributed_sync"] = 1
		// distributed_ddl_task_timeout (how long ON CLUSTER DDL waits for every server) is left to the server's
		// profile (default 180 s): it is an Int64 setting, which 18.16 reads zigzag-decoded from clickhouse-go's
		// unsigned varint (60 arrives as 30, 45 as -23; measured).
	}
	return &clickhouse.Options{
		Addr:             c.Addr,
		Auth:             clickhouse.Auth{Database: database, Username: c.User, Password: pw.Reveal()},
		DialContext:      dial,
		DialTimeout:      c.DialTimeout,
		Compression:      &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
		Settings:         settings,
		ConnMaxLifetime:  time.Hour,
		MaxOpenConns:     8,
		MaxIdleConns:     4,
		ConnOpenStrategy: clickhouse.ConnOpenInOrder,
	}, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.conn.Close() }

// Conn returns the underlying connection, for the read queries in internal/store/query.
func (s *Store) Conn() driver.Conn { return s.conn }

// Config returns the store's configuration with defaults filled.
func (s *Store) Config() Config { return s.cfg }

// ServerVersion returns the server's version, e.g. 18.16.1.
func (s *Store) ServerVersion() (major, minor, patch uint64, err error) {
	v, err := s.conn.ServerVersion()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("server version of %v: %w", s.cfg.Addr, err)
	}
	return v.Version.Major, v.Version.Minor, v.Version.Patch, nil
}

// SchemaVersion returns the database's schema version (0 when it has no Tidemark schema). See ReadSchemaVersion.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return ReadSchemaVersion(ctx, s.conn)
}

// CheckSchema returns nil when the database's schema version is CurrentSchemaVersion, else ErrSchemaMissing,
// ErrSchemaOutdated or ErrSchemaNewer (wrapped with both versions), or the error reading it.
func (s *Store) CheckSchema(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	return CheckSchemaVersion(v)
}

// ReadSchemaVersion returns max(version) from schema_migrations on conn's database, 0 when the database or the table
// does not exist. Use it where a connection is not a Store (the Grafana plugin's health check).
func ReadSchemaVersion(ctx context.Context, conn driver.Conn) (int, error) {
	var v uint32
	err := conn.QueryRow(ctx, "SELECT toUInt32(max(version)) FROM "+TableSchemaMigrations).Scan(&v)
	if isCode(err, codeUnknownTable) || isCode(err, codeUnknownDatabase) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return int(v), nil
}

// CheckSchemaVersion compares a database's schema version with CurrentSchemaVersion: nil when equal, else
// ErrSchemaMissing (0), ErrSchemaOutdated or ErrSchemaNewer, wrapped with both versions.
func CheckSchemaVersion(v int) error {
	switch {
	case v == 0:
		return ErrSchemaMissing
	case v < CurrentSchemaVersion:
		return fmt.Errorf("schema version %d, this build needs %d: %w", v, CurrentSchemaVersion, ErrSchemaOutdated)
	case v > CurrentSchemaVersion:
		return fmt.Errorf("schema version %d, this build knows up to %d: %w", v, CurrentSchemaVersion, ErrSchemaNewer)
	}
	return nil
}

// isCode reports whether err is a ClickHouse server exception with the given code.
func isCode(err error, code int32) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && ex.Code == code
}
