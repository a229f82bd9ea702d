package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/collector"
)

// TestMetricsHandlerServesExemplars: a scraper that accepts OpenMetrics (Prometheus does) gets the live latency
// histogram's trace-id exemplars; the classic text format, which cannot carry them, still works.
func TestMetricsHandlerServesExemplars(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := collector.NewMetrics(reg)
	m.E2ELatency.WithLabelValues("g", "orders").(prometheus.ExemplarObserver).
		ObserveWithExemplar(0.12, prometheus.Labels{"trace_id": "0af7651916cd43dd8448eb211c80319c"})
	srv := httptest.NewServer(metricsHandler(reg))
	defer srv.Close()
	get := func(accept string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Content-Type"), string(b)
	}
	ct, body := get("application/openmetrics-text;version=1.0.0")
	want := `tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.25"} 1 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 0.12`
	if !strings.HasPrefix(ct, "application/openmetrics-text") || !strings.Contains(body, want) {
		t.Fatalf("OpenMetrics scrape (%s) lacks %q:\n%s", ct, want, body)
	}
	ct, body = get("text/plain")
	if !strings.HasPrefix(ct, "text/plain") || !strings.Contains(body, `tidemark_e2e_latency_seconds_bucket{group="g",topic="orders",le="0.25"} 1`) {
		t.Fatalf("text scrape (%s):\n%s", ct, body)
	}
}
