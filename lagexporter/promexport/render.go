package promexport

import (
	"bytes"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/tidemark/tidemark/lagexporter"
)

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
	r := startRendering(e, heads, pool)
	for k, c := range cs {
		idx := index[k]
		c.emit(snaps[k], hls[k], func(f *family, v float64, lvs []string) { r.series(idx[f.idx], f, v, lvs) })
	}
	r.finish()
}

// rendering is one renderAll under way: the exposition it builds, the merged families' heads (whose HELP and TYPE
// lines are written), the scratch it reuses, and the channels between the formatting goroutine and the compressing
// one.
type rendering struct {
	e     *exposition
	heads []*family
	pool  *renderScratch
	jobs  chan stageJob // full staging buffers, for the compressing goroutine
	free  chan []byte   // staging buffers compressed and free to refill
	extra int           // staging buffers in circulation besides the families' own
	done  chan struct{} // closed when the compressing goroutine has compressed every job
}

// startRendering empties e's families for a new rendering, each family's output sized from the last rendering, and
// starts the compressing goroutine.
func startRendering(e *exposition, heads []*family, pool *renderScratch) *rendering {
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
	r := &rendering{e: e, heads: heads, pool: pool, jobs: make(chan stageJob, stagedJobs),
		free: make(chan []byte, stagedJobs+1), extra: len(pool.spare), done: make(chan struct{})}
	for _, b := range pool.spare {
		r.free <- b[:0]
	}
	pool.spare = pool.spare[:0]
	go func() {
		defer close(r.done)
		compress(e.families, pool, r.jobs, r.free)
	}()
	return r
}

// series formats one series of family f, which is merged family m: a counter family's line in both formats, a
// gauge family's line (after its HELP and TYPE lines) into the family's staging buffer, which goes to the compressing
// goroutine once it holds stageBytes.
func (r *rendering) series(m int, f *family, v float64, lvs []string) {
	fs, head := &r.e.families[m], r.heads[m]
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
		fs.stage = make([]byte, 0, min(stageCap, max(1024, r.pool.texts[m]+r.pool.texts[m]/8)))
	}
	if !fs.headed {
		fs.stage = appendHeader(fs.stage, head, false)
		fs.headed = true
	}
	fs.stage = appendSeries(fs.stage, f, v, lvs)
	if len(fs.stage) >= stageBytes {
		r.handOff(m, fs)
	}
}

// handOff sends family m's full staging buffer to the compressing goroutine and gives the family another: a
// compressed one when one is free, else a new one, unless every buffer allowed is in circulation, in which case it
// waits for one to be compressed.
func (r *rendering) handOff(m int, fs *familyStream) {
	fs.staged += len(fs.stage)
	r.jobs <- stageJob{i: m, text: fs.stage}
	if r.extra == cap(r.free) {
		fs.stage = <-r.free
		return
	}
	select {
	case fs.stage = <-r.free:
	default:
		fs.stage = make([]byte, 0, stageCap)
		r.extra++
	}
}

// finish hands every family's last staged text to the compressing goroutine, waits until all is compressed, keeps
// each family's sizes for the next rendering, and the free staging buffers in the scratch.
func (r *rendering) finish() {
	for i := range r.e.families {
		fs := &r.e.families[i]
		fs.staged += len(fs.stage)
		r.jobs <- stageJob{i: i, text: fs.stage, last: true}
	}
	close(r.jobs)
	<-r.done
	for i := range r.e.families {
		fs := &r.e.families[i]
		fs.stage = nil // compressed: garbage now
		r.pool.sizes[i], r.pool.texts[i] = fs.out.Len(), fs.staged
	}
	close(r.free)
	for b := range r.free { // kept for the next rendering
		r.pool.spare = append(r.pool.spare, b)
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
