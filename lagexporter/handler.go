package lagexporter

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// Handler serves the Collector's series over HTTP in the Prometheus text format, rendered once per snapshot: for a
// snapshot of 100,000 group-partitions, building ~400,000 constant metrics through a registry on every scrape takes
// seconds, while writing pre-rendered bytes takes milliseconds. The series are exactly Collect's (the same emit
// function produces both; a test parses the rendering and compares it with Collect). Extra, when not nil, is gathered
// on every scrape and appended (the process's other metrics); it must not contain the Collector itself.
//
// Memory: one rendering (per-family buffers, reused across snapshots) plus its gzip form.
type Handler struct {
	c     *Collector
	extra prometheus.Gatherer

	mu    sync.Mutex // guards the fields below; held while rendering and writing, so concurrent scrapes render once
	key   renderKey
	valid bool
	bufs  [][]byte // per family: HELP and TYPE lines, then its series
	gzipd []byte   // gzip of the concatenated bufs, built on the first gzip scrape of a rendering
}

type renderKey struct {
	seq    uint64
	cycles uint64
}

// NewHandler returns a handler for c's series plus extra's.
func NewHandler(c *Collector, extra prometheus.Gatherer) *Handler {
	return &Handler{c: c, extra: extra, bufs: make([][]byte, len(c.families))}
}

// ServeHTTP writes the exposition; it never calls Kafka.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	gz := strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	var extra bytes.Buffer
	if h.extra != nil {
		mfs, err := h.extra.Gather()
		if err != nil {
			http.Error(w, "gather: "+err.Error(), http.StatusInternalServerError)
			return
		}
		for _, mf := range mfs {
			_, _ = expfmt.MetricFamilyToText(&extra, mf)
		}
	}
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	if gz {
		w.Header().Set("Content-Encoding", "gzip")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.render()
	if gz {
		h.compress()
		_, _ = w.Write(h.gzipd)
		if extra.Len() > 0 { // a second gzip member; readers decode the concatenation (RFC 1952 2.2)
			zw := gzip.NewWriter(w)
			_, _ = zw.Write(extra.Bytes())
			_ = zw.Close()
		}
		return
	}
	for _, b := range h.bufs {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
	_, _ = w.Write(extra.Bytes())
}

// render re-renders h.bufs if the snapshot or health changed since the last rendering. h.mu must be held.
func (h *Handler) render() {
	s, hl := h.c.src.Latest(), h.c.src.Health()
	k := renderKey{cycles: hl.Cycles}
	if s != nil {
		k.seq = s.Seq
	}
	if h.valid && k == h.key {
		return
	}
	h.c.renderFamilies(h.bufs, s, hl)
	h.key, h.valid, h.gzipd = k, true, nil
}

// compress builds the gzip form of the current rendering if missing. h.mu must be held.
func (h *Handler) compress() {
	if h.gzipd != nil {
		return
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	for _, b := range h.bufs {
		_, _ = zw.Write(b)
	}
	_ = zw.Close()
	h.gzipd = buf.Bytes()
}

// Refresh renders (and gzips) the latest snapshot now, so that the next scrape only copies bytes. Follow calls it for
// every new snapshot.
func (h *Handler) Refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.render()
	h.compress()
}

// Follow refreshes the rendering for every snapshot received on snaps (e.g. from Loop.Subscribe) until ctx is done or
// snaps is closed.
func (h *Handler) Follow(ctx context.Context, snaps <-chan *Snapshot) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-snaps:
			if !ok {
				return
			}
			h.Refresh()
		}
	}
}

// AppendText appends the Prometheus text exposition (format 0.0.4) of snapshot s and health hl to b: per family a
// HELP and TYPE line and its series, families in Describe order, labels in name order.
func (c *Collector) AppendText(b []byte, s *Snapshot, hl Health) []byte {
	bufs := make([][]byte, len(c.families))
	c.renderFamilies(bufs, s, hl)
	for _, x := range bufs {
		b = append(b, x...)
	}
	return b
}

// renderFamilies renders every family into bufs[family] (reusing their capacity); a family without series is empty.
func (c *Collector) renderFamilies(bufs [][]byte, s *Snapshot, hl Health) {
	for i := range bufs {
		bufs[i] = bufs[i][:0]
	}
	c.emit(s, hl, func(f *family, v float64, lvs ...string) {
		x := bufs[f.idx]
		if len(x) == 0 {
			x = append(x, "# HELP "...)
			x = append(x, f.name...)
			x = append(x, ' ')
			x = appendEscaped(x, f.help, false)
			x = append(x, "\n# TYPE "...)
			x = append(x, f.name...)
			if f.counter {
				x = append(x, " counter\n"...)
			} else {
				x = append(x, " gauge\n"...)
			}
		}
		x = append(x, f.name...)
		x = append(x, '{')
		for n, i := range f.order {
			if n > 0 {
				x = append(x, ',')
			}
			x = append(x, f.labels[i]...)
			x = append(x, '=', '"')
			x = appendEscaped(x, lvs[i], true)
			x = append(x, '"')
		}
		x = append(x, '}', ' ')
		x = strconv.AppendFloat(x, v, 'g', -1, 64)
		x = append(x, '\n')
		bufs[f.idx] = x
	})
}

// appendEscaped escapes a label value (backslash, double quote, newline) or a HELP text (backslash, newline).
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\\':
			b = append(b, '\\', '\\')
		case ch == '\n':
			b = append(b, '\\', 'n')
		case ch == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, ch)
		}
	}
	return b
}
