// Package tracing exports Tidemark's own spans (the collector's hop spans) over OTLP: the `tracing:` block of
// `tidemark run`, the TracerProvider it builds, and the bounded export queue whose drops /metrics counts.
//
// The exporters are OpenTelemetry's (otlptracegrpc, otlptracehttp). In front of them sits [queue], a span processor
// with a fixed-size queue that never blocks the pipeline: when the backend is slow or down, spans that do not fit
// are dropped and counted (tidemark_traces_spans_total{outcome="dropped"}), and a failed export is counted as
// failed, never retried past the export timeout. The SDK's BatchSpanProcessor does the same batching but keeps its
// drop count to itself, and a trace backend outage must be visible where the operator looks.
//
// Main types: [Config], [Provider].
package tracing

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

// Config is the `tracing:` block. The zero value is tracing off.
type Config struct {
	// Enabled turns span export on. Off, the collector makes no spans at all.
	Enabled bool `yaml:"enabled"`
	// Protocol is "grpc" (default, OTLP/gRPC) or "http" (OTLP/HTTP protobuf).
	Protocol string `yaml:"protocol"`
	// Endpoint is the collector or backend address, host:port (gRPC default port 4317, HTTP 4318). Required when
	// enabled.
	Endpoint string `yaml:"endpoint"`
	// URLPath is the OTLP/HTTP path (default /v1/traces); not used with gRPC.
	URLPath string `yaml:"url_path"`
	// TLS encrypts and verifies the connection (default off: plaintext, e.g. to a collector sidecar on loopback): the
	// same `tls:` block as the Kafka and ClickHouse settings, CA and client certificate re-read when they rotate.
	TLS tlsconf.Config `yaml:"tls"`
	// Headers are sent with every export (an API key, a tenant id).
	Headers map[string]string `yaml:"headers"`
	// Compression is "gzip" (default) or "none".
	Compression string `yaml:"compression"`
	// Timeout bounds one export call, retries included (default 10s). Past it the batch is counted as failed.
	Timeout time.Duration `yaml:"timeout"`
	// QueueSize is how many ended spans may wait for export (default 8192); beyond it spans are dropped, counted.
	QueueSize int `yaml:"queue_size"`
	// BatchSize is the most spans one export carries (default 512); BatchTimeout the longest a span waits for its
	// batch to fill (default 1s).
	BatchSize    int           `yaml:"batch_size"`
	BatchTimeout time.Duration `yaml:"batch_timeout"`
	// ServiceName is the service.name resource attribute of Tidemark's spans (default "tidemark").
	ServiceName string `yaml:"service_name"`
}

// SetDefaults fills zero fields with their documented defaults.
func (c *Config) SetDefaults() {
	if c.Protocol == "" {
		c.Protocol = "grpc"
	}
	if c.URLPath == "" {
		c.URLPath = "/v1/traces"
	}
	if c.Compression == "" {
		c.Compression = "gzip"
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.QueueSize == 0 {
		c.QueueSize = 8192
	}
	if c.BatchSize == 0 {
		c.BatchSize = 512
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = time.Second
	}
	if c.ServiceName == "" {
		c.ServiceName = "tidemark"
	}
}

// Validate reports every invalid field, each naming its key under "tracing.".
func (c *Config) Validate() error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tracing.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	switch c.Protocol {
	case "grpc", "http":
	default:
		bad("protocol", "%q is not one of grpc, http", c.Protocol)
	}
	if c.Endpoint == "" {
		bad("endpoint", "required when tracing is enabled (host:port of an OTLP receiver)")
	} else if _, port, err := net.SplitHostPort(c.Endpoint); err != nil || port == "" {
		bad("endpoint", "want host:port (e.g. otel-collector:4317), got %q", c.Endpoint)
	}
	if !strings.HasPrefix(c.URLPath, "/") {
		bad("url_path", "must start with /, got %q", c.URLPath)
	}
	switch c.Compression {
	case "gzip", "none":
	default:
		bad("compression", "%q is not one of gzip, none", c.Compression)
	}
	if c.Timeout <= 0 {
		bad("timeout", "must be > 0, got %v", c.Timeout)
	}
	if c.QueueSize < 1 || c.QueueSize > 1<<20 {
		bad("queue_size", "must be in [1, 1048576], got %d", c.QueueSize)
	}
	if c.BatchSize < 1 || c.BatchSize > c.QueueSize {
		bad("batch_size", "must be in [1, queue_size (%d)], got %d", c.QueueSize, c.BatchSize)
	}
	if c.BatchTimeout <= 0 {
		bad("batch_timeout", "must be > 0, got %v", c.BatchTimeout)
	}
	if err := c.TLS.Validate("tracing.tls"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
