package benchproc

import (
	"os"
	"strings"
	"testing"
)

const exposition = `# HELP tidemark_lag_exporter_active 1 while active.
# TYPE tidemark_lag_exporter_active gauge
tidemark_lag_exporter_active{cluster="a"} 1
tidemark_lag_exporter_active{cluster="b"} 0
# TYPE tidemark_collector_rows_acked_total counter
tidemark_collector_rows_acked_total{path="receipts"} 1200
tidemark_collector_rows_acked_total{path="probe"} 30
`

func TestFamilies(t *testing.T) {
	f, err := ParseText(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		match map[string]string
		v     float64
		ok    bool
	}{
		{"tidemark_lag_exporter_active", map[string]string{"cluster": "a"}, 1, true},
		{"tidemark_lag_exporter_active", map[string]string{"cluster": "b"}, 0, true},
		{"tidemark_lag_exporter_active", map[string]string{"cluster": "c"}, 0, false},
		{"tidemark_lag_exporter_active", map[string]string{"other": "a"}, 0, false},
		{"tidemark_collector_rows_acked_total", nil, 1230, true}, // every series: the sum
		{"tidemark_collector_rows_acked_total", map[string]string{"path": "receipts"}, 1200, true},
		{"absent", nil, 0, false},
	} {
		if v, ok := f.Value(c.name, c.match); v != c.v || ok != c.ok {
			t.Errorf("Value(%s, %v) = %v, %v; want %v, %v", c.name, c.match, v, ok, c.v, c.ok)
		}
	}
	seen := map[string]float64{}
	f.Each("tidemark_lag_exporter_active", func(l map[string]string, v float64) { seen[l["cluster"]] = v })
	if len(seen) != 2 || seen["a"] != 1 || seen["b"] != 0 {
		t.Fatalf("Each: %v", seen)
	}
}

func TestStatusMB(t *testing.T) {
	v, err := StatusMB(os.Getpid(), "VmHWM")
	if err != nil || v <= 0 {
		t.Fatalf("VmHWM of this process: %v, %v", v, err)
	}
	if _, err := StatusMB(os.Getpid(), "NoSuchField"); err == nil {
		t.Fatal("a missing field gave no error")
	}
}

func TestCleanEnv(t *testing.T) {
	t.Setenv("TIDEMARK_KAFKA_BROKERS", "x:1")
	for _, kv := range CleanEnv() {
		if strings.HasPrefix(kv, "TIDEMARK_") {
			t.Fatalf("CleanEnv kept %s", kv)
		}
	}
}
