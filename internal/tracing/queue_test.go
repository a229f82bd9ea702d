package tracing

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

// fakeExporter records batches; while gate is not nil, ExportSpans waits on it (a hung backend) or ctx.
type fakeExporter struct {
	mu      sync.Mutex
	batches []int
	err     error
	gate    chan struct{}
	entered chan struct{} // receives once per ExportSpans call, if not nil
}

func (f *fakeExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.batches = append(f.batches, len(spans))
	return nil
}

func (f *fakeExporter) Shutdown(context.Context) error { return nil }

func testProvider(t *testing.T, exp sdktrace.SpanExporter, cfg Config) (*sdktrace.TracerProvider, *queue, *Metrics) {
	t.Helper()
	cfg.Enabled, cfg.Endpoint = true, "127.0.0.1:1"
	cfg.SetDefaults()
	m := newMetrics(prometheus.NewRegistry(), func() float64 { return 0 })
	q := newQueue(exp, cfg, m, nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(q))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, q, m
}

func endSpans(tp *sdktrace.TracerProvider, n int) {
	tr := tp.Tracer("test")
	for i := 0; i < n; i++ {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
}

func count(m *Metrics, outcome string) float64 {
	return testutil.ToFloat64(m.Spans.WithLabelValues(outcome))
}

func TestQueueBatchesAndFlushes(t *testing.T) {
	exp := &fakeExporter{}
	tp, q, m := testProvider(t, exp, Config{BatchSize: 4, BatchTimeout: time.Hour, QueueSize: 100})
	endSpans(tp, 10)
	if err := q.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	exp.mu.Lock()
	total := 0
	for _, n := range exp.batches {
		if n > 4 {
			t.Errorf("batch of %d spans, max 4", n)
		}
		total += n
	}
	exp.mu.Unlock()
	if total != 10 || count(m, "exported") != 10 || count(m, "dropped") != 0 {
		t.Fatalf("exported %d (counter %v, dropped %v)", total, count(m, "exported"), count(m, "dropped"))
	}
}

// A backend that hangs: ending spans never blocks, the queue holds QueueSize, the rest is dropped and counted, and
// the hung export gives up at the timeout and counts its batch as failed.
func TestQueueNeverBlocksOnHungBackend(t *testing.T) {
	exp := &fakeExporter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	tp, q, m := testProvider(t, exp, Config{BatchSize: 2, BatchTimeout: time.Hour, QueueSize: 5, Timeout: time.Hour})
	endSpans(tp, 2) // one full batch: the exporting goroutine takes it and hangs
	<-exp.entered
	endSpans(tp, 100) // 5 fit in the queue, 95 are dropped; none of these calls waits
	if got := count(m, "dropped"); got != 95 {
		t.Fatalf("dropped %v, want 95", got)
	}
	if q.len() != 5 {
		t.Fatalf("queued %d, want 5", q.len())
	}
	close(exp.gate) // the backend recovers: everything queued goes out
	if err := q.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := count(m, "exported"); got != 7 {
		t.Fatalf("exported %v, want 7", got)
	}
}

func TestQueueCountsFailedExports(t *testing.T) {
	exp := &fakeExporter{err: errors.New("connection refused")}
	tp, q, m := testProvider(t, exp, Config{BatchSize: 3, BatchTimeout: time.Hour})
	endSpans(tp, 7)
	if err := q.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if count(m, "failed") != 7 || count(m, "exported") != 0 || testutil.ToFloat64(m.Exports.WithLabelValues("error")) != 3 {
		t.Fatalf("failed %v exported %v exports %v", count(m, "failed"), count(m, "exported"),
			testutil.ToFloat64(m.Exports.WithLabelValues("error")))
	}
}

// Shutdown sends what is queued.
func TestQueueShutdownDrains(t *testing.T) {
	exp := &fakeExporter{}
	tp, _, m := testProvider(t, exp, Config{BatchSize: 100, BatchTimeout: time.Hour})
	endSpans(tp, 3)
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if count(m, "exported") != 3 {
		t.Fatalf("exported %v", count(m, "exported"))
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"off needs nothing", Config{}, ""},
		{"no endpoint", Config{Enabled: true}, "tracing.endpoint: required when tracing is enabled (host:port of an OTLP receiver)"},
		{"bad protocol", Config{Enabled: true, Endpoint: "c:4317", Protocol: "thrift"}, `tracing.protocol: "thrift" is not one of grpc, http`},
		{"endpoint without port", Config{Enabled: true, Endpoint: "collector"}, `tracing.endpoint: want host:port (e.g. otel-collector:4317), got "collector"`},
		{"batch over queue", Config{Enabled: true, Endpoint: "c:4317", QueueSize: 10, BatchSize: 11}, "tracing.batch_size: must be in [1, queue_size (10)], got 11"},
		{"tls files with tls off", Config{Enabled: true, Endpoint: "c:4317", TLS: tlsconf.Config{CAFile: "ca.pem"}},
			"tracing.tls: files or options are set but tracing.tls.enabled is false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.SetDefaults()
			err := tc.cfg.Validate()
			if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
				t.Fatalf("got %v, want %q", err, tc.err)
			}
		})
	}
}
