package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/testenv"
)

func runLag(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newLagCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestLagEvalTable(t *testing.T) {
	out, err := runLag(t, "eval", "../../lagexporter/timeline/testdata/c01_transactions.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// C01: g1 committed 5, End 6, effective lag 0 with the control_records flag; nothing unconsumed, so no retention
	// margin, and caught up.
	want := []string{"GROUP", "g1", "classic", "tx-orders", "-", "0", "5", "6", "0", "0.000s", "-", "0s", "OK", "control_records"}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "g1 ") {
			if got := strings.Fields(line); strings.Join(got, " ") != strings.Join(want[1:], " ") {
				t.Fatalf("g1 row = %q, want %q", got, want[1:])
			}
			return
		}
	}
	t.Fatalf("no g1 row in:\n%s", out)
}

func TestLagEvalJSONAndBadLine(t *testing.T) {
	out, err := runLag(t, "eval", "-o", "json", "../../lagexporter/timeline/testdata/c05_log_start.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"expired_offsets":7750000`) || !strings.Contains(out, `"lag":300`) {
		t.Fatalf("json output lacks C05's numbers:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"time\":\"2026-11-29T12:00:00Z\"}\n{\"time\":\"2026-11-29T12:00:01Z\",\"grups\":[]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runLag(t, "eval", bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:2") {
		t.Fatalf("err = %v, want one naming bad.jsonl:2", err)
	}
	if _, err := runLag(t, "eval", "-o", "yaml", bad); err == nil || !strings.Contains(err.Error(), "--output") {
		t.Fatalf("err = %v, want an --output error", err)
	}
}

func TestLagUnknownGroup(t *testing.T) {
	brokers := strings.Join(testenv.Kafka(t), ",")
	_, err := runLag(t, "--brokers", brokers, "--group", "no-such-group-4f1c")
	if err == nil || !strings.Contains(err.Error(), "unknown consumer group") || !strings.Contains(err.Error(), "no-such-group-4f1c") {
		t.Fatalf("err = %v, want an unknown-group error naming the pattern", err)
	}
}

// TestLagConfigErrors: bad flags and bad timeline config lines fail before any cluster read, naming what the user typed.
func TestLagConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	obs := `{"time":"2026-11-29T12:00:00Z"}` + "\n"
	tests := []struct {
		name string
		args []string
		want string
	}{
		// a negative --timeout is an error, not silently replaced by the default
		{"negative timeout", []string{"--brokers", "127.0.0.1:1", "--timeout", "-1s"}, "--timeout: must be > 0, got -1s"},
		{"zero timeout", []string{"--brokers", "127.0.0.1:1", "--timeout", "0s"}, "--timeout: must be > 0, got 0s"},
		// a zero interval must not reach time.NewTicker, which panics
		{"record zero interval", []string{"record", "--brokers", "127.0.0.1:1", "--out", filepath.Join(dir, "r.jsonl"), "--interval", "0s"}, "--interval: must be > 0, got 0s"},
		{"record negative count", []string{"record", "--brokers", "127.0.0.1:1", "--out", filepath.Join(dir, "r.jsonl"), "--count", "-1"}, "--count: must be >= 0"},
		// the pattern as typed, named by its flag
		{"bad --group", []string{"eval", "--group", "app-(.*", write("ok.jsonl", obs)}, "--group \"app-(.*\": error parsing regexp: missing closing ): `app-(.*`"},
		// QA: timeline config-line errors name file:line and the key as written in the line (docs/lag-timeline.md)
		{"timeline bad regexp", []string{"eval", write("re.jsonl", `{"config":{"groups":[{"match":"app-(.*"}]}}`+"\n"+obs)},
			"re.jsonl:1: config: groups[0].match: error parsing regexp: missing closing ): `app-(.*`"},
		{"timeline status_window 1", []string{"eval", write("w.jsonl", "# note\n"+`{"config":{"status_window":1}}`+"\n"+obs)},
			"w.jsonl:2: config: status_window: must be >= 2, got 1"},
		{"timeline granularity", []string{"eval", write("g.jsonl", `{"config":{"granularity":"cluster"}}`+"\n"+obs)},
			`g.jsonl:1: config: granularity: "cluster" is not one of partition, partition_lag, topic`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runLag(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestLagEvalRetentionAndCatchUpColumns: the table shows the retention margin and the catch-up estimate, and the
// JSON output carries them with the other anomaly fields.
func TestLagEvalRetentionAndCatchUpColumns(t *testing.T) {
	row := func(out, group, topic string) []string { // the last poll's row of group on topic
		var last []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 2 && f[0] == group && f[2] == topic {
				last = f
			}
		}
		return last
	}
	out, err := runLag(t, "eval", "../../lagexporter/timeline/testdata/i11_retention.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	// the last poll (12:02): retention deleted up to 1800, which is 57 m 40 s old under a 1 h retention; 200 records
	// (400,000 bytes) unconsumed under a retention.bytes of 1,000,000
	if got := row(out, "g", "r"); len(got) < 10 || got[9] != "2m20s,600000B" {
		t.Fatalf("g/r row %q, want RETENTION-LEFT 2m20s,600000B", got)
	}
	out, err = runLag(t, "eval", "../../lagexporter/timeline/testdata/i12_catch_up.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if got := row(out, "drain", "q"); len(got) < 11 || got[10] != "5m0s" {
		t.Fatalf("drain row %q, want CATCH-UP 5m0s", got)
	}
	if got := row(out, "behind", "q"); len(got) < 11 || got[10] != "never" {
		t.Fatalf("behind row %q, want CATCH-UP never", got)
	}
	out, err = runLag(t, "eval", "-o", "json", "../../lagexporter/timeline/testdata/i12_catch_up.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"catch_up":{"state":"draining","eta":300000000000,"drain_rate":2}`, `"state":"not_draining"`,
		`"complete":true`, `"unread_records_deleted":0`} {
		if !strings.Contains(out, want) {
			t.Errorf("json output lacks %s", want)
		}
	}
}

// TestLagEvalGroupTypes: the table names each group's type and a streams topic's subtopology; the JSON carries
// group_type on every group, so a script reading groups[].group and groups[].partitions[].lag reads every type alike.
func TestLagEvalGroupTypes(t *testing.T) {
	out, err := runLag(t, "eval", "../../lagexporter/timeline/testdata/g01_group_types.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 13 && f[0] != "GROUP" {
			rows[f[0]+" "+f[2]+"/"+f[4]] = strings.Join(f[1:], " ")
		}
	}
	// the last poll of the timeline wins (rows are overwritten poll by poll)
	for key, want := range map[string]string{
		"app app-count-repartition/0": "streams app-count-repartition 1/internal 0 3 5 2 90.000s - never STALL lower_bound,estimated",
		"app clicks/0":                "streams clicks 0 0 12 12 0 0.000s - 0s OK -",
		"workers jobs/0":              "share jobs - 0 100 170 60 90.000s - never STOP lower_bound,estimated",
		"orders-848 clicks/0":         "consumer clicks - 0 10 12 2 90.000s - never STALL lower_bound,estimated",
	} {
		if rows[key] != want {
			t.Errorf("%s row = %q, want %q", key, rows[key], want)
		}
	}
	js, err := runLag(t, "eval", "-o", "json", "../../lagexporter/timeline/testdata/g01_group_types.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(js), "\n")
	var snap struct {
		Groups []struct {
			Group      string `json:"group"`
			GroupType  string `json:"group_type"`
			Partitions []struct {
				Lag int64 `json:"lag"`
			} `json:"partitions"`
		} `json:"groups"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &snap); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var lag int64
	for _, g := range snap.Groups {
		got[g.Group] = g.GroupType
		for _, p := range g.Partitions {
			lag += p.Lag
		}
	}
	want := map[string]string{"app": "streams", "legacy-share": "share", "orders-848": "consumer", "workers": "share"}
	if !maps.Equal(got, want) || lag != 2+50+2+80 {
		t.Fatalf("group types %v, total lag %d; want %v, 134", got, lag, want)
	}
}
