package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
)

func runMigrate(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newMigrateCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestMigrateCommand runs `tidemark migrate` against the real ClickHouse: check on an empty database fails, migrate
// applies, a second migrate applies nothing, and check then passes.
func TestMigrateCommand(t *testing.T) {
	db, _ := testenv.ClickHouseDB(t)
	addr := []string{"--clickhouse-addr", testenv.ClickHouseAddr(t), "--database", db}
	if _, err := runMigrate(t, append(addr, "--check")...); err == nil || !strings.Contains(err.Error(), "schema missing") {
		t.Fatalf("--check on an empty database: %v, want a schema-missing error", err)
	}
	out, err := runMigrate(t, addr...)
	if err != nil {
		t.Fatal(err)
	}
	cur := store.CurrentSchemaVersion
	if !strings.Contains(out, fmt.Sprintf("(dialect legacy): schema version 0 -> %d, applied 0001_init, 0002_latency_1h, 0003_lag_group_types, 0004_redelivery_uncertainty, 0005_probe_instance, 0006_cluster, 0007_receipt_source, 0008_stage_bounds", cur)) {
		t.Errorf("first migrate said %q", out)
	}
	out, err = runMigrate(t, append(addr, "--drop-expired")...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("schema version %d -> %d, nothing to apply", cur, cur)) {
		t.Errorf("second migrate said %q", out)
	}
	out, err = runMigrate(t, append(addr, "--check")...)
	if err != nil || !strings.Contains(out, fmt.Sprintf("schema version %d, current", cur)) {
		t.Errorf("--check after migrate: %q, %v", out, err)
	}
	if _, err := runMigrate(t, append(addr, "--dialect", "newest")...); err == nil || !strings.Contains(err.Error(), "auto, legacy, modern") {
		t.Errorf("bad --dialect: %v, want the valid values listed", err)
	}
}
