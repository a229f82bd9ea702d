package benchproc

import (
	"strings"
	"testing"
	"time"
)

func TestSnapshotReadsFrom(t *testing.T) {
	f, err := ParseText(strings.NewReader(`# TYPE tidemark_lag_exporter_snapshot_timestamp_seconds gauge
tidemark_lag_exporter_snapshot_timestamp_seconds{cluster="a"} 1000.5
# TYPE tidemark_lag_exporter_cycle_duration_seconds gauge
tidemark_lag_exporter_cycle_duration_seconds{cluster="a"} 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	// the reads finished at 1000.5 and took 0.25 s: they began at 1000.25
	if from, ok := SnapshotReadsFrom(f, "a"); !ok || !from.Equal(time.Unix(1000, 250e6)) {
		t.Fatalf("SnapshotReadsFrom = %v, %v; want 1000.25 s", from, ok)
	}
	if _, ok := SnapshotReadsFrom(f, "b"); ok {
		t.Fatal("no snapshot of cluster b must not be ok")
	}
}
