package query

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/tidemark/tidemark/internal/store"
)

func TestChooseSource(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		w        Window
		replays  bool
		expected Source
	}{
		{"1h at 5s buckets reads raw rows", Window{now.Add(-time.Hour), now, 5 * time.Second}, false, SourceRaw},
		// exactly RawMaxRange is still short
		{"6h at 30s", Window{now.Add(-6 * time.Hour), now, 30 * time.Second}, false, SourceRaw},
		{"6h and a second", Window{now.Add(-6*time.Hour - time.Second), now, 30 * time.Second}, false, SourceRollup},
		// a minute-wide bucket is the minute tier's resolution, so it answers it exactly as well
		{"1h at 1m buckets", Window{now.Add(-time.Hour), now, time.Minute}, false, SourceRollup},
		{"1h at 59s buckets", Window{now.Add(-time.Hour), now, 59 * time.Second}, false, SourceRaw},
		// Grafana's 7-day panel at ~1000 points asks for 10 min buckets: the minute tier would merge 10,080 states per
		// series, no faster than raw rows, so the hourly tier answers in hour buckets
		{"7d at 10m", Window{now.Add(-7 * 24 * time.Hour), now, 10 * time.Minute}, false, SourceRollup1h},
		{"7d at 59m59s", Window{now.Add(-7 * 24 * time.Hour), now, time.Hour - time.Second}, false, SourceRollup1h},
		// up to two days of minutes the minute tier is cheap enough: 2,880 states per series
		{"48h at 3m", Window{now.Add(-48 * time.Hour), now, 3 * time.Minute}, false, SourceRollup},
		{"48h and a minute at 3m", Window{now.Add(-48*time.Hour - time.Minute), now, 3 * time.Minute}, false, SourceRollup1h},
		{"24h at 1m (Grafana's 1-day panel)", Window{now.Add(-24 * time.Hour), now, 90 * time.Second}, false, SourceRollup},
		// an hour-wide bucket is the hourly tier's resolution: 60x fewer states to merge than the minute tier
		{"7d at 1h", Window{now.Add(-7 * 24 * time.Hour), now, time.Hour}, false, SourceRollup1h},
		{"90d at 6h", Window{now.Add(-90 * 24 * time.Hour), now, 6 * time.Hour}, false, SourceRollup1h},
		// the bucket decides, not the range: a short window with hour buckets still reads the hourly tier
		{"2h at 1h", Window{now.Add(-2 * time.Hour), now, time.Hour}, false, SourceRollup1h},
		{"7d with replays must read raw rows", Window{now.Add(-7 * 24 * time.Hour), now, 10 * time.Minute}, true, SourceRaw},
		{"7d at 1h with replays must read raw rows", Window{now.Add(-7 * 24 * time.Hour), now, time.Hour}, true, SourceRaw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ChooseSource(tc.w, tc.replays); got != tc.expected {
				t.Fatalf("got %s want %s", got, tc.expected)
			}
		})
	}
}

func TestPlanAlignsRollupsToMinutes(t *testing.T) {
	from := time.Date(2026, 11, 1, 10, 0, 42, 0, time.UTC)
	src, w, err := plan(Window{From: from, To: from.Add(7 * time.Hour), Step: 90 * time.Second}, SourceAuto, false)
	if err != nil {
		t.Fatal(err)
	}
	// 90 s truncates to the 1-minute rollup resolution; the start moves back to the minute.
	if src != SourceRollup || w.Step != time.Minute || !w.From.Equal(from.Truncate(time.Minute)) {
		t.Fatalf("got %s %+v", src, w)
	}
	if _, _, err := plan(Window{From: from, To: from.Add(time.Hour), Step: time.Minute}, SourceRollup, true); !errors.Is(err, ErrBadInput) {
		t.Fatalf("rollup with replays: got %v", err)
	}
}

