package tracing

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"google.golang.org/grpc/credentials"
)

// Provider is the TracerProvider of Tidemark's own spans, exporting through the bounded queue.
type Provider struct {
	*sdktrace.TracerProvider
	q *queue
}

// newMetrics creates the queue's metrics and registers them on reg (nil: not registered). queued reads the queue
// length for the gauge; NewProvider passes its queue's.
func newMetrics(reg prometheus.Registerer, queued func() float64) *Metrics {
	m := &Metrics{
		Spans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_traces_spans_total",
			Help: "Tidemark's own spans by outcome: exported (acknowledged by the OTLP backend), dropped (the export queue was full), failed (the export failed or timed out)."},
			[]string{"outcome"}),
		Queued: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tidemark_traces_queued_spans",
			Help: "Spans waiting in the export queue (tracing.queue_size bounds it)."}, queued),
		Exports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_traces_exports_total",
			Help: "OTLP export calls by result (ok, error)."}, []string{"result"}),
	}
	for _, o := range []string{outcomeExported, outcomeDropped, outcomeFailed} {
		m.Spans.WithLabelValues(o)
	}
	m.Exports.WithLabelValues("ok")
	m.Exports.WithLabelValues("error")
	if reg != nil {
		reg.MustRegister(m.Spans, m.Queued, m.Exports)
	}
	return m
}

// NewProvider builds the exporter cfg describes (defaults applied, validated) and a TracerProvider exporting
// through a bounded queue; its metrics go to reg. It does not connect: an unreachable backend shows as failed
// exports, never as an error here. It fails on an invalid config or unreadable TLS files. Shutdown flushes (bounded
// by its context) and stops the exporter.
func NewProvider(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Provider, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled {
		return nil, fmt.Errorf("tracing: not enabled")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, err
	}
	p := &Provider{}
	m := newMetrics(reg, func() float64 {
		if p.q == nil {
			return 0
		}
		return float64(p.q.len())
	})
	p.q = newQueue(exp, cfg, m, log)
	res := resource.NewSchemaless(semconv.ServiceName(cfg.ServiceName))
	// Sampling is the caller's decision (the collector's sampled-flag, ratio and slow-record rules), so the SDK keeps
	// every span it is asked to start.
	p.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(p.q))
	return p, nil
}

// newExporter returns the OTLP exporter of cfg's protocol; its own retries stop at the export timeout.
func newExporter(cfg Config) (sdktrace.SpanExporter, error) {
	var tc *tls.Config
	d, err := cfg.TLS.NewDialer() // nil when TLS is off; reads every file now, so a bad one is an error at start
	if err != nil {
		return nil, fmt.Errorf("tracing.tls: %w", err)
	}
	if d != nil {
		// One configuration for every connection to the endpoint; its handshakes read the CA bundle and the client
		// certificate again, so rotated files are used without a restart.
		tc = d.ClientConfig(cfg.Endpoint)
	}
	ctx := context.Background() // the exporters connect lazily; ctx only bounds what New does
	switch cfg.Protocol {
	case "http":
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(cfg.Endpoint), otlptracehttp.WithURLPath(cfg.URLPath),
			otlptracehttp.WithTimeout(cfg.Timeout), otlptracehttp.WithHeaders(cfg.Headers),
			otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: cfg.Timeout / 20,
				MaxInterval: cfg.Timeout / 4, MaxElapsedTime: cfg.Timeout})}
		if tc == nil {
			opts = append(opts, otlptracehttp.WithInsecure())
		} else {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tc))
		}
		if cfg.Compression == "gzip" {
			opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithTimeout(cfg.Timeout),
			otlptracegrpc.WithHeaders(cfg.Headers),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: cfg.Timeout / 20,
				MaxInterval: cfg.Timeout / 4, MaxElapsedTime: cfg.Timeout})}
		if tc == nil {
			opts = append(opts, otlptracegrpc.WithInsecure())
		} else {
			opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
		}
		if cfg.Compression == "gzip" {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
}
