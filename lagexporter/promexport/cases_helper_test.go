package promexport

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// caseDir holds the public-case timelines (asserted by lagexporter/timeline/cases_test.go); the collector's tests
// render the snapshots they evaluate to.
const caseDir = "../timeline/testdata"

// caseConfig is the exporter config a timeline asks for, validated.
func caseConfig(t *testing.T, tl *timeline.Timeline) *lagexporter.Config {
	t.Helper()
	cfg := &lagexporter.Config{Cluster: "test"}
	if err := tl.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// evalCase replays caseDir/name through timeline.Eval and returns one snapshot per line.
func evalCase(t *testing.T, name string) []*lagexporter.Snapshot {
	t.Helper()
	tl, err := timeline.ReadFile(filepath.Join(caseDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*lagexporter.Snapshot
	if err := timeline.Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *lagexporter.Snapshot) error {
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
