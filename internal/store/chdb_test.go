package store

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestModernDDLInChDB executes the modern-dialect golden DDL (which TestSchemaGolden pins to what Migrate renders)
// in chDB, an in-process current ClickHouse engine: no server of that version runs here, and clickhouse-go cannot
// reach chDB, so chdbtest/run.mjs does it through chDB's Node binding. Under CI=true missing node or node_modules
// (the Makefile installs them: make node-deps) fails the test instead of skipping it.
func TestModernDDLInChDB(t *testing.T) {
	dir := "chdbtest"
	testenv.ChDB(t, dir)
	ms, err := Migrations(goldenParams(DialectModern))
	if err != nil {
		t.Fatal(err)
	}
	stmts := 1 + len(retentionStatements(goldenParams(DialectModern))) // schema_migrations + TTL updates
	for _, m := range ms {
		stmts += len(m.Statements)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "run.mjs", filepath.Join("..", "testdata", "golden", "modern.sql"))
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chdb rejected the modern DDL: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if want := fmt.Sprintf("ok %d statements, engine ", stmts); !strings.HasPrefix(last, want) {
		t.Fatalf("run.mjs said %q, want it to start with %q (statement splitting differs from SplitStatements?)", last, want)
	}
	t.Log(last)
}
