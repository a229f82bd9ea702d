package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/tidemark/tidemark/internal/secret"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

// Config configures the ClickHouse connection, the schema and the batched writer. Zero values are filled by
// SetDefaults; Validate reports the first bad field by its YAML key.
type Config struct {
	// Cluster is the Kafka cluster name Migrate gives the rows stored before migration 0006 added the cluster column
	// (SchemaParams.Cluster); set by the caller from its cluster configuration, not a key of the clickhouse block.
	Cluster string `yaml:"-"`
	// Addr is host:port of ClickHouse's native protocol (HTTP is not supported: clickhouse-go's HTTP transport cannot
	// talk to 18.16). Several addresses may be given for failover.
	Addr []string `yaml:"addr"`
	// Database holds Tidemark's tables; `tidemark migrate` creates it when missing. Default "tidemark".
	Database string `yaml:"database"`
	// User and Password (or PasswordFile, read at every connect) authenticate; the default user is "default" with
	// an empty password. Never both Password and PasswordFile.
	User         string        `yaml:"user"`
	Password     secret.String `yaml:"password"`
	PasswordFile string        `yaml:"password_file"`
	// TLS encrypts the native protocol (the server's secure port, usually 9440): CA bundle, client certificate,
	// server name, minimum version; certificate files are re-read when they rotate (internal/tlsconf).
	TLS tlsconf.Config `yaml:"tls"`
	// Dialect forces "legacy" or "modern" DDL; "auto" (default) picks by server version (see DialectFor). Only a fresh
	// database is affected: an existing one keeps the dialect it was created with.
	Dialect string `yaml:"dialect"`
	// ClickHouseCluster (clickhouse.cluster) names a cluster of the servers' remote_servers config (not a Kafka
	// cluster): the schema is then created ON CLUSTER with Replicated* local tables (<table>_local) and Distributed
	// tables under the usual names in front of them, for reads and writes (docs/schema.md, "ClickHouse cluster"). The servers need ZooKeeper (or Keeper), the macros
	// {shard} and {replica}, and distributed DDL. Inserts are synchronous (insert_distributed_sync): an
	// acknowledged batch is on one replica of every shard it touches. "" (default): a single server. Only a fresh
	// database may be given a mode: Migrate refuses to change an existing database's.
	ClickHouseCluster string `yaml:"cluster"`
	// DialTimeout bounds connecting. Default 5 s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MaxExecutionTime is sent as max_execution_time with every query: cancelling a context does not stop a query on
	// the server, this does. Default 60 s; whole seconds.
	MaxExecutionTime time.Duration `yaml:"max_execution_time"`
	// RetentionDays keeps raw rows (latency, probe, lag, clock offsets) this many days. Default 14.
	RetentionDays int `yaml:"retention_days"`
	// RollupRetentionDays keeps the rollups (latency_1m and latency_1h) this many days. Default 90.
	RollupRetentionDays int `yaml:"rollup_retention_days"`

	// Writer configures the batched writer.
	Writer WriterConfig `yaml:"writer"`
}