func TestPlanAlignsHourlyRollups(t *testing.T) {
	from := time.Date(2026, 11, 1, 10, 17, 42, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		step     time.Duration
		forced   Source
		wantStep time.Duration
	}{
		// 90 min truncates to a whole hour; the start moves back to 10:00
		{"auto at 90m", 90 * time.Minute, SourceAuto, time.Hour},
		{"auto at 3h", 3 * time.Hour, SourceAuto, 3 * time.Hour},
		// forcing the hourly tier with finer buckets widens them to its resolution
		{"forced at 10m", 10 * time.Minute, SourceRollup1h, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, w, err := plan(Window{From: from, To: from.Add(7 * 24 * time.Hour), Step: tc.step}, tc.forced, false)
			if err != nil {
				t.Fatal(err)
			}
			if src != SourceRollup1h || w.Step != tc.wantStep || !w.From.Equal(time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)) {
				t.Fatalf("got %s %+v", src, w)
			}
		})
	}
	if _, _, err := plan(Window{From: from, To: from.Add(time.Hour), Step: time.Hour}, SourceRollup1h, true); !errors.Is(err, ErrBadInput) {
		t.Fatalf("hourly rollup with replays: got %v", err)
	}
	if _, _, err := plan(Window{From: from, To: from.Add(time.Hour), Step: time.Hour}, "rollup_1d", false); !errors.Is(err, ErrBadInput) {
		t.Fatalf("unknown source: got %v", err)
	}
}

func TestLevelsLiteral(t *testing.T) {
	if got := levelsLiteral([]float64{0.5, 0.99, 0.999, 1e-7}); got != "0.5, 0.99, 0.999, 0.0000001" {
		t.Fatalf("got %q", got)
	}
	only := regexp.MustCompile(`^[0-9., ]+$`)
	for _, l := range []float64{MinLevel, MaxLevel, 0.123456789} {
		if err := validateLevels([]float64{l}); err != nil {
			t.Fatal(err)
		}
		if s := levelsLiteral([]float64{l}); !only.MatchString(s) {
			t.Fatalf("%v renders as %q", l, s)
		}
	}
}

