package store

import "fmt"

// Dialect is the SQL dialect a schema is rendered in. The two dialects differ in storage only (column compression,
// LowCardinality dictionaries, TTL); every table, column name, key and query result is the same on both, so the read
// queries (internal/store/query, the Grafana plugin) never need to know which one a database uses.
type Dialect string

const (
	// DialectLegacy is the common subset that ClickHouse 18.16 (Debian's package, tested here) understands: no TTL,
	// DateTime64, Map, Bool, CODEC, SimpleAggregateFunction, and plain String instead of LowCardinality(String).
	// Retention is Store.DropExpired dropping whole daily partitions.
	DialectLegacy Dialect = "legacy"
	// DialectModern is for ClickHouse >= 23: LowCardinality(String) for the dimension columns, CODEC(Delta, ZSTD) on
	// monotonic timestamp and offset columns, and a TTL with ttl_only_drop_parts that expires whole daily parts.
	DialectModern Dialect = "modern"
)

// ModernMajor is the first ClickHouse major version served the modern dialect. 23.x is the oldest release users run
// (see INFRA.md) and has every feature the modern dialect uses.
const ModernMajor = 23

// DialectFor returns the dialect for a ClickHouse server of the given major version.
func DialectFor(major uint64) Dialect {
	if major >= ModernMajor {
		return DialectModern
	}
	return DialectLegacy
}

// ParseDialect parses "legacy", "modern" or "auto" ("" is auto). Auto returns "" so the caller detects it.
func ParseDialect(s string) (Dialect, error) {
	switch s {
	case "", "auto":
		return "", nil
	case string(DialectLegacy):
		return DialectLegacy, nil
	case string(DialectModern):
		return DialectModern, nil
	}
	return "", fmt.Errorf("dialect %q: want one of auto, legacy, modern", s)
}
