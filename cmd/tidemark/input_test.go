package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/confload"
)

// TestInputCaps: --config and lag eval read files up to a cap and fail past it with the file and the cap named, so a
// mistaken /dev/zero fails at once (it read 2.1 GB before failing). confload's tests pin the cap's edge.
func TestInputCaps(t *testing.T) {
	if _, err := loadConfig("/dev/zero", nil, noEnv); !errors.Is(err, confload.ErrTooLarge) ||
		!strings.Contains(err.Error(), "/dev/zero is larger than 1 MiB") {
		t.Fatalf("--config /dev/zero: %v", err)
	}
	if _, err := runLag(t, "eval", "--max-size", "4096", "/dev/zero"); !errors.Is(err, confload.ErrTooLarge) ||
		!strings.Contains(err.Error(), "/dev/zero is larger than 4 KiB, the most this command reads (raise it with --max-size)") {
		t.Fatalf("lag eval /dev/zero: %v", err)
	}
}
