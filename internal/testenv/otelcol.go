package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// OTelCollector starts an OpenTelemetry Collector of the test's own and returns its OTLP/HTTP traces endpoint
// (http://127.0.0.1:port/v1/traces). The binary is the stack's Jaeger (TIDEMARK_OTELCOL_BIN, exported by
// deploy/local/jaeger.sh while Jaeger runs): Jaeger v2 is an OpenTelemetry Collector distribution that includes the
// contrib Kafka exporter. Its one traces pipeline is otlp (HTTP) → batch → the Kafka exporter, writing
// ExportTraceServiceRequest protobufs (encoding otlp_proto, trace id as the record key) into topic on brokers, and,
// when forward (host:port) is set, also OTLP/gRPC to forward, e.g. the stack's Jaeger. The process is stopped when
// the test ends; a pipeline that does not come up fails the test with the collector's log.
func OTelCollector(t testing.TB, brokers []string, topic, forward string) string {
	t.Helper()
	bin := requireStartedBy(t, "TIDEMARK_OTELCOL_BIN", "the OpenTelemetry Collector (the stack's Jaeger binary)",
		"`eval \"$(bash deploy/local/stack.sh up --jaeger)\"` in this shell")
	port := FreePort(t)
	exporters := "[kafka]"
	fwd := ""
	if forward != "" {
		exporters = "[kafka, otlp/forward]"
		fwd = fmt.Sprintf("  otlp/forward:\n    endpoint: %s\n    tls:\n      insecure: true\n", forward)
	}
	cfg := fmt.Sprintf(`service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: %s
  telemetry:
    metrics:
      level: none
    logs:
      level: info
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  kafka:
    brokers: [%s]
    partition_traces_by_id: true
    traces:
      topic: %s
      encoding: otlp_proto
%s`, exporters, port, strings.Join(brokers, ", "), topic, fwd)
	dir := t.TempDir()
	path := filepath.Join(dir, "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := StartProcess(t, "otelcol", nil, bin, "--config", path)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the OpenTelemetry Collector's log:\n%s", p.Stderr())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			return fmt.Errorf("the OpenTelemetry Collector exited: %s", p.Stderr())
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return fmt.Errorf("its OTLP/HTTP receiver on %s does not accept connections yet: %v", addr, err)
		}
		return c.Close()
	})
	return "http://" + addr + "/v1/traces"
}
