package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/testenv"
)

// recorder is a driver.Conn that records each query with its arguments instead of running it.
type recorder struct {
	driver.Conn // nil: only Query and QueryRow are called
	sql         []string
	args        [][]any
}

var errRecorded = errors.New("recorded")

func (r *recorder) Query(_ context.Context, sql string, args ...any) (driver.Rows, error) {
	r.sql, r.args = append(r.sql, sql), append(r.args, args)
	return nil, errRecorded
}

type errRow struct{}

func (errRow) Err() error           { return errRecorded }
func (errRow) Scan(...any) error    { return errRecorded }
func (errRow) ScanStruct(any) error { return errRecorded }

func (r *recorder) QueryRow(_ context.Context, sql string, args ...any) driver.Row {
	r.sql, r.args = append(r.sql, sql), append(r.args, args)
	return errRow{}
}

// inline writes args into sql's ? placeholders as ClickHouse literals, for engines clickhouse-go cannot reach.
func inline(t *testing.T, sql string, args []any) string {
	t.Helper()
	var b strings.Builder
	n := 0
	inString := false
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\'':
			inString = !inString
			b.WriteByte(c)
		case c == '?' && !inString:
			if n >= len(args) {
				t.Fatalf("more placeholders than args in %s", sql)
			}
			b.WriteString(literal(t, args[n]))
			n++
		default:
			b.WriteByte(c)
		}
	}
	if n != len(args) {
		t.Fatalf("%d placeholders, %d args in %s", n, len(args), sql)
	}
	return b.String()
}

