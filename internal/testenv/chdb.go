package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// ChDB checks that the in-process current ClickHouse engine (npm package chdb, installed into dir/node_modules by
// `make node-deps`) and node are available, so a test can run dir/run.mjs. It skips the test, or fails it under
// CI=true, naming what is missing.
func ChDB(t testing.TB, dir string) {
	t.Helper()
	missing := func(what string) {
		t.Helper()
		msg := what + ": run `make node-deps` (make test does)"
		if InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node not found")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "chdb", "package.json")); err != nil {
		missing("chdb is not installed")
	}
}
