package tracing

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Metrics are the export queue's counters, registered on the registry passed to [NewProvider].
type Metrics struct {
	// Spans counts ended spans by outcome: exported (the backend acknowledged them), dropped (the queue was full),
	// failed (an export call failed or timed out; those spans are gone).
	Spans *prometheus.CounterVec // outcome
	// Queued is how many spans wait for export right now.
	Queued prometheus.GaugeFunc
	// Exports counts export calls by result (ok, error).
	Exports *prometheus.CounterVec // result
}

const (
	outcomeExported = "exported"
	outcomeDropped  = "dropped"
	outcomeFailed   = "failed"
)

// queue is a span processor with a bounded queue in front of an exporter. OnEnd never blocks: a span that does not
// fit is dropped and counted. One goroutine (run) owns the exporter: it sends a batch when BatchSize spans are
// waiting or BatchTimeout after the batch's first span, each call bounded by Timeout, so a backend that hangs
// costs at most Timeout per batch while the queue absorbs or drops what arrives meanwhile.
type queue struct {
	exp     sdktrace.SpanExporter
	spans   chan sdktrace.ReadOnlySpan
	batch   int
	linger  time.Duration
	timeout time.Duration
	log     *slog.Logger

	exported, dropped, failed prometheus.Counter
	exportOK, exportErr       prometheus.Counter

	flush    chan chan struct{} // ForceFlush requests; the reply is closed once everything queued before it was sent
	stop     chan struct{}      // closed by Shutdown
	done     chan struct{}      // closed when run returns
	stopOnce sync.Once
	// lastErr rate-limits the export-failure log line: at most one a minute (the counter has every failure).
	lastErr time.Time
}

var _ sdktrace.SpanProcessor = (*queue)(nil)

func newQueue(exp sdktrace.SpanExporter, cfg Config, m *Metrics, log *slog.Logger) *queue {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &queue{exp: exp, spans: make(chan sdktrace.ReadOnlySpan, cfg.QueueSize), batch: cfg.BatchSize,
		linger: cfg.BatchTimeout, timeout: cfg.Timeout, log: log,
		exported: m.Spans.WithLabelValues(outcomeExported), dropped: m.Spans.WithLabelValues(outcomeDropped),
		failed: m.Spans.WithLabelValues(outcomeFailed), exportOK: m.Exports.WithLabelValues("ok"),
		exportErr: m.Exports.WithLabelValues("error"),
		flush:     make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go q.run()
	return q
}

// OnStart implements sdktrace.SpanProcessor.
func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues a sampled span, or drops and counts it when the queue is full. It never blocks.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case q.spans <- s:
	default:
		q.dropped.Inc()
	}
}

// run is the exporting goroutine; it returns after Shutdown, having sent what was queued.
func (q *queue) run() {
	defer close(q.done)
	buf := make([]sdktrace.ReadOnlySpan, 0, q.batch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case s := <-q.spans:
			if len(buf) == 0 {
				timer.Reset(q.linger)
			}
			buf = append(buf, s)
			if len(buf) >= q.batch {
				timer.Stop()
				buf = q.export(buf)
			}
		case <-timer.C:
			buf = q.export(buf)
		case reply := <-q.flush:
			timer.Stop()
			buf = q.drain(buf)
			close(reply)
		case <-q.stop:
			timer.Stop()
			q.drain(buf)
			return
		}
	}
}

// drain exports buf and everything queued now.
func (q *queue) drain(buf []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	for {
		select {
		case s := <-q.spans:
			buf = append(buf, s)
			if len(buf) >= q.batch {
				buf = q.export(buf)
			}
		default:
			return q.export(buf)
		}
	}
}

// export sends buf (if not empty) within the timeout and counts the outcome; it returns buf emptied.
func (q *queue) export(buf []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	if len(buf) == 0 {
		return buf
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.timeout)
	err := q.exp.ExportSpans(ctx, buf)
	cancel()
	if err != nil {
		q.exportErr.Inc()
		q.failed.Add(float64(len(buf)))
		if now := time.Now(); now.Sub(q.lastErr) >= time.Minute {
			q.lastErr = now
			q.log.Warn("span export failed; spans are dropped and counted in tidemark_traces_spans_total{outcome=\"failed\"}",
				"spans", len(buf), "err", err)
		}
	} else {
		q.exportOK.Inc()
		q.exported.Add(float64(len(buf)))
	}
	clear(buf) // the exporter does not keep them; let the spans be collected
	return buf[:0]
}

// ForceFlush exports everything queued before the call, or returns ctx's error.
func (q *queue) ForceFlush(ctx context.Context) error {
	reply := make(chan struct{})
	select {
	case q.flush <- reply:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-reply:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued (bounded by ctx and each export's timeout) and shuts the exporter down.
func (q *queue) Shutdown(ctx context.Context) error {
	q.stopOnce.Do(func() { close(q.stop) })
	select {
	case <-q.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return q.exp.Shutdown(ctx)
}

// len is the number of spans waiting (the gauge).
func (q *queue) len() int { return len(q.spans) }
