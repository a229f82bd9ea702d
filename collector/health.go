package collector

import (
	"fmt"
	"sync"
	"time"
)

// health is the outcome of the latest attempt at something that is retried: failing from an attempt that returned
// an error until the next one that did not. For the sink an attempt is an acknowledgement (an error: the writer gave
// up on rows after retrying). The zero value is healthy.
type health struct {
	mu    sync.Mutex // guards err, since
	err   error
	since time.Time
}

// failed records a failed acknowledgement at now (the reference clock).
func (h *health) failed(err error, now time.Time) {
	h.mu.Lock()
	if h.err == nil {
		h.since = now
	}
	h.err = err
	h.mu.Unlock()
}

func (h *health) ok() {
	h.mu.Lock()
	h.err = nil
	h.mu.Unlock()
}

func (h *health) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return nil
	}
	return fmt.Errorf("failing since %s: %w", h.since.UTC().Format(time.RFC3339), h.err)
}

// SinkHealth returns nil while the sink acknowledges the rows it is given; else an error: the latest one from an
// acknowledgement that carried one (the writer gave up on rows) until the next successful acknowledgement, or the
// sink's own report that rows wait and nothing was acknowledged for its stall timeout (FlushingSink.Stalled: a dead
// or frozen ClickHouse under a retry-forever policy gives nothing up). It is what /readyz reports for the sink; the
// rows the writer gave up on are being read again from Kafka, and waiting rows stay held or in Kafka: nothing is lost.
func (c *Collector) SinkHealth() error {
	if err := c.deps.health.check(); err != nil {
		return fmt.Errorf("sink %w", err)
	}
	if err := c.opts.Sink.Stalled(); err != nil {
		return fmt.Errorf("sink stalled: %w", err)
	}
	return nil
}
