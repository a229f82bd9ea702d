package lagapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

var update = flag.Bool("update", false, "rewrite golden files")

// fixedSource is a cluster whose latest snapshot is s (nil: no cycle yet).
type fixedSource struct{ s *lagexporter.Snapshot }

func (f fixedSource) Latest() *lagexporter.Snapshot { return f.s }

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// part builds a group-partition: committed < 0 means no commit.
func part(topic string, p int32, committed, end int64, st lagexporter.Status, flags lagexporter.Flags) lagexporter.PartitionLag {
	pl := lagexporter.PartitionLag{Topic: topic, Partition: p, Known: true, TimeLagKnown: true, Status: st, End: end, Flags: flags}
	start := int64(0)
	if committed >= 0 {
		pl.HasCommit, pl.Committed, start = true, committed, committed
		pl.CommitTime = t0.Add(-time.Duration(end-committed) * time.Second)
	} else {
		pl.Flags |= lagexporter.FlagNoCommit
	}
	pl.Lag, pl.RawLag = end-start, end-start
	pl.TimeLag = time.Duration(end-start) * time.Second
	if flags.Has(lagexporter.FlagStale) {
		pl.Known, pl.TimeLagKnown, pl.Lag, pl.RawLag, pl.TimeLag = false, false, 0, 0, 0
	}
	return pl
}

func group(name string, st lagexporter.Status, members []lagexporter.Member, parts ...lagexporter.PartitionLag) lagexporter.GroupLag {
	g := lagexporter.GroupLag{Group: name, GroupType: lagexporter.GroupClassic, State: "Stable", Status: st, Members: members,
		Partitions: parts}
	for i := range parts {
		g.Total.Add(&parts[i])
	}
	g.Total.Complete = g.Total.Unknown == 0
	return g
}

// testSnapshots: cluster prod has a lagging group with an owner per partition, a stopped group with a stale
// partition and a partition without a commit, and a group whose name holds a slash; cluster dr has one healthy group.
func testSnapshots() (prod, dr *lagexporter.Snapshot) {
	members := []lagexporter.Member{
		{MemberID: "m-1", ClientID: "billing-1", Host: "/10.0.0.1", Assignment: map[string][]int32{"orders": {0}}},
		{MemberID: "m-2", ClientID: "billing-2", Host: "/10.0.0.2", Assignment: map[string][]int32{"orders": {1, 2}}},
	}
	prod = &lagexporter.Snapshot{Cluster: "prod", Time: t0, Seq: 42, Groups: []lagexporter.GroupLag{
		group("billing", lagexporter.StatusWarn, members,
			part("orders", 0, 100, 100, lagexporter.StatusOK, 0),
			part("orders", 1, 90, 130, lagexporter.StatusWarn, 0),
			part("orders", 2, 80, 95, lagexporter.StatusOK, 0)),
		group("reports", lagexporter.StatusStop, nil,
			part("orders", 0, 10, 100, lagexporter.StatusStop, 0),
			part("orders", 1, 20, 130, lagexporter.StatusStop, lagexporter.FlagStale),
			part("orders", 2, -1, 95, lagexporter.StatusStop, 0)), // no commit: not in Burrow's view
		group("team/etl", lagexporter.StatusRewind, nil,
			part("payments", 0, 5, 7, lagexporter.StatusRewind, lagexporter.FlagReplay)),
	}, Topics: []lagexporter.TopicObservation{
		{Topic: "orders", Partitions: []lagexporter.PartitionObservation{
			{Partition: 2, HighWatermark: 95}, {Partition: 0, HighWatermark: 100}, {Partition: 1, HighWatermark: 130}}},
		{Topic: "payments", Partitions: []lagexporter.PartitionObservation{
			{Partition: 0, HighWatermark: 7}, {Partition: 2, Error: "no leader", ErrorCode: "LEADER_NOT_AVAILABLE"}}},
	}}
	dr = &lagexporter.Snapshot{Cluster: "dr", Time: t0.Add(time.Second), Seq: 7, Groups: []lagexporter.GroupLag{
		group("billing", lagexporter.StatusOK, nil, part("orders", 0, 50, 50, lagexporter.StatusOK, 0)),
	}}
	return prod, dr
}

