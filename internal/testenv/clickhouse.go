package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouseAddr returns host:port of the local ClickHouse server's native protocol (TIDEMARK_CLICKHOUSE_ADDR). It
// skips the test, or fails it under CI=true, when it is not set.
func ClickHouseAddr(t testing.TB) string {
	t.Helper()
	return require(t, "TIDEMARK_CLICKHOUSE_ADDR", "ClickHouse")
}

// ClickHouseOptions returns clickhouse-go options for the local server and the given database, with every query bounded
// by max_execution_time (cancelling a context does not stop a query on the server).
func ClickHouseOptions(t testing.TB, database string) *clickhouse.Options {
	t.Helper()
	return &clickhouse.Options{
		Addr:        []string{ClickHouseAddr(t)},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
		Settings:    clickhouse.Settings{"max_execution_time": 60},
	}
}

// ClickHouseDB creates a database unique to the test, returns its name and a connection to it, and drops the
// database at the end of the test.
func ClickHouseDB(t testing.TB) (string, driver.Conn) {
	t.Helper()
	admin, err := clickhouse.Open(ClickHouseOptions(t, "default"))
	if err != nil {
		t.Fatalf("open clickhouse %s: %v", ClickHouseAddr(t), err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := Name(t, "tm")
	if err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatalf("create database %s: %v", db, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	})
	conn, err := clickhouse.Open(ClickHouseOptions(t, db))
	if err != nil {
		t.Fatalf("open clickhouse database %s: %v", db, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return db, conn
}