func literal(t *testing.T, v any) string {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "'" + strings.ReplaceAll(strings.ReplaceAll(x, `\`, `\\`), "'", `\'`) + "'"
	case []string:
		parts := make([]string, len(x))
		for i, s := range x {
			parts[i] = literal(t, s)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	t.Fatalf("no literal for %T", v)
	return ""
}

// TestQueriesOnCurrentClickHouse runs every read query on chDB (a current ClickHouse engine, 26.x) over the modern
// dialect's schema, which users' 23.x–26.x servers get: the real-server tests cover 18.16 only. Rows are stamped
// now() (the modern tables' TTL would drop older parts), so the window is the hour either side of now. Needs node and
// internal/store/chdbtest's node_modules (make test installs them); under CI=true their absence fails the test.
func TestQueriesOnCurrentClickHouse(t *testing.T) {
	chdbDir := filepath.Join("..", "chdbtest")
	testenv.ChDB(t, chdbDir)

	now := time.Now().UTC()
	w := Window{From: now.Add(-time.Hour), To: now.Add(time.Hour), Step: 2 * time.Hour}
	rec := &recorder{}
	r := NewReader(rec)
	ctx := context.Background()
	f := Filter{Topics: []string{"t"}, Groups: []string{"g"}, Hosts: []string{"c1"}}
	type named struct {
		name string
		call func()
		want string // CSV answer; "" means only "must run"
	}
	calls := []named{
		// two live rows of e2e 60 ms and one replay of 6000 ms: the replay is left out, so every percentile is 60
		{"percentiles raw", func() {
			_, _ = r.StagePercentiles(ctx, PercentileQuery{Window: w, Stage: StageE2E, Levels: []float64{0.5, 0.99}, GroupBy: DimTopic, Filter: f, Source: SourceRaw})
		}, ""},
		{"percentiles rollup", func() {
			_, _ = r.StagePercentiles(ctx, PercentileQuery{Window: w, Stage: StageE2E, Levels: []float64{0.5, 0.99}, GroupBy: DimHost, Filter: f, Source: SourceRollup})
		}, ""},
		{"percentiles rollup_1h", func() {
			_, _ = r.StagePercentiles(ctx, PercentileQuery{Window: w, Stage: StageE2E, Levels: []float64{0.5, 0.99}, GroupBy: DimHost, Filter: f, Source: SourceRollup1h})
		}, ""},
		{"distribution", func() {
			_, _, _ = r.Distribution(ctx, DistributionQuery{Window: w, Stage: StageReceiveProcess, Filter: f, Source: SourceRollup})
		}, ""},
		{"lag", func() { _, _ = r.ConsumerLag(ctx, LagQuery{Window: w, GroupBy: DimGroup, Filter: f}) }, ""},
		{"slo", func() { _, _ = r.SLO(ctx, SLOQuery{Window: w, ThresholdMs: 100, GroupBy: DimTopic, Filter: f}) }, ""},
		{"slowest", func() {
			_, _ = r.Slowest(ctx, SlowestQuery{Window: w, Stage: StageE2E, Filter: f, Limit: 5, IncludeReplays: true})
		}, ""},
		{"clock offsets", func() { _, _ = r.ClockOffsets(ctx, ClockOffsetQuery{Window: w, Hosts: []string{"c1"}}) }, ""},
		{"probe health", func() { _, _ = r.ProbeHealth(ctx, ProbeQuery{Window: w, Brokers: []string{"1"}}) }, ""},
		{"list hosts", func() { _, _ = r.List(ctx, ListQuery{Kind: ListHosts, Since: w.From}) }, ""},
		{"list groups", func() {
			_, _ = r.List(ctx, ListQuery{Kind: ListGroups, Since: w.From, Filter: Filter{Topics: []string{"t"}}})
		}, ""},
		{"schema version", func() { _, _ = r.SchemaVersion(ctx) }, ""},
	}
	// The script replaces {bucket} with the 2-hour bucket of the rows it inserted, read from chDB's own clock.
	ts := "{bucket}"
	// The rows are written without their stage intervals, so each reads as [0, +Inf): the band's lower percentiles
	// are 0, the upper ones the unbounded sentinel (1e30), and both samples count as unbounded; for the SLO, neither
	// is good for the minimum and both are for the maximum.
	wants := map[string]string{
		"percentiles raw":    fmt.Sprintf(`"%s","t","[60,60]","[0,0]","[1e30,1e30]",2,2`, ts),
		"percentiles rollup": fmt.Sprintf(`"%s","c1","[60,60]","[0,0]","[1e30,1e30]",2,2`, ts),
		// the hourly tier's own view fired on the same insert: the same answer
		"percentiles rollup_1h": fmt.Sprintf(`"%s","c1","[60,60]","[0,0]","[1e30,1e30]",2,2`, ts),
		"lag":                   fmt.Sprintf(`"%s","g",7,0,1500,2`, ts),
		"slo":                   fmt.Sprintf(`"%s","t",2,2,0,2,2`, ts),
		// c1's rows were written without the interval columns: their defaults give the ± interval and the offset
		"clock offsets":  fmt.Sprintf(`"%s","c1","bracketed",13,0.5,12.5,13.5,13`, ts),
		"probe health":   fmt.Sprintf(`"%s","1",2,1,0,"[20,20]"`, ts),
		"list hosts":     "\"b1\"\n\"c1\"\n\"p1\"",
		"list groups":    `"g"`,
		"schema version": "1,1",
	}
	type q struct {
		Name string `json:"name"`
		SQL  string `json:"sql"`
		Want string `json:"want,omitempty"`
	}
	var qs []q
	for _, c := range calls {
		before := len(rec.sql)
		c.call()
		if len(rec.sql) != before+1 {
			t.Fatalf("%s issued %d queries, want 1", c.name, len(rec.sql)-before)
		}
		qs = append(qs, q{Name: c.name, SQL: inline(t, rec.sql[before], rec.args[before]), Want: wants[c.name]})
	}
	setup := []string{
		`INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, partition, offset, replay_class,
			source, ingest_ms, queue_ms, process_ms, e2e_ms, valid, producer_host, consumer_host, trace_id, ver) VALUES
			(now(), now(), 'g', 't', 0, 1, 'live', 'receipt', 10, 20, 30, 60, 255, 'p1', 'c1', 'aa', 1),
			(now(), now(), 'g', 't', 0, 2, 'live', 'receipt', 10, 20, 30, 60, 255, 'p1', 'c1', 'bb', 1),
			(now(), now(), 'g', 't', 0, 1, 'replay', 'receipt', 10, 20, 30, 6000, 255, 'p1', 'c1', 'cc', 1)`,
		`INSERT INTO lag_snapshots (at, at_ms, cluster, consumer_group, topic, partition, lag, expired, time_lag_ms, ver) VALUES
			(now() - 1, toUnixTimestamp(now()) * 1000 - 1000, 'c', 'g', 't', 0, 9, 0, 9000, 1),
			(now(), toUnixTimestamp(now()) * 1000, 'c', 'g', 't', 0, 3, 0, 1000, 1),
			(now(), toUnixTimestamp(now()) * 1000, 'c', 'g', 't', 1, 4, 0, 1500, 1)`,
		`INSERT INTO clock_offsets (at, at_ms, host, kind, offset_ms, uncertainty_ms, samples, ver) VALUES
			(now() - 1, toUnixTimestamp(now()) * 1000 - 1000, 'c1', 'bracketed', 12.5, 1, 1, 1),
			(now(), toUnixTimestamp(now()) * 1000, 'c1', 'bracketed', 13, 0.5, 1, 1),
			(now(), toUnixTimestamp(now()) * 1000, 'b1', 'envelope', -4, 2, 1, 1)`,
		`INSERT INTO probe_events (record_time, topic, partition, seq, broker_id, e2e_ms, status, duplicates, ver) VALUES
			(now(), 'probe', 0, 1, 1, 20, 'ok', 0, 1), (now(), 'probe', 0, 2, 1, 0, 'lost', 0, 1),
			(now(), 'probe', 0, 3, 2, 40, 'ok', 0, 1)`,
		`INSERT INTO schema_migrations (version, name, dialect, checksum, applied_at) VALUES (1, '0001_init', 'modern', '', now())`,
	}
	raw, err := json.MarshalIndent(map[string]any{"setup": setup, "queries": qs}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "queries.json")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", filepath.Join("testdata", "chdb_queries.mjs"), chdbDir,
		filepath.Join("..", "testdata", "golden", "modern.sql"), file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("read queries on chDB: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
