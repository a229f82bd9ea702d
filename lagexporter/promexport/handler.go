package promexport

import (
	"bytes"
	"context"
	"io"
	"math"
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

// familyStream is one family of a rendering. A gauge family's text is compressed as it is produced: lines are staged,
// and every staged buffer is compressed into a gzip member of its own, appended to the family's out (concatenated
// members are one stream to every gzip reader, RFC 1952 2.2). A counter family keeps its text in both formats.
//
// While a rendering runs, stage and headed belong to the goroutine that formats the series, out to the one that
// compresses them (see renderAll).
type familyStream struct {
	stage  []byte
	staged int  // bytes of text staged so far
	headed bool // the HELP and TYPE lines are written
	out    bytes.Buffer

	text, omText []byte // counter families only
}

// renderScratch is what renderings reuse, one at a time: the one gzip writer (about a MiB of compressor state), and
// the staging buffers in circulation between the two goroutines of a rendering (at most stagedJobs+1, stageCap
// each). Memory, measured at 100,000 group-partitions: with one open gzip member per family and each family's
// staging buffer kept between renderings (1 MiB stages), rendering state was 24 MB of the daemon's 108 MB live heap;
// a member per staged buffer needs one writer, and a family's own buffer is garbage once compressed. Neither is
// kept by an exposition.
type renderScratch struct {
	zw    *gzip.Writer
	sizes []int    // by family index: the length of the family's gzip members in the last rendering
	texts []int    // by family index: the length of the family's text in the last rendering
	spare [][]byte // staging buffers compressed and free to refill (renderAll)
}

// outBuffer makes fs.out an empty buffer sized for a member of about last bytes (the family's size in the last
// rendering, plus an eighth): its buffer is kept when it is large enough and not more than twice that, so that a
// steady exposition is written without growing a buffer by doubling and without keeping the slack doubling left.
func (fs *familyStream) outBuffer(last int) {
	want := last + last/8
	if c := fs.out.Cap(); c >= last && c <= 2*want+64<<10 {
		fs.out.Reset()
		return
	}
	fs.out = *bytes.NewBuffer(make([]byte, 0, want))
}

// writer returns the scratch's gzip writer, reset to write a new member to w.
func (p *renderScratch) writer(w io.Writer) *gzip.Writer {
	if p.zw == nil {
		p.zw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		return p.zw
	}
	p.zw.Reset(w)
	return p.zw
}

// stageBytes is how much of a family's text is staged before it is compressed as one gzip member. A family smaller
// than that is compressed whole once emit is done. A member starts without the last one's 32 KiB window: at 128 KiB
// the exposition is 3 % larger than with one member per family (BenchmarkScrapeHandler at 100,000
// group-partitions: 2,810,999 against 2,723,177 B), for 24 MB less live heap.
const stageBytes = 128 << 10

// stageCap is the capacity of a staging buffer taken from circulation: stageBytes and room for the line that
// crosses it (a series line is well under 16 KiB: label values are Kafka names of up to 249 bytes), so a staged
// buffer is not grown by doubling.
const stageCap = stageBytes + 16<<10

// stageJob is staged text of family i for the compressing goroutine; last is the family's last.
type stageJob struct {
	i    int
	text []byte
	last bool
}

// compress appends every staged text, in the order it was staged, to its family's out as a gzip member, and hands
// every staged buffer that is not a family's last back on free for the formatting goroutine to refill.
func compress(families []familyStream, pool *renderScratch, jobs <-chan stageJob, free chan<- []byte) {
	for j := range jobs {
		if len(j.text) > 0 {
			zw := pool.writer(&families[j.i].out)
			_, _ = zw.Write(j.text)
			_ = zw.Close()
			zw.Reset(io.Discard) // do not keep the family's buffer
		}
		if !j.last {
			free <- j.text[:0] // free has room for every buffer in circulation (renderAll)
		}
	}
}

// renderInto renders snapshot s and health hl into e, reusing e's buffers: every family in Describe order.
func (c *Collector) renderInto(e *exposition, s *lagexporter.Snapshot, hl lagexporter.Health, pool *renderScratch) {
	idx := make([]int, len(c.families))
	for i := range idx {
		idx[i] = i
	}
	renderAll(e, c.families, []*Collector{c}, [][]int{idx}, []*lagexporter.Snapshot{s}, []lagexporter.Health{hl}, pool)
}

// renderAll renders the Collectors' snapshots and health into e, reusing e's buffers: every merged family (heads,
// index: see Handler) in order, each with the series of every Collector in order.
//
// Formatting and compression run concurrently, each about half of a rendering's CPU: this goroutine formats the
// series into the families' staging buffers, and a staging buffer that is full goes to a second goroutine that
// compresses it into the family's member while the formatting goes on in a fresh buffer (at most stagedJobs full
// buffers wait). On a busy machine two runnable goroutines also get about twice the CPU time of one.
func renderAll(e *exposition, heads []*family, cs []*Collector, index [][]int, snaps []*lagexporter.Snapshot,
	hls []lagexporter.Health, pool *renderScratch) {
	if len(e.families) != len(heads) {
		e.families = make([]familyStream, len(heads))
	}
	if len(pool.sizes) != len(heads) {
		pool.sizes, pool.texts = make([]int, len(heads)), make([]int, len(heads))
	}
	for i := range e.families {
		fs := &e.families[i]
		fs.stage, fs.text, fs.omText = nil, fs.text[:0], fs.omText[:0]
		fs.outBuffer(pool.sizes[i])
		fs.headed, fs.staged = false, 0
	}
	// Buffers in circulation besides the families' own: at most stagedJobs+1 (the ones waiting, the one being
	// compressed), allocated once and kept in pool.spare, so a steady rendering allocates none.
	jobs := make(chan stageJob, stagedJobs)
	free := make(chan []byte, stagedJobs+1)
	extra := len(pool.spare)
	for _, b := range pool.spare {
		free <- b[:0]
	}
	pool.spare = pool.spare[:0]
	done := make(chan struct{})
	go func() {
		defer close(done)
		compress(e.families, pool, jobs, free)
	}()
	for k, c := range cs {
		idx := index[k]
		c.emit(snaps[k], hls[k], func(f *family, v float64, lvs []string) {
			m := idx[f.idx]
			fs, head := &e.families[m], heads[m]
			if f.counter {
				if len(fs.text) == 0 {
					fs.text = appendHeader(fs.text, head, false)
					fs.omText = appendHeader(fs.omText, head, true)
				}
				n := len(fs.text)
				fs.text = appendSeries(fs.text, f, v, lvs)
				fs.omText = append(fs.omText, fs.text[n:]...)
				return
			}
			if fs.stage == nil { // sized from the last rendering: a steady rendering grows no buffer by doubling
				fs.stage = make([]byte, 0, min(stageCap, max(1024, pool.texts[m]+pool.texts[m]/8)))
			}
			if !fs.headed {
				fs.stage = appendHeader(fs.stage, head, false)
				fs.headed = true
			}
			fs.stage = appendSeries(fs.stage, f, v, lvs)
			if len(fs.stage) >= stageBytes {
				fs.staged += len(fs.stage)
				jobs <- stageJob{i: m, text: fs.stage}
				if extra == cap(free) {
					fs.stage = <-free
					return
				}
				select {
				case fs.stage = <-free:
				default:
					fs.stage = make([]byte, 0, stageCap)
					extra++
				}
			}
		})
	}
	for i := range e.families {
		fs := &e.families[i]
		fs.staged += len(fs.stage)
		jobs <- stageJob{i: i, text: fs.stage, last: true}
	}
	close(jobs)
	<-done
	for i := range e.families {
		fs := &e.families[i]
		fs.stage = nil // compressed: garbage now
		pool.sizes[i], pool.texts[i] = fs.out.Len(), fs.staged
	}
	close(free)
	for b := range free { // kept for the next rendering
		pool.spare = append(pool.spare, b)
	}
}

// stagedJobs is how many full staging buffers (stageBytes to stageCap each) may wait for the compressing goroutine.
const stagedJobs = 2

// renderGzip renders snapshot s and health hl as the text exposition in gzip members, family by family in Describe
// order (what a text-format gzip scrape without Extra receives).
func (c *Collector) renderGzip(s *lagexporter.Snapshot, hl lagexporter.Health, dst []byte) []byte {
	var e exposition
	c.renderInto(&e, s, hl, &renderScratch{})
	for i := range e.families {
		fs := &e.families[i]
		dst = append(dst, fs.out.Bytes()...)
		if len(fs.text) > 0 {
			var b bytes.Buffer
			writeGzip(&b, fs.text)
			dst = append(dst, b.Bytes()...)
		}
	}
	return dst
}

// AppendText appends the Prometheus text exposition (format 0.0.4) of snapshot s and health hl to b: per family a
// HELP and TYPE line and its series, families in Describe order, labels in name order.
func (c *Collector) AppendText(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health) []byte {
	return c.appendExposition(b, s, hl, false)
}

// AppendOpenMetrics appends the same series in the OpenMetrics 1.0 text format, without the final "# EOF" line (the
// handler appends it after every other family of the response): counter families are named without their _total
// suffix on the HELP and TYPE lines.
func (c *Collector) AppendOpenMetrics(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health) []byte {
	return c.appendExposition(b, s, hl, true)
}

func (c *Collector) appendExposition(b []byte, s *lagexporter.Snapshot, hl lagexporter.Health, om bool) []byte {
	bufs := make([][]byte, len(c.families))
	c.emit(s, hl, func(f *family, v float64, lvs []string) {
		if len(bufs[f.idx]) == 0 {
			bufs[f.idx] = appendHeader(bufs[f.idx], f, om)
		}
		bufs[f.idx] = appendSeries(bufs[f.idx], f, v, lvs)
	})
	for _, x := range bufs {
		b = append(b, x...)
	}
	return b
}

// appendHeader appends a family's HELP and TYPE lines; for OpenMetrics a counter family is named without _total.
func appendHeader(x []byte, f *family, om bool) []byte {
	name := f.name
	if om && f.counter {
		name = strings.TrimSuffix(name, "_total")
	}
	x = append(x, "# HELP "...)
	x = append(x, name...)
	x = append(x, ' ')
	x = appendEscaped(x, f.help, om)
	x = append(x, "\n# TYPE "...)
	x = append(x, name...)
	if f.counter {
		return append(x, " counter\n"...)
	}
	return append(x, " gauge\n"...)
}

// appendSeries appends one series line: name{labels in name order} value.
func appendSeries(x []byte, f *family, v float64, lvs []string) []byte {
	if len(f.order) == 0 {
		x = append(x, f.name...)
		x = append(x, "{} "...)
	} else {
		for n, i := range f.order {
			x = append(x, f.pre[n]...)
			x = appendEscaped(x, lvs[i], true)
		}
		x = append(x, `"} `...)
	}
	return append(appendValue(x, v), '\n')
}

// appendValue appends v as strconv.AppendFloat(x, v, 'g', -1, 64) does (the shortest form that reads back as v,
// exponent form from 1e+06 on). Integers below 10^6 in magnitude, most values of a lag exposition (lags, counts,
// flags), take a shortcut that writes the same digits.
func appendValue(x []byte, v float64) []byte {
	if v > -1e6 && v < 1e6 {
		if i := int64(v); float64(i) == v && (i != 0 || !math.Signbit(v)) {
			return strconv.AppendInt(x, i, 10)
		}
	}
	return strconv.AppendFloat(x, v, 'g', -1, 64)
}

// appendEscaped escapes a label value or an OpenMetrics HELP text (backslash, double quote, newline), or a text
// format HELP text (backslash, newline).
func appendEscaped(b []byte, s string, quote bool) []byte {
	i := 0 // the prefix that needs no escape (usually all of s) is copied at once
	for i < len(s) && s[i] != '\\' && s[i] != '\n' && (s[i] != '"' || !quote) {
		i++
	}
	b = append(b, s[:i]...)
	for ; i < len(s); i++ {
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
