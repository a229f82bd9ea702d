package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
)

var sloAt = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func runSLOReport(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newSLOReportCmd(func() time.Time { return sloAt })
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// TestSLOReportCommand runs `tidemark slo report` on the real ClickHouse against rows written 3 minutes before the
// report's end: orders/billing has 990 live samples within 500 ms and 10 above it, 3 replays and 2 skew-flagged
// samples; payments/billing one good sample.
func TestSLOReportCommand(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, "+
		"partition, offset, replay_class, source, e2e_ms, valid, flags, ver, e2e_lo_ms, e2e_hi_ms)")
	if err != nil {
		t.Fatal(err)
	}
	at := sloAt.Add(-3 * time.Minute)
	lo, hi := 0.0, math.Inf(1)
	add := func(topic, class string, offset, e2e int64, valid uint8, flags uint32) {
		if err := b.Append(at, at, "billing", topic, int32(0), offset, class, "receipt", e2e, valid, flags, uint64(1), lo, hi); err != nil {
			t.Fatal(err)
		}
	}
	// Intervals: 980 samples surely good ([100, 140]), 10 with an unbounded upper end, 10 straddling 500 ms.
	for o := int64(0); o < 1000; o++ {
		e2e := int64(120)
		lo, hi = 100, 140
		if o >= 980 {
			hi = math.Inf(1)
		}
		if o >= 990 {
			e2e, lo, hi = 501, 480, 520
		}
		add("orders", "live", o, e2e, 15, 0)
	}
	lo, hi = 0, math.Inf(1)
	for o := int64(0); o < 3; o++ {
		add("orders", "replay", o, 86400000, 15, 0)
	}
	add("orders", "live", 2000, 99999, 7, uint32(latency.FlagSkewSuspected))
	add("orders", "live", 2001, 99999, 7, uint32(latency.FlagSkewSuspected))
	lo, hi = 40, 40
	add("payments", "live", 0, 40, 15, 0)
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
	base := []string{"--clickhouse-addr", testenv.ClickHouseAddr(t), "--database", db, "--window", "30d",
		"--threshold", "500ms", "--objective", "0.999"}

	out, err := runSLOReport(t, append(base, "--output", "json")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		Rows []struct {
			Topic       string   `json:"topic"`
			Live        uint64   `json:"live_samples"`
			Good        uint64   `json:"good_samples"`
			Compliance  float64  `json:"compliance"`
			Min         float64  `json:"compliance_min"`
			Max         float64  `json:"compliance_max"`
			Unbounded   uint64   `json:"unbounded_samples"`
			Budget      float64  `json:"error_budget_remaining"`
			Firing      []string `json:"firing"`
			Replayed    uint64   `json:"replayed_excluded"`
			SkewFlagged uint64   `json:"skew_flagged_excluded"`
			Burn        []struct {
				Window string  `json:"window"`
				Total  uint64  `json:"total"`
				Rate   float64 `json:"burn_rate"`
			} `json:"burn_rates"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(doc.Rows) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(doc.Rows), out)
	}
	o := doc.Rows[0]
	// 10 bad of 1000 = 1 %: compliance 0.99, burn rate 0.01/0.001 = 10 in every window (all rows are 3 minutes old),
	// budget 1 − 10 = −9. 10 is below 14.4 (no 1h/5m page) and at least 6, 3 and 1 (the other three fire).
	if o.Topic != "orders" || o.Live != 1000 || o.Good != 990 || !near(o.Compliance, 0.99) || !near(o.Budget, -9) ||
		o.Replayed != 3 || o.SkewFlagged != 2 {
		t.Errorf("orders row %+v", o)
	}
	// The band: at least the 980 samples whose upper end meets 500 ms are good, at most all 1000 (every lower end
	// meets it); the 10 unbounded ones are counted.
	if !near(o.Min, 0.98) || !near(o.Max, 1) || o.Unbounded != 10 {
		t.Errorf("orders band [%v, %v], %d unbounded; want [0.98, 1], 10", o.Min, o.Max, o.Unbounded)
	}
	if strings.Join(o.Firing, ",") != "page 6h/30m,ticket 1d/2h,ticket 3d/6h" {
		t.Errorf("orders firing %q", o.Firing)
	}
	var windows []string
	for _, b := range o.Burn {
		windows = append(windows, b.Window)
		if b.Total != 1000 || !near(b.Rate, 10) {
			t.Errorf("orders burn %+v, want 1000 samples burning at 10", b)
		}
	}
	if strings.Join(windows, " ") != "5m 30m 1h 2h 6h 1d 3d" {
		t.Errorf("burn windows %v", windows)
	}
	if p := doc.Rows[1]; p.Topic != "payments" || p.Live != 1 || p.Good != 1 || p.Compliance != 1 || p.Budget != 1 || len(p.Firing) != 0 {
		t.Errorf("payments row %+v", p)
	}

	out, err = runSLOReport(t, append(base, "--topic", "orders")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "SLO: 99.9% of live messages processed within 500ms end to end; period 30d ending 2026-11-29T12:00:00Z") ||
		!strings.HasPrefix(lines[2], "orders") || !strings.Contains(lines[2], "99%") || !strings.Contains(lines[2], "-900%") {
		t.Errorf("table:\n%s", out)
	}
}

// TestSLOReportEdges: --at moves the report's end (rows observed after it are left out), and a database without
// Tidemark's schema says to migrate.
func TestSLOReportEdges(t *testing.T) {
	db, _ := testenv.ClickHouseDB(t)
	addr := []string{"--clickhouse-addr", testenv.ClickHouseAddr(t), "--database", db}
	if _, err := runSLOReport(t, addr...); err == nil || !strings.Contains(err.Error(), "run `tidemark migrate`") {
		t.Errorf("empty database: %v, want a hint to migrate", err)
	}
	querytest.Schema(t, db)
	out, err := runSLOReport(t, append(addr, "--at", "2026-11-29T11:50:00Z", "--window", "12h")...)
	if err != nil {
		t.Fatal(err)
	}
	want := "SLO: 99.9% of live messages processed within 500ms end to end; period 12h ending 2026-11-29T11:50:00Z\n"
	if !strings.HasPrefix(out, want) || !strings.Contains(out, "(no latency samples in the period)") {
		t.Errorf("report on an empty schema:\n%s", out)
	}
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

// TestSLOReportFlags: bad flags are refused with the flag named, before any connection is made.
func TestSLOReportFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--output", "yaml"}, `--output: "yaml" is not one of table, json`},
		{[]string{"--window", "1.5d"}, "whole number of days"},
		{[]string{"--objective", "1"}, "SLO target must be in (0, 1)"},
		{[]string{"--threshold", "0s"}, "SLO threshold must be positive"},
		{[]string{"--at", "yesterday"}, "want an RFC 3339 time"},
		// Year 1 parses as Go's zero time, which must not read as "SLO report end time missing".
		{[]string{"--at", "0001-01-01T00:00:00Z"}, "--at 0001-01-01T00:00:00Z: Tidemark's tables hold times from 1970-01-01T00:00:00Z to 2106-02-07T06:28:15Z"},
		{[]string{"--at", "2200-01-01T00:00:00Z"}, "give an end within them"},
	} {
		_, err := runSLOReport(t, append([]string{"--clickhouse-addr", "127.0.0.1:1"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one containing %q", tt.args, err, tt.want)
		}
	}
}