func testHandler() *Handler {
	prod, dr := testSnapshots()
	h := NewHandler("tidemark-0")
	h.Add(Cluster{Name: "prod", Brokers: []string{"k1:9092", "k2:9092"}, PollInterval: 30 * time.Second, Source: fixedSource{prod}})
	h.Add(Cluster{Name: "dr", Brokers: []string{"dr1:9092"}, PollInterval: 10 * time.Second, Source: fixedSource{dr}})
	h.Add(Cluster{Name: "new", Brokers: []string{"n1:9092"}, PollInterval: 10 * time.Second, Source: fixedSource{}})
	return h
}

func get(t *testing.T, h http.Handler, path string) (int, []byte) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Errorf("%s: invalid JSON %s", path, rec.Body.Bytes())
	}
	return rec.Code, rec.Body.Bytes()
}

// TestGolden compares each endpoint's response with its golden file (go test -update rewrites them). The golden
// files are indented for review; the comparison is of the compact form.
func TestGolden(t *testing.T) {
	h := testHandler()
	for _, tc := range []struct {
		name, path string
		code       int
	}{
		{"lag_all", "/api/v1/lag", 200}, // every cluster; "new" has no snapshot yet and says so
		{"lag_prod_stop", "/api/v1/lag?cluster=prod&status=stop", 200},
		{"lag_group_two_clusters", "/api/v1/lag?group=billing", 200},               // the same group name in both clusters
		{"lag_group_status_mismatch", "/api/v1/lag?group=billing&status=ERR", 200}, // exists, no match: empty, not 404
		{"burrow_clusters", "/v3/kafka", 200},
		{"burrow_cluster", "/v3/kafka/prod", 200},
		{"burrow_consumers", "/v3/kafka/prod/consumer", 200},
		{"burrow_status", "/v3/kafka/prod/consumer/billing/status", 200}, // only the WARN partition listed
		{"burrow_lag", "/v3/kafka/prod/consumer/billing/lag", 200},
		{"burrow_lag_stopped", "/v3/kafka/prod/consumer/reports/lag", 200},  // STOP is ERR; the stale partition incomplete
		{"burrow_lag_slash", "/v3/kafka/prod/consumer/team%2Fetl/lag", 200}, // REWIND partition, WARN group
		{"burrow_notfound", "/v3/kafka/prod/consumer/nobody/status", 404},
		{"burrow_notfound_cluster", "/v3/kafka/nowhere/consumer/billing/lag", 404},
		{"burrow_topics", "/v3/kafka/prod/topic", 200},
		{"burrow_topic", "/v3/kafka/prod/topic/payments", 200}, // partition 1 not measured, 2 unreadable: -1
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.path)
			if code != tc.code {
				t.Errorf("%s: %d, want %d: %s", tc.path, code, tc.code, body)
			}
			golden := filepath.Join("testdata", tc.name+".json")
			var indented bytes.Buffer
			if err := json.Indent(&indented, body, "", "  "); err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(golden, indented.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			var compact bytes.Buffer
			if err := json.Compact(&compact, want); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(string(body)); got != compact.String() {
				t.Errorf("%s:\n got %s\nwant %s", tc.path, got, compact.String())
			}
		})
	}
}

