package promexport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/tidemark/tidemark/lagexporter"
)

// Handler serves the Collector's series over HTTP in the Prometheus text format, rendered once per snapshot: for a
// snapshot of 100,000 group-partitions, building ~400,000 constant metrics through a registry on every scrape takes
// seconds, while writing pre-rendered bytes takes milliseconds. The series are exactly Collect's (the same emit
// function produces both; a test parses the rendering and compares it with Collect). Extra, when not nil, is gathered
// on every scrape and appended (the process's other metrics); it must not contain the Collector itself.
//
// Memory: the gzip form of one rendering (a few MB at 100,000 group-partitions); the text is compressed family by
// family as it is produced, so it is never held whole.
type Handler struct {
	c     *Collector
	extra prometheus.Gatherer

	mu    sync.Mutex // guards the fields below; held while rendering and writing, so concurrent scrapes render once
	key   renderKey
	valid bool
	gzipd []byte // the exposition as concatenated gzip members, one per family with series
}

type renderKey struct {
	seq    uint64
	cycles uint64
}

// NewHandler returns a handler for c's series plus extra's.
func NewHandler(c *Collector, extra prometheus.Gatherer) *Handler {
	return &Handler{c: c, extra: extra}
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
	h.mu.Lock()
	defer h.mu.Unlock()
	h.render()
	if !gz {
		zr, err := gzip.NewReader(bytes.NewReader(h.gzipd)) // multistream: reads every member
		if err == nil {
			_, _ = io.Copy(w, zr)
		}
		_, _ = w.Write(extra.Bytes())
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	_, _ = w.Write(h.gzipd)
	if extra.Len() > 0 { // one more gzip member; readers decode the concatenation (RFC 1952 2.2)
		zw := gzip.NewWriter(w)
		_, _ = zw.Write(extra.Bytes())
		_ = zw.Close()
	}
}

// render re-renders if the snapshot or health changed since the last rendering. h.mu must be held.
func (h *Handler) render() {
	s, hl := h.c.src.Latest(), h.c.src.Health()
	k := renderKey{cycles: hl.Cycles}
	if s != nil {
		k.seq = s.Seq
	}
	if h.valid && k == h.key {
		return
	}
	h.gzipd = h.c.renderGzip(s, hl, h.gzipd[:0])
	h.key, h.valid = k, true
}

// Refresh renders the latest snapshot now, so that the next scrape only copies bytes. Follow calls it for every new
// snapshot.
func (h *Handler) Refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.render()
}

// Follow refreshes the rendering for every snapshot received on snaps (e.g. from Loop.Subscribe) until ctx is done or
// snaps is closed.
func (h *Handler) Follow(ctx context.Context, snaps <-chan *lagexporter.Snapshot) {
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

// familyStream compresses one family's text as it is produced: lines are staged, then written to the family's own
// gzip member.
type familyStream struct {
	stage []byte
	out   bytes.Buffer
	zw    *gzip.Writer
}

const stageBytes = 64 << 10

func (fs *familyStream) flush() {
	if len(fs.stage) == 0 {
		return
	}
	if fs.zw == nil {
		fs.zw, _ = gzip.NewWriterLevel(&fs.out, gzip.BestSpeed)
	}
	_, _ = fs.zw.Write(fs.stage)
	fs.stage = fs.stage[:0]
}

// renderGzip renders snapshot s and health hl and returns dst with the exposition appended as gzip members, one per
// family, in Describe order.
func (c *Collector) renderGzip(s *lagexporter.Snapshot, hl lagexporter.Health, dst []byte) []byte {
	streams := make([]familyStream, len(c.families))
	c.emit(s, hl, func(f *family, v float64, lvs ...string) {
		fs := &streams[f.idx]
		if fs.stage == nil {
			fs.stage = make([]byte, 0, 1024)
		}
		if fs.zw == nil && len(fs.stage) == 0 {
			fs.stage = appendHeader(fs.stage, f)
		}
		fs.stage = appendSeries(fs.stage, f, v, lvs)
		if len(fs.stage) >= stageBytes {
			if cap(fs.stage) < stageBytes*2 {
				fs.stage = append(make([]byte, 0, stageBytes*2), fs.stage...)
			}
			fs.flush()
		}
	})
	for i := range streams {
		fs := &streams[i]
		fs.flush()
		if fs.zw != nil {
			_ = fs.zw.Close()
			dst = append(dst, fs.out.Bytes()...)
		}
	}
	return dst
}

// AppendText appends the Prometheus text exposition (format 0.0.4) of snapshot s and health hl to b: per family a
// HELP and TYPE line and its series, families in Describe order, labels in name order.
func (c *Collector) AppendText(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health) []byte {
	bufs := make([][]byte, len(c.families))
	c.renderFamilies(bufs, s, hl)
	for _, x := range bufs {
		b = append(b, x...)
	}
	return b
}

// renderFamilies renders every family into bufs[family] (reusing their capacity); a family without series is empty.
func (c *Collector) renderFamilies(bufs [][]byte, s *lagexporter.Snapshot, hl lagexporter.Health) {
	for i := range bufs {
		bufs[i] = bufs[i][:0]
	}
	c.emit(s, hl, func(f *family, v float64, lvs ...string) {
		if len(bufs[f.idx]) == 0 {
			bufs[f.idx] = appendHeader(bufs[f.idx], f)
		}
		bufs[f.idx] = appendSeries(bufs[f.idx], f, v, lvs)
	})
}

// appendHeader appends a family's HELP and TYPE lines.
func appendHeader(x []byte, f *family) []byte {
	x = append(x, "# HELP "...)
	x = append(x, f.name...)
	x = append(x, ' ')
	x = appendEscaped(x, f.help, false)
	x = append(x, "\n# TYPE "...)
	x = append(x, f.name...)
	if f.counter {
		return append(x, " counter\n"...)
	}
	return append(x, " gauge\n"...)
}

// appendSeries appends one series line: name{labels in name order} value.
func appendSeries(x []byte, f *family, v float64, lvs []string) []byte {
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
	return append(x, '\n')
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
