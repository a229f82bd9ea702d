package query_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
)

// sloEnd is the end of the SLO report fixture's windows.
var sloEnd = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// sloRow is one latency_events row of the SLO fixture: the columns the report reads.
type sloRow struct {
	ago          time.Duration // observed at sloEnd − ago
	topic, group string
	class        string // live, replay, backfill
	e2eMs        int64
	valid        uint8
	flags        uint32
	// bounded gives the row the interval [lo, hi]; without it the row's interval is [e2eMs, e2eMs], exact.
	bounded bool
	lo, hi  float64
}

const (
	allValid  = 15 | 15<<4
	noE2E     = 7 | 15<<4 // corrected ingest, queue and process valid, corrected e2e not
	skewFlags = uint32(latency.FlagSkewSuspected)
)

// rowsOf returns n copies of r.
func rowsOf(n int, r sloRow) []sloRow {
	out := make([]sloRow, n)
	for i := range out {
		out[i] = r
	}
	return out
}

// insertSLORows inserts rows in one batch, numbering offsets per topic, group and class from first so that no two
// rows share a key unless asked to (first repeated).
func insertSLORows(t *testing.T, conn driver.Conn, first int64, rows []sloRow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, "+
		"partition, offset, replay_class, source, e2e_ms, e2e_naive_ms, valid, flags, consumer_host, ver, e2e_lo_ms, e2e_hi_ms)")
	if err != nil {
		t.Fatalf("prepare latency_events: %v", err)
	}
	for i, r := range rows {
		at := sloEnd.Add(-r.ago)
		lo, hi := float64(r.e2eMs), float64(r.e2eMs)
		if r.bounded {
			lo, hi = r.lo, r.hi
		}
		if err := b.Append(at, at, r.group, r.topic, int32(0), first+int64(i), r.class, "receipt", r.e2eMs, r.e2eMs,
			r.valid, r.flags, "c1", uint64(1), lo, hi); err != nil {
			t.Fatalf("append latency_events: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert latency_events: %v", err)
	}
}

// seedSLO stages the SLO fixture (the comments give each count's contribution) and returns a reader on it.
func seedSLO(t *testing.T) *query.Reader {
	t.Helper()
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	day := 24 * time.Hour
	live := func(ago time.Duration, e2e int64) sloRow {
		return sloRow{ago: ago, topic: "orders", group: "billing", class: "live", e2eMs: e2e, valid: allValid}
	}
	var rows []sloRow
	rows = append(rows, rowsOf(900, live(10*day, 100))...)                                                                                                           // period only: 900 good
	rows = append(rows, rowsOf(90, live(2*day, 100))...)                                                                                                             // period and 3d: 90 good
	rows = append(rows, rowsOf(10, live(2*day, 900))...)                                                                                                             // period and 3d: 10 bad
	rows = append(rows, rowsOf(5, live(31*day, 100))...)                                                                                                             // before the period: not counted
	rows = append(rows, rowsOf(3, live(0, 100))...)                                                                                                                  // at the end (exclusive): not counted
	rows = append(rows, rowsOf(7, sloRow{ago: 90 * time.Minute, topic: "orders", group: "billing", class: "replay", e2eMs: 50000, valid: allValid})...)              // replayed
	rows = append(rows, rowsOf(4, sloRow{ago: 5 * day, topic: "orders", group: "billing", class: "backfill", e2eMs: 90000, valid: allValid})...)                     // backfill
	rows = append(rows, rowsOf(6, sloRow{ago: 20 * time.Minute, topic: "orders", group: "billing", class: "live", e2eMs: 99999, valid: noE2E, flags: skewFlags})...) // skew-flagged
	rows = append(rows, rowsOf(2, sloRow{ago: 20 * time.Minute, topic: "orders", group: "billing", class: "live", valid: noE2E})...)                                 // unmeasured
	rows = append(rows, rowsOf(10, sloRow{ago: 90 * time.Minute, topic: "payments", group: "billing", class: "live", e2eMs: 800, valid: allValid})...)               // all bad
	rows = append(rows, rowsOf(1, sloRow{ago: time.Hour, topic: "orders", group: "audit", class: "live", e2eMs: 20, valid: allValid})...)                            // another group
	insertSLORows(t, conn, 0, rows)
	// 20 samples 3 minutes before the end, inside every window: 18 meet 500 ms (exactly 500 is good), 2 do not.
	recent := append(rowsOf(18, live(3*time.Minute, 500)), rowsOf(2, live(3*time.Minute, 501))...)
	insertSLORows(t, conn, 100000, recent)
	// The same 20 again, as a retried insert would deliver them: FINAL collapses them to one copy each.
	insertSLORows(t, conn, 100000, recent)
	return query.NewReader(conn)
}