// TestValidateInputs has one row per rule a value must pass before it reaches the SQL text.
func TestValidateInputs(t *testing.T) {
	names := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strings.Repeat("'", size) // the worst case: every byte escaped when bound
		}
		return out
	}
	for _, tc := range []struct {
		name string
		err  error // nil: accepted
	}{
		{"no levels", validateLevels(nil)},
		{"too many levels", validateLevels(make([]float64, MaxLevels+1))},
		{"level 0", validateLevels([]float64{0})},
		{"level 1", validateLevels([]float64{1})},
		{"negative level", validateLevels([]float64{-0.5})},
		{"NaN level", validateLevels([]float64{math.NaN()})},
		{"infinite level", validateLevels([]float64{math.Inf(1)})},
		// the smallest subnormal rendered 'f' is 326 characters, which ClickHouse 18.16 reports as a syntax error
		{"subnormal level", validateLevels([]float64{5e-324})},
		{"level just under MinLevel", validateLevels([]float64{math.Nextafter(MinLevel, 0)})},
		{"level just over MaxLevel", validateLevels([]float64{math.Nextafter(MaxLevel, 1)})},
		{"zero threshold", validateThreshold(0)},
		{"NaN threshold", validateThreshold(math.NaN())},
		{"infinite threshold", validateThreshold(math.Inf(1))},
		// clickhouse-go binds it as cast(5e-324, 'Float64'), which ClickHouse 18.16 cannot parse
		{"subnormal threshold", validateThreshold(5e-324)},
		{"threshold over a week", validateThreshold(math.Nextafter(MaxThresholdMs, math.Inf(1)))},
		// without this bound, a filter of 100,001 names comes back as "Max query size exceeded" (a 502)
		{"too many names", validateValues("group", names(MaxFilterValues+1, 1))},
		{"names too long in total", validateValues("group", names(MaxFilterBytes/255+1, 255))},
		{"filter over the bound in hosts", Filter{Hosts: names(MaxFilterValues+1, 1)}.validate()},
	} {
		if !errors.Is(tc.err, ErrBadInput) {
			t.Errorf("%s: got %v, want ErrBadInput", tc.name, tc.err)
		}
	}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"levels at the bounds", validateLevels([]float64{MinLevel, MaxLevel})},
		{"thresholds at the bounds", errors.Join(validateThreshold(MinThresholdMs), validateThreshold(MaxThresholdMs))},
		{"filter at the name bound", validateValues("topic", names(MaxFilterValues, 32))},
		{"filter at the byte bound", validateValues("topic", []string{strings.Repeat("a", MaxFilterBytes)})},
	} {
		if tc.err != nil {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
}

func TestLatencySQLBindsEveryFilter(t *testing.T) {
	from := time.Unix(1700000000, 0)
	sql, args := latencySQL(SourceRaw, stages[StageE2E], Window{From: from, To: from.Add(time.Hour), Step: time.Minute}, "topic",
		Filter{Topics: []string{"o'; DROP TABLE x"}, Groups: []string{"g"}, Hosts: []string{"h"}}, false,
		"quantilesTDigest%s("+levelsLiteral([]float64{0.5})+")(%s)", false)
	want := "SELECT toDateTime(intDiv(toUInt32(observed_time), ?) * ?) AS t, topic AS k, " +
		"quantilesTDigest(0.5)(toFloat64(e2e_ms)) AS v, count() AS n FROM latency_events WHERE " +
		"observed_time >= toDateTime(?) AND observed_time < toDateTime(?) AND bitAnd(valid, ?) != 0 AND " +
		"replay_class = 'live' AND has(?, topic) AND has(?, consumer_group) AND has(?, consumer_host) " +
		"GROUP BY t, k HAVING n > 0"
	if sql != want {
		t.Fatalf("got\n%s\nwant\n%s", sql, want)
	}
	if len(args) != 8 || args[5].([]string)[0] != "o'; DROP TABLE x" {
		t.Fatalf("args %v", args)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code int32
		want error
	}{
		{193, ErrAuth},               // wrong password (18.16)
		{516, ErrAuth},               // authentication failed (>= 21.x)
		{81, store.ErrSchemaMissing}, // unknown database
		{60, store.ErrSchemaMissing}, // unknown table: not migrated
		{291, ErrAccessDenied},       // 18.16: access to database denied
		{497, ErrAccessDenied},       // >= 20.x: not enough privileges
		{159, ErrTimeout},            // max_execution_time
	} {
		err := classify(fmt.Errorf("query: %w", &clickhouse.Exception{Code: tc.code, Message: "x"}))
		if !errors.Is(err, tc.want) || !IsServerError(err) {
			t.Errorf("code %d: got %v, want %v", tc.code, err, tc.want)
		}
	}
	// a syntax error stays a server error of no special kind
	if err := classify(&clickhouse.Exception{Code: 62}); errors.Is(err, ErrAuth) || !IsServerError(err) {
		t.Errorf("code 62: %v", err)
	}
	if IsServerError(errors.New("frame building failed")) {
		t.Error("a plain error is not the server's")
	}
}

// TestWindowWithinDateTime: a window must lie within what DateTime holds, [MinTime, MaxTime] with the exclusive end
// at most MaxTime; one second outside either end is a bad input, not a query ClickHouse would wrap around.
func TestWindowWithinDateTime(t *testing.T) {
	for _, tt := range []struct {
		name string
		w    Window
		ok   bool
	}{
		{"the whole span", Window{MinTime, MaxTime, time.Hour}, true},
		{"a second before 1970", Window{MinTime.Add(-time.Second), MaxTime, time.Hour}, false},
		{"ends a second past the last DateTime", Window{MinTime, MaxTime.Add(time.Second), time.Hour}, false},
		{"entirely after 2106", Window{MaxTime.Add(time.Hour), MaxTime.Add(2 * time.Hour), time.Second}, false},
	} {
		if err := tt.w.validate(); (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrBadInput)) {
			t.Errorf("%s: %v, want ok=%v (or ErrBadInput)", tt.name, err, tt.ok)
		}
	}
}
