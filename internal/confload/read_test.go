package confload

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadCapped: a file of exactly the cap is read whole; one byte more fails with ErrTooLarge, the file and the
// cap named, and the flag that raises it when there is one.
func TestReadCapped(t *testing.T) {
	p := filepath.Join(t.TempDir(), "exact")
	if err := os.WriteFile(p, []byte(strings.Repeat("x", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadCapped(p, 100); err != nil || len(b) != 100 {
		t.Fatalf("a file of exactly the cap: %d bytes, %v", len(b), err)
	}
	_, err := ReadCapped(p, 99)
	if !errors.Is(err, ErrTooLarge) || err.Error() != p+" is larger than 99 bytes, the most this command reads: is it the right file? input too large" {
		t.Fatalf("a byte over the cap: %v", err)
	}
	f, err := os.Open("/dev/zero")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	r := &CappedReader{R: f, Name: "/dev/zero", Limit: 4 << 10, Flag: "--max-size"}
	if _, err := r.Read(make([]byte, 1<<20)); err == nil || r.Exceeded() == nil {
		t.Fatalf("read past the cap: %v, exceeded %v", err, r.Exceeded())
	}
	if want := "/dev/zero is larger than 4 KiB, the most this command reads (raise it with --max-size)"; !strings.Contains(r.Exceeded().Error(), want) {
		t.Fatalf("got %v, want %q", r.Exceeded(), want)
	}
}