// TestErrors: every request the API refuses, with its code and message.
func TestErrors(t *testing.T) {
	h := testHandler()
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{"/api/v1/lag?status=LATE", 400, `status \"LATE\" is not one of OK, REWIND, AHEAD, WARN, STALL, STOP, ERR`},
		{"/api/v1/lag?groups=billing", 400, `unknown parameter \"groups\"`}, // a misspelt filter is not ignored
		{"/api/v1/lag?cluster=nowhere", 404, `no cluster \"nowhere\"`},
		{"/api/v1/lag?cluster=prod&group=nobody", 404, "no group nobody"},
		// not 404: cluster new has no snapshot yet, so the group may yet exist there
		{"/api/v1/lag?group=nobody", 200, `"groups":[]`},
		{"/api/v1/lag?cluster=new", 503, "no poll cycle has completed yet"},
		{"/v3/kafka/nowhere", 404, "cluster module not found"},
		{"/v3/kafka/nowhere/consumer", 404, "cluster not found"},
		{"/v3/kafka/new/consumer", 503, "no poll cycle has completed yet"},
		{"/v3/kafka/new/consumer/billing/lag", 503, "no poll cycle has completed yet"},
		{"/v3/kafka/prod/topic/nothing", 404, "cluster or topic not found"},
		{"/v3/kafka/prod/consumer/billing", 404, "no such endpoint"}, // Burrow's consumer detail is not served
	} {
		code, body := get(t, h, tc.path)
		if code != tc.code || !strings.Contains(string(body), tc.msg) {
			t.Errorf("%s: %d %s, want %d with %q", tc.path, code, body, tc.code, tc.msg)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/lag", io.NopCloser(strings.NewReader(""))))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /api/v1/lag: %d, want 405", rec.Code)
	}
}

// TestStatusNames: Tidemark's statuses as Burrow names them, per partition and per group. One row per status.
func TestStatusNames(t *testing.T) {
	for _, tc := range []struct {
		s                lagexporter.Status
		partition, group string
	}{
		{lagexporter.StatusOK, "OK", "OK"},
		{lagexporter.StatusRewind, "REWIND", "WARN"}, // Burrow would say ERR (REWIND > ERR); Tidemark ranks it below WARN
		{lagexporter.StatusAhead, "WARN", "WARN"},    // Burrow has no AHEAD: the group will skip records
		{lagexporter.StatusWarn, "WARN", "WARN"},
		{lagexporter.StatusStall, "STALL", "ERR"}, // Burrow's group status caps STALL and STOP at ERR
		{lagexporter.StatusStop, "STOP", "ERR"},
		{lagexporter.StatusErr, "ERR", "ERR"},
	} {
		if got := BurrowPartitionStatusName(tc.s); got != tc.partition {
			t.Errorf("partition %s: %s, want %s", tc.s, got, tc.partition)
		}
		if got := BurrowGroupStatusName(tc.s); got != tc.group {
			t.Errorf("group %s: %s, want %s", tc.s, got, tc.group)
		}
	}
	if len(lagexporter.StatusNames) != 7 {
		t.Errorf("%d statuses, the table has 7: map the new one", len(lagexporter.StatusNames))
	}
}

// TestLatestPerRequest: each request reads the source's latest snapshot, so a new cycle is served at once.
func TestLatestPerRequest(t *testing.T) {
	prod, _ := testSnapshots()
	src := &switchSource{}
	h := NewHandler("h")
	h.Add(Cluster{Name: "prod", Source: src})
	if code, _ := get(t, h, "/v3/kafka/prod/consumer/billing/lag"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first snapshot: %d, want 503", code)
	}
	src.s = prod
	_, body := get(t, h, "/v3/kafka/prod/consumer/billing/lag")
	var r BurrowConsumerStatus
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status.TotalLag != 55 { // 0 + 40 + 15
		t.Errorf("totallag %d, want 55", r.Status.TotalLag)
	}
	next := *prod
	next.Groups = next.Groups[1:] // billing was deleted
	src.s = &next
	if code, _ := get(t, h, "/v3/kafka/prod/consumer/billing/lag"); code != http.StatusNotFound {
		t.Errorf("after the group is gone: %d, want 404", code)
	}
}

type switchSource struct{ s *lagexporter.Snapshot }

func (s *switchSource) Latest() *lagexporter.Snapshot { return s.s }
