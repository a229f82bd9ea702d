package promexport

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/tidemark/tidemark/lagexporter"
)

// Handler serves the Collector's series over HTTP, rendered once per snapshot: for a snapshot of 100,000
// group-partitions, building ~400,000 constant metrics through a registry on every scrape takes seconds, while
// writing pre-rendered bytes takes milliseconds. The series are exactly Collect's (the same emit function produces
// both; a test parses the rendering and compares it with Collect). Extra, when not nil, is gathered on every scrape
// and served in the same response (the process's other metrics: Go runtime, collector, writer); it must not contain
// the Collector itself.
//
// Formats: the Prometheus text format (0.0.4), or OpenMetrics 1.0 when the scraper asks for it (Prometheus does),
// which is the only format that carries Extra's exemplars (the trace ids on tidemark_e2e_latency_seconds). The
// snapshot's gauge families are rendered once in a form both formats read alike (no double quote in a HELP text,
// checked by a test); the two counter families, whose TYPE line differs between the formats, are rendered in both.
//
// Memory: two renderings (the one served and the one being built), each the gzip form of the exposition (a few MB
// at 100,000 group-partitions) kept family by family; the text is compressed as it is produced, so it is never held
// whole, and the buffers of one rendering are reused by the one after the next.
//
// Several clusters: Add puts another cluster's Collector into the same exposition (one Handler serves every cluster
// a process watches). A family is written once, its HELP and TYPE lines from the first Collector that has it, then
// every Collector's series of it in the order they were added; each series carries its own cluster label, rendered
// like any other label value, so the label costs no extra work per series. A new snapshot of any cluster renders
// all of them again.
type Handler struct {
	extra prometheus.Gatherer

	renderMu sync.Mutex // serialises renderings and Add; guards cs, heads, index, spare and scratch
	cs       []*Collector
	heads    []*family // by merged family index: the family whose HELP and TYPE lines are written
	index    [][]int   // by Collector, then by its family index: the merged family index
	spare    *exposition
	scratch  renderScratch

	mu  sync.RWMutex // guards cur; held for reading while a scrape writes cur's bytes
	cur *exposition
}

// exposition is one rendering: per family, in Describe order, its gzip member (gauge families) or its text in the
// two formats (counter families, uncompressed: a few lines).
type exposition struct {
	key      []renderKey // one per Collector, in Add order
	valid    bool
	families []familyStream
}

type renderKey struct {
	seq    uint64
	cycles uint64
	active bool // an ActiveReporter source's state: a replica turning standby or active renders again at once
}

// NewHandler returns a handler for c's series plus extra's; c may be nil (none yet: see Add).
func NewHandler(c *Collector, extra prometheus.Gatherer) *Handler {
	h := &Handler{extra: extra}
	if c != nil {
		h.Add(c)
	}
	return h
}

// Add serves c's series too, after those of the Collectors added before; safe to call while scrapes are served.
// Collectors of different clusters may have different families (granularity, compatibility names): a family only
// some have is written once, where the first of them has it.
func (h *Handler) Add(c *Collector) {
	h.renderMu.Lock()
	defer h.renderMu.Unlock()
	byName := make(map[string]int, len(h.heads))
	for i, f := range h.heads {
		byName[f.name] = i
	}
	idx := make([]int, len(c.families))
	for i, f := range c.families {
		m, ok := byName[f.name]
		if !ok {
			m = len(h.heads)
			h.heads = append(h.heads, f)
			byName[f.name] = m
		}
		idx[i] = m
	}
	h.cs = append(h.cs, c)
	h.index = append(h.index, idx)
	h.mu.Lock()
	if h.cur != nil {
		h.cur.valid = false // the next scrape renders c too
	}
	h.mu.Unlock()
}

// acceptedFormats are the formats the handler negotiates, preferred first (expfmt.NegotiateAccept).
var acceptedFormats = []expfmt.Format{expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtOpenMetrics_0_0_1, expfmt.FmtText}

