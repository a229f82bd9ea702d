package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/latency"
)

var (
	end = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	obj = latency.Objective{Target: 0.999, Threshold: 500 * time.Millisecond, Period: 30 * 24 * time.Hour}
	// windows in the store's order (deliberately not ascending: the report sorts them).
	windows = []time.Duration{72 * time.Hour, 5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 24 * time.Hour}
)

// w builds window counts in the order of windows from ascending ones (5m, 30m, 1h, 2h, 6h, 1d, 3d).
func w(asc ...Counts) []Counts { return append([]Counts{asc[6]}, asc[:6]...) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestStandardWindows(t *testing.T) {
	want := []time.Duration{5 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour, 24 * time.Hour, 72 * time.Hour}
	if got := StandardWindows(); !slices.Equal(got, want) {
		t.Fatalf("StandardWindows() = %v, want %v", got, want)
	}
}

func TestNewSLOReport(t *testing.T) {
	tests := []struct {
		name               string
		in                 SLOInput
		compliance, budget float64   // NaN: nil
		burn               []float64 // ascending windows; NaN: nil
		firing             []string
	}{
		{
			// 12 bad of 1020: compliance 1008/1020; budget 1 − (12/1020)/0.001 = −10.7647...; the recent windows see
			// 2 bad of 20 (burn 0.1/0.001 = 100), 3d 12 of 120 (100): every burn alert fires.
			name: "fast burn",
			in: SLOInput{Topic: "orders", Group: "billing", Period: Counts{1008, 1020},
				Windows: w(Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{108, 120})},
			compliance: 1008.0 / 1020, budget: 1 - (12.0/1020)/0.001,
			burn:   []float64{100, 100, 100, 100, 100, 100, 100},
			firing: []string{"page 1h/5m", "page 6h/30m", "ticket 1d/2h", "ticket 3d/6h"},
		},
		{
			// The burn stopped more than an hour ago: 1h, 30m and 5m have no sample, so their burn is unknown (nil),
			// and the pages, which need their short window too, do not fire; 2h and longer still burn at 1000.
			name: "burn stopped",
			in: SLOInput{Topic: "payments", Group: "billing", Period: Counts{0, 10},
				Windows: w(Counts{}, Counts{}, Counts{}, Counts{0, 10}, Counts{0, 10}, Counts{0, 10}, Counts{0, 10})},
			compliance: 0, budget: 1 - 1/0.001,
			burn:   []float64{math.NaN(), math.NaN(), math.NaN(), 1000, 1000, 1000, 1000},
			firing: []string{"ticket 1d/2h", "ticket 3d/6h"},
		},
		{
			// Exactly at the budget: 1 bad of 1000 is burn rate 1, budget 0 left; the 3d/6h ticket fires at >= 1.
			name: "on budget",
			in: SLOInput{Topic: "t", Group: "g", Period: Counts{999, 1000},
				Windows: w(Counts{999, 1000}, Counts{999, 1000}, Counts{999, 1000}, Counts{999, 1000}, Counts{999, 1000}, Counts{999, 1000}, Counts{999, 1000})},
			compliance: 0.999, budget: 0,
			burn:   []float64{1, 1, 1, 1, 1, 1, 1},
			firing: []string{"ticket 3d/6h"},
		},
		{
			// Only excluded samples: no live sample, so no ratio at all (not "100 %").
			name:       "nothing live",
			in:         SLOInput{Topic: "t", Group: "replay-only", Windows: make([]Counts, 7), Replayed: 604800, SkewFlagged: 3},
			compliance: math.NaN(), budget: math.NaN(),
			burn: []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := NewSLOReport(obj, end, windows, []SLOInput{tt.in})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rep.Windows, StandardWindows()) {
				t.Fatalf("windows %v, want ascending %v", rep.Windows, StandardWindows())
			}
			row := rep.Rows[0]
			check := func(what string, got *float64, want float64) {
				t.Helper()
				switch {
				case math.IsNaN(want) && got != nil:
					t.Errorf("%s = %v, want nil", what, *got)
				case !math.IsNaN(want) && (got == nil || !near(*got, want)):
					t.Errorf("%s = %v, want %v", what, got, want)
				}
			}
			check("compliance", row.Compliance, tt.compliance)
			check("budget", row.ErrorBudgetRemaining, tt.budget)
			for i, b := range row.Burn {
				if b.Window != rep.Windows[i] {
					t.Errorf("burn %d is for %s, want %s", i, b.Window, rep.Windows[i])
				}
				check("burn "+FormatWindow(b.Window), b.Rate, tt.burn[i])
			}
			if !slices.Equal(row.Firing, tt.firing) {
				t.Errorf("firing %q, want %q", row.Firing, tt.firing)
			}
			if row.Live != tt.in.Period.Total || row.Good != tt.in.Period.Good || row.Replayed != tt.in.Replayed ||
				row.SkewFlagged != tt.in.SkewFlagged {
				t.Errorf("counts %+v, want those of %+v", row, tt.in)
			}
		})
	}
}

