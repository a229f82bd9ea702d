package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Input size caps: a file given on the command line is read only up to its cap, so a mistaken path (/dev/zero, a
// log, a disk image) fails at once with a clear error instead of reading gigabytes.
const (
	// maxConfigBytes caps --config: a Tidemark configuration is a few kilobytes.
	maxConfigBytes = 1 << 20
	// defaultMaxTimelineBytes is lag eval's default --max-size: a day of polls of a large cluster is far below it.
	defaultMaxTimelineBytes = 256 << 20
)

// errTooLarge is returned by a cappedReader past its cap.
var errTooLarge = errors.New("input too large")

// cappedReader reads r and fails with errTooLarge (naming the input and the cap) once more than limit bytes came.
type cappedReader struct {
	r     io.Reader
	name  string
	limit int64
	flag  string // the flag that raises the cap, if any
	n     int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.n > c.limit {
		return 0, c.err()
	}
	if rest := c.limit + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest] // read one byte past the cap at most: enough to know it is exceeded
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return 0, c.err()
	}
	return n, err
}

func (c *cappedReader) err() error {
	raise := ""
	if c.flag != "" {
		raise = " (raise it with " + c.flag + ")"
	}
	return fmt.Errorf("%s is larger than %s, the most this command reads%s: is it the right file? %w", c.name, sizeText(c.limit), raise, errTooLarge)
}

// sizeText renders a byte count in the largest whole binary unit.
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// readCapped reads the whole file at path, failing past limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(&cappedReader{r: f, name: path, limit: limit})
}