// WriterConfig bounds the batched writer's memory and sets its flush and retry policy.
type WriterConfig struct {
	// BatchRows flushes when this many rows are buffered. Default 50000.
	BatchRows int `yaml:"batch_rows"`
	// FlushInterval flushes a non-empty buffer at least this often. Default 1 s.
	FlushInterval time.Duration `yaml:"flush_interval"`
	// MaxRows bounds rows held (buffered plus the batch being inserted); Write blocks when it would exceed it.
	// Default 4 × BatchRows.
	MaxRows int `yaml:"max_rows"`
	// MaxBytes bounds the estimated bytes held, like MaxRows. Default DefaultWriterMaxBytes (64 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// DedupWindow is how many recent row keys the writer remembers to drop re-delivered rows before they reach
	// ClickHouse (and so the rollups). 0 means the default 262144; negative disables.
	DedupWindow int `yaml:"dedup_window"`
	// RetryInitial and RetryMax are the first and the largest pause between insert attempts (exponential backoff
	// with jitter). Defaults 100 ms and 10 s.
	RetryInitial time.Duration `yaml:"retry_initial"`
	RetryMax     time.Duration `yaml:"retry_max"`
	// RetryMaxElapsed gives up on a batch after retrying this long; 0 (default) retries until the writer is closed,
	// which is what at-least-once delivery wants: consumption pauses through backpressure meanwhile.
	RetryMaxElapsed time.Duration `yaml:"retry_max_elapsed"`
	// InsertTimeout bounds one insert attempt. Default 60 s.
	InsertTimeout time.Duration `yaml:"insert_timeout"`
	// StallTimeout: when rows have waited this long and ClickHouse acknowledged nothing meanwhile (down, frozen, or
	// every insert timing out), the writer reports itself stalled (Writer.Stalled), which `tidemark run` turns into a
	// 503 on /readyz. Default 30 s; keep it above the time a normal batch insert takes.
	StallTimeout time.Duration `yaml:"stall_timeout"`
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if len(c.Addr) == 0 {
		c.Addr = []string{"127.0.0.1:9000"}
	}
	if c.Database == "" {
		c.Database = "tidemark"
	}
	if c.User == "" {
		c.User = "default"
	}
	if c.Dialect == "" {
		c.Dialect = "auto"
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.MaxExecutionTime == 0 {
		c.MaxExecutionTime = 60 * time.Second
	}
	if c.RetentionDays == 0 {
		c.RetentionDays = 14
	}
	if c.RollupRetentionDays == 0 {
		c.RollupRetentionDays = 90
	}
	c.Writer.SetDefaults()
}

// Defaults of WriterConfig.BatchRows and MaxBytes.
const (
	DefaultWriterBatchRows = 50000
	DefaultWriterMaxBytes  = 64 << 20
)

// SetDefaults fills zero fields with their defaults.
func (c *WriterConfig) SetDefaults() {
	if c.BatchRows == 0 {
		c.BatchRows = DefaultWriterBatchRows
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = time.Second
	}
	if c.MaxRows == 0 {
		c.MaxRows = 4 * c.BatchRows
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultWriterMaxBytes
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = 1 << 18
	}
	if c.RetryInitial == 0 {
		c.RetryInitial = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Second
	}
	if c.InsertTimeout == 0 {
		c.InsertTimeout = 60 * time.Second
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = 30 * time.Second
	}
}

// Validate reports every invalid field, each named by its YAML key (joined errors).
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Addr) == 0 {
		bad("addr: at least one host:port is required")
	}
	for _, a := range c.Addr {
		if a == "" {
			bad("addr: empty address")
		}
	}
	if !ValidIdentifier(c.Database) {
		bad("database %q: want letters, digits and '_', not starting with a digit", c.Database)
	}
	if c.ClickHouseCluster != "" && !ValidIdentifier(c.ClickHouseCluster) {
		bad("cluster %q: want letters, digits and '_', not starting with a digit", c.ClickHouseCluster)
	}
	if c.Password != "" && c.PasswordFile != "" {
		return errors.New("password / password_file: set the value or the file, not both")
	}
	if err := c.TLS.Validate("tls"); err != nil {
		return err
	}
	if _, err := ParseDialect(c.Dialect); err != nil {
		errs = append(errs, err)
	}
	if c.DialTimeout < 0 {
		bad("dial_timeout %s: must be positive", c.DialTimeout)
	}
	if c.MaxExecutionTime < time.Second {
		bad("max_execution_time %s: must be at least 1s", c.MaxExecutionTime)
	}
	if c.RetentionDays < 1 {
		bad("retention_days %d: must be at least 1", c.RetentionDays)
	}
	if c.RollupRetentionDays < 1 {
		bad("rollup_retention_days %d: must be at least 1", c.RollupRetentionDays)
	}
	if err := c.Writer.Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, fmt.Errorf("writer.%w", e))
		}
	}
	return errors.Join(errs...)
}

// Validate reports every invalid field, each named by its YAML key (joined errors).
func (c *WriterConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.BatchRows < 1 {
		bad("batch_rows %d: must be at least 1", c.BatchRows)
	}
	if c.FlushInterval <= 0 {
		bad("flush_interval %s: must be positive", c.FlushInterval)
	}
	if c.MaxRows < c.BatchRows {
		bad("max_rows %d: must be at least batch_rows (%d)", c.MaxRows, c.BatchRows)
	}
	if c.MaxBytes < 1<<20 {
		bad("max_bytes %d: must be at least 1 MiB", c.MaxBytes)
	}
	if c.RetryInitial <= 0 || c.RetryMax < c.RetryInitial {
		bad("retry_initial %s / retry_max %s: want 0 < retry_initial <= retry_max", c.RetryInitial, c.RetryMax)
	}
	if c.RetryMaxElapsed < 0 {
		bad("retry_max_elapsed %s: must not be negative", c.RetryMaxElapsed)
	}
	if c.InsertTimeout <= 0 {
		bad("insert_timeout %s: must be positive", c.InsertTimeout)
	}
	if c.StallTimeout < time.Second {
		bad("stall_timeout %s: must be at least 1s", c.StallTimeout)
	}
	return errors.Join(errs...)
}

// unjoin returns the errors joined in err (err itself when it is not a join).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// ValidIdentifier reports whether s can be used unquoted as a ClickHouse database name: 1 to 200 characters of
// [A-Za-z0-9_], not starting with a digit. Tidemark splices database names into DDL, so it accepts no other.
func ValidIdentifier(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Dialer returns the connection dialer for clickhouse-go's Options.DialContext: TLS through tlsconf (certificates
// re-read when they rotate), nil when TLS is off (clickhouse-go's own plain TCP dial).
func (c *Config) Dialer() (func(ctx context.Context, addr string) (net.Conn, error), error) {
	d, err := c.TLS.NewDialer()
	if err != nil || d == nil {
		return nil, err
	}
	d.Timeout = c.DialTimeout
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }, nil
}

// ResolvePassword returns the password, read from PasswordFile when that is set.
func (c *Config) ResolvePassword() (secret.String, error) {
	return secret.Resolve("password", c.Password, c.PasswordFile)
}