func TestNewSLOReportRejects(t *testing.T) {
	ok := SLOInput{Topic: "t", Group: "g", Windows: make([]Counts, 7)}
	tests := []struct {
		name    string
		obj     latency.Objective
		windows []time.Duration
		in      SLOInput
		want    string
	}{
		{name: "objective of 1", obj: latency.Objective{Target: 1, Threshold: time.Second, Period: time.Hour}, windows: windows, in: ok, want: "target"},
		{name: "missing standard window", obj: obj, windows: windows[:6], in: SLOInput{Windows: make([]Counts, 6)}, want: "burn-rate window 24h0m0s missing"},
		{name: "counts do not match windows", obj: obj, windows: windows, in: SLOInput{Topic: "t", Group: "g", Windows: make([]Counts, 2)}, want: "t/g has 2 window counts, want 7"},
		{name: "good above total", obj: obj, windows: windows, in: SLOInput{Topic: "t", Group: "g", Period: Counts{3, 2}, Windows: make([]Counts, 7)}, want: "counts 3 good of 2"},
		{name: "band min above max", obj: obj, windows: windows, in: SLOInput{Topic: "t", Group: "g", Period: Counts{3, 5}, Windows: make([]Counts, 7),
			Band: &Band{GoodMin: 4, GoodMax: 3}}, want: "band [4, 3] good"},
		{name: "band max above total", obj: obj, windows: windows, in: SLOInput{Topic: "t", Group: "g", Period: Counts{3, 5}, Windows: make([]Counts, 7),
			Band: &Band{GoodMin: 1, GoodMax: 6}}, want: "band [1, 6] good"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSLOReport(tt.obj, end, tt.windows, []SLOInput{tt.in})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if _, err := NewSLOReport(obj, end, windows, []SLOInput{{Period: Counts{3, 2}, Windows: make([]Counts, 7)}}); !errors.Is(err, errBadCounts) {
		t.Errorf("good above total: %v, want errBadCounts", err)
	}
}

func TestWindowText(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		text string
	}{
		{"30d", 30 * 24 * time.Hour, "30d"},
		{"1d", 24 * time.Hour, "1d"},
		{"12h", 12 * time.Hour, "12h"},
		{"90m", 90 * time.Minute, "90m"},
		{"36h", 36 * time.Hour, "36h"}, // not whole days: stays in hours
		{"90s", 90 * time.Second, "1m30s"},
	} {
		d, err := ParseWindow(tt.in)
		if err != nil || d != tt.want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", tt.in, d, err, tt.want)
		}
		if got := FormatWindow(d); got != tt.text {
			t.Errorf("FormatWindow(%v) = %q, want %q", d, got, tt.text)
		}
	}
	for _, bad := range []string{"", "d", "1.5d", "-1d", "0d", "0s", "-5m", "thirty days"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("ParseWindow(%q) accepted", bad)
		}
	}
}