// ServeHTTP writes the exposition; it never calls Kafka.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	format := expfmt.NegotiateAccept(r.Header, acceptedFormats...)
	om := format.FormatType() == expfmt.TypeOpenMetrics
	gz := acceptsGzip(r.Header.Get("Accept-Encoding"))
	var extra bytes.Buffer
	if h.extra != nil {
		mfs, err := h.extra.Gather()
		if err != nil {
			http.Error(w, "gather: "+err.Error(), http.StatusInternalServerError)
			return
		}
		enc := expfmt.NewEncoder(&extra, format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
	}
	// our own families come between Extra's and the end marker
	var tail bytes.Buffer
	h.serveRendering()
	h.mu.RLock()
	defer h.mu.RUnlock()
	for i := range h.cur.families {
		fs := &h.cur.families[i]
		if om {
			tail.Write(fs.omText)
		} else {
			tail.Write(fs.text)
		}
	}
	if om {
		tail.WriteString("# EOF\n")
	}
	w.Header().Set("Content-Type", string(format))
	w.Header().Add("Vary", "Accept, Accept-Encoding")
	if !gz {
		_, _ = w.Write(extra.Bytes())
		for i := range h.cur.families {
			if m := h.cur.families[i].out.Bytes(); len(m) > 0 {
				zr, err := gzip.NewReader(bytes.NewReader(m))
				if err == nil {
					_, _ = io.Copy(w, zr)
				}
			}
		}
		_, _ = w.Write(tail.Bytes())
		return
	}
	// concatenated gzip members: readers decode them as one stream (RFC 1952 2.2)
	w.Header().Set("Content-Encoding", "gzip")
	if extra.Len() > 0 {
		writeGzip(w, extra.Bytes())
	}
	for i := range h.cur.families {
		_, _ = w.Write(h.cur.families[i].out.Bytes())
	}
	writeGzip(w, tail.Bytes())
}

// acceptsGzip reports whether an Accept-Encoding header value lists gzip with a quality above zero (RFC 9110 12.5.3).
func acceptsGzip(v string) bool {
	for _, part := range strings.Split(v, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
			continue
		}
		if q, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			f, err := strconv.ParseFloat(q, 64)
			return err == nil && f > 0
		}
		return true
	}
	return false
}

// scrapeWriters are the gzip writers of the per-scrape members (Extra's metrics, the counters and # EOF).
var scrapeWriters = sync.Pool{New: func() any { zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed); return zw }}

func writeGzip(w io.Writer, b []byte) {
	zw := scrapeWriters.Get().(*gzip.Writer)
	zw.Reset(w)
	_, _ = zw.Write(b)
	_ = zw.Close()
	zw.Reset(io.Discard) // do not keep the response writer
	scrapeWriters.Put(zw)
}

// serveRendering makes h.cur a rendering to serve: while one is being built (Follow renders every new snapshot as it
// is published, seconds at 500,000 group-partitions on a loaded machine), a scrape serves the last finished one
// instead of waiting for it, so a scrape costs a copy of bytes and never a rendering; the new snapshot is served as
// soon as its rendering is done. Without a finished rendering, or when none is being built, it renders.
func (h *Handler) serveRendering() {
	if !h.renderMu.TryLock() {
		h.mu.RLock()
		ready := h.cur != nil && h.cur.valid
		h.mu.RUnlock()
		if ready {
			return
		}
		h.renderMu.Lock()
	}
	defer h.renderMu.Unlock()
	h.renderLocked()
}

// render renders the latest snapshots and health unless the current rendering already shows them.
func (h *Handler) render() {
	h.renderMu.Lock()
	defer h.renderMu.Unlock()
	h.renderLocked()
}

// renderLocked is render; the caller holds h.renderMu.
func (h *Handler) renderLocked() {
	snaps := make([]*lagexporter.Snapshot, len(h.cs))
	hls := make([]lagexporter.Health, len(h.cs))
	key := make([]renderKey, len(h.cs))
	for i, c := range h.cs {
		snaps[i], hls[i] = c.src.Latest(), c.src.Health()
		key[i].cycles = hls[i].Cycles
		if ar, ok := c.src.(ActiveReporter); ok {
			key[i].active = ar.Active()
		}
		if snaps[i] != nil {
			key[i].seq = snaps[i].Seq
		}
	}
	h.mu.RLock()
	current := h.cur != nil && h.cur.valid && slices.Equal(h.cur.key, key)
	h.mu.RUnlock()
	if current {
		return
	}
	next := h.spare
	if next == nil {
		next = &exposition{}
	}
	renderAll(next, h.heads, h.cs, h.index, snaps, hls, &h.scratch)
	next.key, next.valid = key, true
	h.mu.Lock() // waits for the scrapes still writing the previous rendering
	h.cur, h.spare = next, h.cur
	h.mu.Unlock()
}

// Refresh renders the latest snapshot now, so that the next scrape only copies bytes. Follow calls it for every new
// snapshot.
func (h *Handler) Refresh() { h.render() }

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