var sloWindows = []time.Duration{5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour,
	24 * time.Hour, 72 * time.Hour}

type sc = query.SLOCounts

func TestSLOReportExactCounts(t *testing.T) {
	r := seedSLO(t)
	res, err := r.SLOReport(ctx(t), query.SLOReportQuery{End: sloEnd, Period: 30 * 24 * time.Hour, Windows: sloWindows,
		ThresholdMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := []query.SLOReportRow{
		// audit: one good sample an hour ago; the 1h window is [end − 1h, end), so it is in it.
		{Topic: "orders", Group: "audit", Period: sc{1, 1},
			Windows: []sc{{0, 0}, {0, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, PeriodGoodMin: 1, PeriodGoodMax: 1},
		// billing: period 900 + 90 + 18 good of 900 + 100 + 20; the recent 20 (duplicates collapsed) are in every
		// window, the 100 of two days ago only in 3d.
		{Topic: "orders", Group: "billing", Period: sc{1008, 1020},
			Windows:  []sc{{18, 20}, {18, 20}, {18, 20}, {18, 20}, {18, 20}, {18, 20}, {108, 120}},
			Replayed: 7, Backfill: 4, SkewFlagged: 6, Unmeasured: 2, PeriodGoodMin: 1008, PeriodGoodMax: 1008},
		// payments: 10 bad samples 90 minutes ago: in 2h and longer, not in 1h.
		{Topic: "payments", Group: "billing", Period: sc{0, 10},
			Windows: []sc{{0, 0}, {0, 0}, {0, 0}, {0, 10}, {0, 10}, {0, 10}, {0, 10}}},
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
}

// TestSLOReportPeriodShorterThanWindows: the 3d window still counts three days when the period is one day, and the
// exclusion counts cover the period only.
func TestSLOReportPeriodShorterThanWindows(t *testing.T) {
	r := seedSLO(t)
	res, err := r.SLOReport(ctx(t), query.SLOReportQuery{End: sloEnd, Period: 24 * time.Hour,
		Windows: []time.Duration{72 * time.Hour}, ThresholdMs: 500, Filter: query.Filter{Topics: []string{"orders"}, Groups: []string{"billing"}}})
	if err != nil {
		t.Fatal(err)
	}
	// Backfill (5 days ago) is outside the 1-day period.
	want := []query.SLOReportRow{{Topic: "orders", Group: "billing", Period: sc{18, 20}, Windows: []sc{{108, 120}},
		Replayed: 7, SkewFlagged: 6, Unmeasured: 2, PeriodGoodMin: 18, PeriodGoodMax: 18}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
}

// TestSLOReportThreshold: at a 900 ms threshold every live sample of billing is good: the 501 ms, 800 ms and 900 ms
// ones too (a sample exactly at the threshold is good). Without windows, only the period is counted.
func TestSLOReportThreshold(t *testing.T) {
	r := seedSLO(t)
	res, err := r.SLOReport(ctx(t), query.SLOReportQuery{End: sloEnd, Period: 30 * 24 * time.Hour, ThresholdMs: 900,
		Filter: query.Filter{Groups: []string{"billing"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []query.SLOReportRow{
		{Topic: "orders", Group: "billing", Period: sc{1020, 1020}, Windows: []sc{}, Replayed: 7, Backfill: 4, SkewFlagged: 6, Unmeasured: 2,
			PeriodGoodMin: 1020, PeriodGoodMax: 1020},
		{Topic: "payments", Group: "billing", Period: sc{10, 10}, Windows: []sc{}, PeriodGoodMin: 10, PeriodGoodMax: 10},
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
}

// TestSLOReportBands: the period's compliance band counts a sample good for the maximum when its lower end meets
// the threshold and for the minimum only when its upper end does; an unbounded upper end is counted, never good for
// the minimum, and never dropped from the estimate's counts. A row stored without an interval reads as [0, +Inf).
func TestSLOReportBands(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	inf := math.Inf(1)
	b := func(e2e int64, lo, hi float64) sloRow {
		return sloRow{ago: time.Hour, topic: "orders", group: "bands", class: "live", e2eMs: e2e, valid: allValid,
			bounded: true, lo: lo, hi: hi}
	}
	var rows []sloRow
	rows = append(rows, rowsOf(50, b(100, 90, 110))...)  // surely good
	rows = append(rows, rowsOf(20, b(490, 480, 520))...) // straddles, estimate good
	rows = append(rows, rowsOf(10, b(510, 495, 530))...) // straddles, estimate bad
	rows = append(rows, rowsOf(7, b(600, 550, 650))...)  // surely bad
	rows = append(rows, rowsOf(5, b(300, 0, inf))...)    // an end's offset unknown
	rows = append(rows, rowsOf(4, b(300, 300, 300))...)  // replayed below: not live
	for i := 92; i < 96; i++ {
		rows[i].class = "replay"
	}
	insertSLORows(t, conn, 0, rows)
	// Three rows inserted without the interval columns, as rows stored before they existed read.
	ctx2, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	batch, err := conn.PrepareBatch(ctx2, "INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, "+
		"partition, offset, replay_class, source, e2e_ms, valid, consumer_host, ver)")
	if err != nil {
		t.Fatal(err)
	}
	at := sloEnd.Add(-time.Hour)
	for i := range 3 {
		if err := batch.Append(at, at, "bands", "orders", int32(0), int64(1000+i), "live", "receipt", int64(200), uint8(allValid), "c1", uint64(1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	res, err := query.NewReader(conn).SLOReport(ctx(t), query.SLOReportQuery{End: sloEnd, Period: 24 * time.Hour, ThresholdMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	// 95 live samples: estimate good 50 + 20 + 5 + 3 = 78; upper end good 50; lower end good 50 + 20 + 10 + 5 + 3 = 88;
	// unbounded 5 + 3.
	want := []query.SLOReportRow{{Topic: "orders", Group: "bands", Period: sc{78, 95}, Windows: []sc{}, Replayed: 4,
		PeriodGoodMin: 50, PeriodGoodMax: 88, PeriodUnbounded: 8}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
	// The per-bucket SLO query gives the same band.
	pts, err := query.NewReader(conn).SLO(ctx(t), query.SLOQuery{Window: query.Window{From: sloEnd.Add(-24 * time.Hour), To: sloEnd,
		Step: 24 * time.Hour}, ThresholdMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 1 || pts[0].Good != 78 || pts[0].Total != 95 || pts[0].GoodMin != 50 || pts[0].GoodMax != 88 || pts[0].Unbounded != 8 {
		t.Fatalf("SLO points %+v, want one with good 78 of 95, [50, 88], 8 unbounded", pts)
	}
}

func TestSLOReportBadInput(t *testing.T) {
	r := query.NewReader(nil) // never reached: every case fails before the query
	ok := query.SLOReportQuery{End: sloEnd, Period: time.Hour, ThresholdMs: 500}
	for name, mut := range map[string]func(*query.SLOReportQuery){
		"no end":            func(q *query.SLOReportQuery) { q.End = time.Time{} },
		"no period":         func(q *query.SLOReportQuery) { q.Period = 0 },
		"zero threshold":    func(q *query.SLOReportQuery) { q.ThresholdMs = 0 },
		"sub-second window": func(q *query.SLOReportQuery) { q.Windows = []time.Duration{time.Millisecond} },
		"too many windows":  func(q *query.SLOReportQuery) { q.Windows = make([]time.Duration, query.MaxSLOWindows+1) },
	} {
		q := ok
		mut(&q)
		if _, err := r.SLOReport(context.Background(), q); !errors.Is(err, query.ErrBadInput) {
			t.Errorf("%s: %v, want ErrBadInput", name, err)
		}
	}
}
