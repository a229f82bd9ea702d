package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

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

// NewMetrics creates the queue's metrics and registers them on reg (nil: not registered). queued reads the queue
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
	if cfg.TLS.Enabled {
		var err error
		if tc, err = cfg.TLS.clientConfig(); err != nil {
			return nil, err
		}
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

// clientConfig reads the TLS files once (they are small; a rotated file is read at the next start).
func (c TLSConfig) clientConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.InsecureSkipVerify} //nolint:gosec // opt-in for tests
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read tracing.tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tracing.tls.ca_file %s: no PEM certificates", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("read tracing.tls cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
