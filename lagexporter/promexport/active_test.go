package promexport

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestStandbyServesHealthOnly: over a lagexporter.ActiveSource, the active replica serves the snapshot's lag series
// and tidemark_lag_exporter_active 1; the standby serves 0 and the health series, no lag series; a replica without
// an election is always active.
func TestStandbyServesHealthOnly(t *testing.T) {
	c, snap := caseCollector(t, "c06_no_commit.jsonl", 0, nil)
	src := fixedSource{snap}
	for _, tc := range []struct {
		name     string
		activity func() *Activity
		active   float64
		lag      bool
	}{
		{"no election", func() *Activity { return NewActivity(false) }, 1, true},
		{"elected, before the lease", func() *Activity { return NewActivity(true) }, 0, false},
		{"elected, holding the lease", func() *Activity { a := NewActivity(true); a.Set(true); return a }, 1, true},
		{"elected, lease lost", func() *Activity { a := NewActivity(true); a.Set(true); a.Set(false); return a }, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(NewCollector(c.cfg, ActiveSource{Loop: src, Activity: tc.activity()}))
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for _, mf := range mfs {
				got[mf.GetName()] = true
			}
			if !got["tidemark_lag_exporter_cycles_total"] {
				t.Fatal("health series missing")
			}
			if got["tidemark_lag_partition_offsets"] != tc.lag || got["tidemark_lag_group_status"] != tc.lag {
				t.Fatalf("lag series served: %v, want %v", got["tidemark_lag_partition_offsets"], tc.lag)
			}
			want := "# HELP tidemark_lag_exporter_active " + c.f.active.help + "\n# TYPE tidemark_lag_exporter_active gauge\n" +
				`tidemark_lag_exporter_active{cluster="` + c.cfg.Cluster + `"} ` + map[float64]string{0: "0", 1: "1"}[tc.active] + "\n"
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "tidemark_lag_exporter_active"); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A plain source (no ActiveReporter) has no active series: bare collectors in tests and benchmarks stay as they were.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(c.cfg, src))
	if n, err := testutil.GatherAndCount(reg, "tidemark_lag_exporter_active"); err != nil || n != 0 {
		t.Fatalf("plain source: %d active series (%v), want 0", n, err)
	}
}

// TestHandlerFollowsActivity: the pre-rendering Handler renders again when the replica turns standby or active,
// without waiting for the next snapshot.
func TestHandlerFollowsActivity(t *testing.T) {
	c, snap := caseCollector(t, "c06_no_commit.jsonl", 0, nil)
	a := NewActivity(true)
	h := NewHandler(NewCollector(c.cfg, ActiveSource{Loop: fixedSource{snap}, Activity: a}), nil)
	scrape := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	activeLine := `tidemark_lag_exporter_active{cluster="` + c.cfg.Cluster + `"} `
	for _, step := range []struct {
		active bool
		want   string
	}{{false, "0"}, {true, "1"}, {false, "0"}} {
		a.Set(step.active)
		body := scrape()
		if !strings.Contains(body, activeLine+step.want+"\n") {
			t.Fatalf("active %v: exposition lacks %q", step.active, activeLine+step.want)
		}
		if got := strings.Contains(body, "tidemark_lag_partition_offsets{"); got != step.active {
			t.Fatalf("active %v: lag series served %v", step.active, got)
		}
	}
}
