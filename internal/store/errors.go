package store

import "errors"

var (
	// ErrSchemaMissing means the database has no Tidemark schema (no schema_migrations table or no database):
	// run `tidemark migrate`.
	ErrSchemaMissing = errors.New("tidemark schema missing: run `tidemark migrate`")
	// ErrSchemaOutdated means the database was migrated by an older Tidemark (its version is below
	// CurrentSchemaVersion): run `tidemark migrate`.
	ErrSchemaOutdated = errors.New("tidemark schema is older than this build: run `tidemark migrate`")
	// ErrSchemaNewer means the database was migrated by a newer Tidemark than this build; this build must not write
	// to it. Upgrade Tidemark.
	ErrSchemaNewer = errors.New("tidemark schema is newer than this build: upgrade tidemark")
	// ErrChecksumMismatch means an applied migration's recorded checksum differs from the embedded one rendered for
	// the database's dialect: a migration file was edited after release, or the database was migrated by hand.
	ErrChecksumMismatch = errors.New("applied migration differs from the embedded one")
	// ErrMigrationTable means schema_migrations holds rows this build cannot read (a version 0, an unknown or
	// mixed dialect): written by hand or by something other than Tidemark. Migrate refuses to touch such a database;
	// the error names the offending row.
	ErrMigrationTable = errors.New("schema_migrations holds rows tidemark did not write")
	// ErrWriterClosed is returned by Writer.Write after Close began.
	ErrWriterClosed = errors.New("store writer closed")
)

// ErrWriterStalled is wrapped by Writer.Stalled's error: rows wait and ClickHouse has acknowledged nothing for
// WriterConfig.StallTimeout.
var ErrWriterStalled = errors.New("store writer stalled")

// ErrNoCluster means Config.ClickHouseCluster names a cluster the server's remote_servers does not define.
var ErrNoCluster = errors.New("clickhouse cluster not defined on the server")

// ErrClusterMode means the database was migrated for a single server and Config.ClickHouseCluster is set, or the other way
// round (docs/schema.md says how to move a single-server database onto a cluster).
var ErrClusterMode = errors.New("database migrated in the other clickhouse.cluster mode")
