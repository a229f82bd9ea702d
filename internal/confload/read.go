package confload

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is returned by a CappedReader (and ReadCapped) past its cap.
var ErrTooLarge = errors.New("input too large")

// CappedReader reads R and fails with ErrTooLarge, naming the input and the cap, once more than Limit bytes came:
// a file given on the command line is read only up to its cap, so a mistaken path (/dev/zero, a log, a disk image)
// fails at once with a clear error instead of reading gigabytes.
type CappedReader struct {
	R     io.Reader
	Name  string // the input as the user named it (its path)
	Limit int64  // the cap in bytes; exactly Limit bytes are read whole
	Flag  string // the flag that raises the cap, "" for none
	n     int64  // bytes read so far
}

// Read reads from R, failing with ErrTooLarge once more than Limit bytes came.
func (c *CappedReader) Read(p []byte) (int, error) {
	if c.n > c.Limit {
		return 0, c.err()
	}
	if rest := c.Limit + 1 - c.n; int64(len(p)) > rest {
		p = p[:rest] // read one byte past the cap at most: enough to know it is exceeded
	}
	n, err := c.R.Read(p)
	c.n += int64(n)
	if c.n > c.Limit {
		return 0, c.err()
	}
	return n, err
}

// Exceeded returns the ErrTooLarge error once more than Limit bytes came, nil before: a parser that stopped at the
// reader's error may have made something of the bytes it got, and the input is still the wrong file.
func (c *CappedReader) Exceeded() error {
	if c.n > c.Limit {
		return c.err()
	}
	return nil
}

func (c *CappedReader) err() error {
	raise := ""
	if c.Flag != "" {
		raise = " (raise it with " + c.Flag + ")"
	}
	return fmt.Errorf("%s is larger than %s, the most this command reads%s: is it the right file? %w", c.Name, sizeText(c.Limit), raise, ErrTooLarge)
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

// ReadCapped reads the whole file at path, failing with ErrTooLarge past limit bytes.
func ReadCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(&CappedReader{R: f, Name: path, Limit: limit})
}
