package collector

import (
	"fmt"
	"sync"
	"time"
)

// sinkHealth is the outcome of the sink's latest acknowledgement: failing from an acknowledgement that carried an
// error (the writer gave up on rows after retrying) until the next one that did not. The zero value is healthy.
type sinkHealth struct {
	mu    sync.Mutex // guards err, since
	err   error
	since time.Time
}

// failed records a failed acknowledgement at now (the reference clock).
func (h *sinkHealth) failed(err error, now time.Time) {
	h.mu.Lock()
	if h.err == nil {
		h.since = now
	}
	h.err = err
	h.mu.Unlock()
}

func (h *sinkHealth) ok() {
	h.mu.Lock()
	h.err = nil
	h.mu.Unlock()
}

func (h *sinkHealth) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return fmt.Errorf("sink failing since %s: %w", h.since.UTC().Format(time.RFC3339), h.err)
}

// SinkHealth returns nil while the sink acknowledges the rows it is given, and an error (the latest one) from an
// acknowledgement that carried one (the writer gave up on rows) until the next successful acknowledgement. It is
// what /readyz reports for the sink: the rows the writer gave up on are being read again from Kafka, not lost.
func (c *Collector) SinkHealth() error { return c.deps.health.check() }
