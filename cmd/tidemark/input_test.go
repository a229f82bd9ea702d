package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInputCaps: --config and lag eval read files up to a cap and fail past it with the file and the cap named, so a
// mistaken /dev/zero fails at once (it read 2.1 GB before failing); a file of exactly the cap is read whole.
func TestInputCaps(t *testing.T) {
	if _, err := loadConfig("/dev/zero", nil, noEnv); !errors.Is(err, errTooLarge) ||
		!strings.Contains(err.Error(), "/dev/zero is larger than 1 MiB") {
		t.Fatalf("--config /dev/zero: %v", err)
	}
	if _, err := runLag(t, "eval", "--max-size", "4096", "/dev/zero"); !errors.Is(err, errTooLarge) ||
		!strings.Contains(err.Error(), "/dev/zero is larger than 4 KiB, the most this command reads (raise it with --max-size)") {
		t.Fatalf("lag eval /dev/zero: %v", err)
	}
	p := filepath.Join(t.TempDir(), "exact")
	if err := os.WriteFile(p, []byte(strings.Repeat("x", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := readCapped(p, 100); err != nil || len(b) != 100 {
		t.Fatalf("a file of exactly the cap: %d bytes, %v", len(b), err)
	}
	if _, err := readCapped(p, 99); !errors.Is(err, errTooLarge) {
		t.Fatalf("a byte over the cap: %v", err)
	}
}

// TestConfigDecodeErrorsInUserTerms: unknown keys and values of the wrong type are all reported, each key once on a
// line of its own, by its configuration key and in words (they read "'main.runConfig' has invalid keys: foo" and
// Go types).
func TestConfigDecodeErrorsInUserTerms(t *testing.T) {
	_, err := loadConfig(writeConfig(t, `kafka: {brokers: [a:1]}
foo: 1
collector:
  max_batch: abc
  bogus: 2
  drain_timeout: xyz
  receipts: {enabled: maybe, partitions: [1]}
  probe: 3
lag: {status: {window: x}}
`), nil, noEnv)
	want := `config: collector.bogus: unknown key (a typo, or an option of another version?)
collector.drain_timeout: want a duration like 500ms, 30s or 1m30s, got "xyz"
collector.max_batch: want a whole number, got "abc"
collector.probe: want a block of keys, got 3
collector.receipts.enabled: want true or false, got "maybe"
collector.receipts.partitions: want a whole number, got a list
foo: unknown key (a typo, or an option of another version?)
lag.status.window: want a whole number, got "x"`
	if err == nil || err.Error() != want {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
}