func exampleReport(t *testing.T) *SLOReport {
	t.Helper()
	rep, err := NewSLOReport(obj, end, windows, []SLOInput{
		{Topic: "payments", Group: "billing", Period: Counts{0, 10},
			Windows: w(Counts{}, Counts{}, Counts{}, Counts{0, 10}, Counts{0, 10}, Counts{0, 10}, Counts{0, 10})},
		{Topic: "orders", Group: "billing", Period: Counts{1008, 1020},
			Windows:  w(Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{18, 20}, Counts{108, 120}),
			Replayed: 7, Redelivered: 3, Backfill: 4, SkewFlagged: 6, Unmeasured: 2,
			Band: &Band{GoodMin: 1000, GoodMax: 1015, Unbounded: 5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	if err := exampleReport(t).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	// Rows sorted by topic; 1008/1020 = 98.8235 %, band [1000/1020, 1015/1020] = [98.0392 %, 99.5098 %], budget
	// 1 − 11.7647 = −1076.4706 %. payments has no band: "-".
	want := `SLO: 99.9% of live messages processed within 500ms end to end; period 30d ending 2026-11-29T12:00:00Z
TOPIC     GROUP    LIVE  GOOD  COMPLIANCE  MIN       MAX       BUDGET LEFT  BURN 5m  BURN 30m  BURN 1h  BURN 2h  BURN 6h  BURN 1d  BURN 3d  REPLAYED  REDELIVERED  BACKFILL  SKEW-FLAGGED  UNMEASURED  UNBOUNDED  FIRING
orders    billing  1020  1008  98.8235%    98.0392%  99.5098%  -1076.4706%  100.00   100.00    100.00   100.00   100.00   100.00   100.00   7         3            4         6             2           5          page 1h/5m, page 6h/30m, ticket 1d/2h, ticket 3d/6h
payments  billing  10    0     0%          -         -         -99900%      -        -         -        1000.00  1000.00  1000.00  1000.00  0         0            0         0             0           0          ticket 1d/2h, ticket 3d/6h
`
	if b.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	var b bytes.Buffer
	if err := exampleReport(t).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		End           time.Time `json:"end"`
		Period        string    `json:"period"`
		PeriodSeconds int64     `json:"period_seconds"`
		ThresholdMs   float64   `json:"threshold_ms"`
		Objective     float64   `json:"objective"`
		Rows          []struct {
			Topic       string   `json:"topic"`
			Live        uint64   `json:"live_samples"`
			Good        uint64   `json:"good_samples"`
			Compliance  *float64 `json:"compliance"`
			Min         *float64 `json:"compliance_min"`
			Max         *float64 `json:"compliance_max"`
			Unbounded   uint64   `json:"unbounded_samples"`
			Budget      *float64 `json:"error_budget_remaining"`
			Replayed    uint64   `json:"replayed_excluded"`
			Redelivered uint64   `json:"redelivered_excluded"`
			SkewFlagged uint64   `json:"skew_flagged_excluded"`
			Firing      []string `json:"firing"`
			Burn        []struct {
				Window  string   `json:"window"`
				Seconds int64    `json:"window_seconds"`
				Total   uint64   `json:"total"`
				Rate    *float64 `json:"burn_rate"`
			} `json:"burn_rates"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if !doc.End.Equal(end) || doc.Period != "30d" || doc.PeriodSeconds != 2592000 || doc.ThresholdMs != 500 || doc.Objective != 0.999 {
		t.Errorf("header %+v", doc)
	}
	o, p := doc.Rows[0], doc.Rows[1]
	if o.Topic != "orders" || o.Live != 1020 || o.Good != 1008 || !near(*o.Compliance, 1008.0/1020) || o.Replayed != 7 || o.Redelivered != 3 ||
		o.SkewFlagged != 6 || len(o.Firing) != 4 || !near(*o.Min, 1000.0/1020) || !near(*o.Max, 1015.0/1020) || o.Unbounded != 5 {
		t.Errorf("orders row %+v", o)
	}
	if p.Min != nil || p.Max != nil {
		t.Errorf("payments has no band, got [%v, %v]", p.Min, p.Max)
	}
	if p.Burn[0].Window != "5m" || p.Burn[0].Seconds != 300 || p.Burn[0].Rate != nil || p.Burn[3].Window != "2h" ||
		p.Burn[3].Total != 10 || !near(*p.Burn[3].Rate, 1000) {
		t.Errorf("payments burn rates %+v", p.Burn)
	}
	if !strings.Contains(b.String(), `"burn_rate": null`) {
		t.Errorf("a window without samples must have burn_rate null:\n%s", b.String())
	}
}

// FuzzParseWindow: any input is either rejected or gives a positive window that FormatWindow writes back in a form
// ParseWindow reads as the same window.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"30d", "12h", "90m", "1h30m", "0d", "-1d", "1.5d", "9999999999d", "d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseWindow(s)
		if err != nil {
			return
		}
		if d <= 0 {
			t.Fatalf("ParseWindow(%q) = %v: not positive", s, d)
		}
		back, err := ParseWindow(FormatWindow(d))
		if err != nil || back != d {
			t.Fatalf("ParseWindow(FormatWindow(%v) = %q) = %v, %v", d, FormatWindow(d), back, err)
		}
	})
}
