package tracing

import (
	"testing"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestMetricsDocAgrees: docs/metrics.md's trace-export table lists exactly what NewProvider registers, and promlint
// finds nothing wrong with it.
func TestMetricsDocAgrees(t *testing.T) {
	reg := testenv.NewDescribedRegistry()
	p, err := NewProvider(Config{Enabled: true, Endpoint: "127.0.0.1:1"}, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(t.Context())
	testenv.MetricsDocAgrees(t, "../../docs/metrics.md", "tracing", reg)
}
