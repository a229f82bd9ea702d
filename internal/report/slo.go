package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark/tidemark/latency"
)

// Counts are live samples: Good of Total met the objective's threshold.
type Counts struct {
	Good, Total uint64
}

// SLOInput is what the store answered for one topic and group (internal/store/query.SLOReportRow).
type SLOInput struct {
	Topic, Group string
	// Period counts the live samples of the whole SLO period.
	Period Counts
	// Windows counts the live samples of each trailing window, in the order of the windows given to NewSLOReport.
	Windows []Counts
	// Samples left out of the SLO over the period: replays, redeliveries (the uncommitted tail reprocessed after a
	// rebalance), backfills, live samples with a suspect clock correction, and live samples without a valid
	// end-to-end latency.
	Replayed, Redelivered, Backfill, SkewFlagged, Unmeasured uint64
	// Band bounds the period's true number of good live samples; nil when the store did not say.
	Band *Band
}

// Band bounds a count of good samples by the samples' intervals (latency.Objective.GoodBounds): GoodMin samples'
// upper ends met the threshold, GoodMax samples' lower ends did. Unbounded counts the samples whose upper end is
// unbounded (an end's clock offset unknown): they are never good for the minimum.
type Band struct {
	GoodMin, GoodMax, Unbounded uint64
}

// SLOReport is an end-to-end latency SLO report: one row per topic and group, ordered by topic then group.
type SLOReport struct {
	End       time.Time
	Objective latency.Objective
	Windows   []time.Duration // burn-rate windows, ascending
	Rows      []SLORow
}

// SLORow is one topic and group. Ratios are nil when the period (or window) has no live sample: "no data" is not
// "100 % compliant".
type SLORow struct {
	Topic, Group string
	Live, Good   uint64
	// Compliance is Good/Live (latency.Compliance); ErrorBudgetRemaining is 1 − (1 − compliance)/(1 − target)
	// (latency.Objective.ErrorBudgetRemaining), negative once the budget is overspent.
	Compliance, ErrorBudgetRemaining *float64
	// ComplianceMin and ComplianceMax bound the true compliance over the same samples (latency.ComplianceBand): nil
	// without live samples or without a Band. Unbounded is the Band's count (0 without one).
	ComplianceMin, ComplianceMax *float64
	Unbounded                    uint64
	// Burn holds the burn rate of each window of SLOReport.Windows, in that order.
	Burn []Burn
	// Firing lists the multiwindow burn-rate alerts (latency.DefaultBurnWindows) whose long and short windows both
	// burn at or above the factor at End, e.g. "page 1h/5m".
	Firing                                                   []string
	Replayed, Redelivered, Backfill, SkewFlagged, Unmeasured uint64
}

// Burn is one trailing window's burn rate: (1 − good/total)/(1 − target) (latency.Objective.BurnRate); nil Rate
// when the window has no live sample.
type Burn struct {
	Window time.Duration
	Counts
	Rate *float64
}

// StandardWindows returns every long and short window of latency.DefaultBurnWindows, ascending and without
// repeats: 5m, 30m, 1h, 2h, 6h, 1d, 3d.
func StandardWindows() []time.Duration {
	var ws []time.Duration
	for _, b := range latency.DefaultBurnWindows() {
		ws = append(ws, b.Long, b.Short)
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// NewSLOReport computes the report at end for obj (obj.Period is the report's period) from the store's counts.
// windows are the trailing windows each input's Windows counts; they must include every window of
// latency.DefaultBurnWindows for the Firing column. It fails on an invalid objective, on an input whose window
// counts do not match windows, and on counts where good exceeds total.
func NewSLOReport(obj latency.Objective, end time.Time, windows []time.Duration, in []SLOInput) (*SLOReport, error) {
	if err := obj.Validate(); err != nil {
		return nil, fmt.Errorf("build SLO report: %w", err)
	}
	idx := make(map[time.Duration]int, len(windows))
	for i, w := range windows {
		idx[w] = i
	}
	for _, b := range latency.DefaultBurnWindows() {
		for _, w := range []time.Duration{b.Long, b.Short} {
			if _, ok := idx[w]; !ok {
				return nil, fmt.Errorf("build SLO report: burn-rate window %s missing from the counted windows %v", w, windows)
			}
		}
	}
	order := make([]int, len(windows))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(windows[a] - windows[b]) })
	rep := &SLOReport{End: end.UTC(), Objective: obj}
	for _, i := range order {
		rep.Windows = append(rep.Windows, windows[i])
	}
	for _, s := range in {
		if len(s.Windows) != len(windows) {
			return nil, fmt.Errorf("build SLO report: %s/%s has %d window counts, want %d", s.Topic, s.Group, len(s.Windows), len(windows))
		}
		for _, c := range append([]Counts{s.Period}, s.Windows...) {
			if c.Good > c.Total {
				return nil, fmt.Errorf("build SLO report: %s/%s counts %d good of %d: %w", s.Topic, s.Group, c.Good, c.Total, errBadCounts)
			}
		}
		if b := s.Band; b != nil && (b.GoodMin > b.GoodMax || b.GoodMax > s.Period.Total || b.Unbounded > s.Period.Total) {
			return nil, fmt.Errorf("build SLO report: %s/%s band [%d, %d] good, %d unbounded, of %d: %w", s.Topic, s.Group,
				b.GoodMin, b.GoodMax, b.Unbounded, s.Period.Total, errBadCounts)
		}
		row := SLORow{Topic: s.Topic, Group: s.Group, Live: s.Period.Total, Good: s.Period.Good,
			Replayed: s.Replayed, Redelivered: s.Redelivered, Backfill: s.Backfill, SkewFlagged: s.SkewFlagged, Unmeasured: s.Unmeasured}
		if s.Period.Total > 0 {
			c := latency.Compliance(float64(s.Period.Good), float64(s.Period.Total))
			b := obj.ErrorBudgetRemaining(float64(s.Period.Good), float64(s.Period.Total))
			row.Compliance, row.ErrorBudgetRemaining = &c, &b
			if s.Band != nil {
				band := latency.NewComplianceBand(float64(s.Period.Good), float64(s.Band.GoodMin), float64(s.Band.GoodMax), float64(s.Period.Total))
				row.ComplianceMin, row.ComplianceMax = &band.Min, &band.Max
			}
		}
		if s.Band != nil {
			row.Unbounded = s.Band.Unbounded
		}
		for _, i := range order {
			c := s.Windows[i]
			b := Burn{Window: windows[i], Counts: c}
			if c.Total > 0 {
				r := obj.BurnRate(float64(c.Good), float64(c.Total))
				b.Rate = &r
			}
			row.Burn = append(row.Burn, b)
		}
		alerts := obj.EvaluateBurn(latency.DefaultBurnWindows(), func(w time.Duration) (float64, float64) {
			c := s.Windows[idx[w]]
			return float64(c.Good), float64(c.Total)
		})
		for _, a := range alerts {
			if a.Firing {
				row.Firing = append(row.Firing, a.Window.Severity+" "+FormatWindow(a.Window.Long)+"/"+FormatWindow(a.Window.Short))
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	slices.SortStableFunc(rep.Rows, func(a, b SLORow) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return strings.Compare(a.Group, b.Group)
	})
	return rep, nil
}

var errBadCounts = errors.New("more good samples than samples")

// FormatWindow writes a window the way the CLI's flags take it: whole days as "30d", else whole hours "6h", whole
// minutes "5m", else Go's duration syntax.
func FormatWindow(d time.Duration) string {
	switch {
	case d > 0 && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// ParseWindow reads a window: Go's duration syntax ("90m", "1h30m") or a whole number of days ("30d"). It must be
// positive.
func ParseWindow(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days > 100000 {
			return 0, fmt.Errorf("window %q: want a whole number of days like 30d, or a duration like 12h", s)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("window %q: want a whole number of days like 30d, or a duration like 12h", s)
		}
	}
	if d <= 0 {
		return 0, fmt.Errorf("window %q: must be positive", s)
	}
	return d, nil
}

// WriteTable prints the report as an aligned text table with a header line naming the objective. Ratios print as
// percentages, burn rates with two decimals, and "-" where there is no live sample. MIN and MAX bound the true
// compliance (SLORow.ComplianceMin, ComplianceMax); the budget and the burn rates are the estimate's.
func (r *SLOReport) WriteTable(w io.Writer) error {
	o := r.Objective
	if _, err := fmt.Fprintf(w, "SLO: %s of live messages processed within %s end to end; period %s ending %s\n",
		percent(o.Target), o.Threshold, FormatWindow(o.Period), r.End.Format(time.RFC3339)); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	head := []string{"TOPIC", "GROUP", "LIVE", "GOOD", "COMPLIANCE", "MIN", "MAX", "BUDGET LEFT"}
	for _, win := range r.Windows {
		head = append(head, "BURN "+FormatWindow(win))
	}
	head = append(head, "REPLAYED", "REDELIVERED", "BACKFILL", "SKEW-FLAGGED", "UNMEASURED", "UNBOUNDED", "FIRING")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, row := range r.Rows {
		f := []string{row.Topic, row.Group, u(row.Live), u(row.Good), ratio(row.Compliance), ratio(row.ComplianceMin),
			ratio(row.ComplianceMax), ratio(row.ErrorBudgetRemaining)}
		for _, b := range row.Burn {
			if b.Rate == nil {
				f = append(f, "-")
			} else {
				f = append(f, strconv.FormatFloat(*b.Rate, 'f', 2, 64))
			}
		}
		firing := "-"
		if len(row.Firing) > 0 {
			firing = strings.Join(row.Firing, ", ")
		}
		f = append(f, u(row.Replayed), u(row.Redelivered), u(row.Backfill), u(row.SkewFlagged), u(row.Unmeasured), u(row.Unbounded), firing)
		fmt.Fprintln(tw, strings.Join(f, "\t"))
	}
	if len(r.Rows) == 0 {
		fmt.Fprintln(tw, "(no latency samples in the period)")
	}
	return tw.Flush()
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func ratio(p *float64) string {
	if p == nil {
		return "-"
	}
	return percent(*p)
}

// percent prints a fraction as a percentage with up to four decimals and no trailing zeros: 0.999 → "99.9%".
func percent(f float64) string {
	s := strconv.FormatFloat(f*100, 'f', 4, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

// The JSON document: stable field names with units, windows both as text and seconds.
type jsonReport struct {
	End           time.Time `json:"end"`
	Period        string    `json:"period"`
	PeriodSeconds int64     `json:"period_seconds"`
	ThresholdMs   float64   `json:"threshold_ms"`
	Objective     float64   `json:"objective"`
	Rows          []jsonRow `json:"rows"`
}

type jsonRow struct {
	Topic                string     `json:"topic"`
	Group                string     `json:"group"`
	LiveSamples          uint64     `json:"live_samples"`
	GoodSamples          uint64     `json:"good_samples"`
	Compliance           *float64   `json:"compliance"`
	ComplianceMin        *float64   `json:"compliance_min"`
	ComplianceMax        *float64   `json:"compliance_max"`
	ErrorBudgetRemaining *float64   `json:"error_budget_remaining"`
	BurnRates            []jsonBurn `json:"burn_rates"`
	Firing               []string   `json:"firing"`
	ReplayedExcluded     uint64     `json:"replayed_excluded"`
	RedeliveredExcluded  uint64     `json:"redelivered_excluded"`
	BackfillExcluded     uint64     `json:"backfill_excluded"`
	SkewFlaggedExcluded  uint64     `json:"skew_flagged_excluded"`
	Unmeasured           uint64     `json:"unmeasured"`
	Unbounded            uint64     `json:"unbounded_samples"`
}

type jsonBurn struct {
	Window        string   `json:"window"`
	WindowSeconds int64    `json:"window_seconds"`
	Good          uint64   `json:"good"`
	Total         uint64   `json:"total"`
	BurnRate      *float64 `json:"burn_rate"`
}

// WriteJSON prints the report as one indented JSON document; ratios without live samples are null.
func (r *SLOReport) WriteJSON(w io.Writer) error {
	doc := jsonReport{End: r.End, Period: FormatWindow(r.Objective.Period), PeriodSeconds: int64(r.Objective.Period / time.Second),
		ThresholdMs: float64(r.Objective.Threshold) / float64(time.Millisecond), Objective: r.Objective.Target, Rows: []jsonRow{}}
	for _, row := range r.Rows {
		jr := jsonRow{Topic: row.Topic, Group: row.Group, LiveSamples: row.Live, GoodSamples: row.Good,
			Compliance: row.Compliance, ComplianceMin: row.ComplianceMin, ComplianceMax: row.ComplianceMax, Unbounded: row.Unbounded,
			ErrorBudgetRemaining: row.ErrorBudgetRemaining, Firing: row.Firing,
			ReplayedExcluded: row.Replayed, RedeliveredExcluded: row.Redelivered, BackfillExcluded: row.Backfill, SkewFlaggedExcluded: row.SkewFlagged,
			Unmeasured: row.Unmeasured, BurnRates: []jsonBurn{}}
		if jr.Firing == nil {
			jr.Firing = []string{}
		}
		for _, b := range row.Burn {
			jr.BurnRates = append(jr.BurnRates, jsonBurn{Window: FormatWindow(b.Window), WindowSeconds: int64(b.Window / time.Second),
				Good: b.Good, Total: b.Total, BurnRate: b.Rate})
		}
		doc.Rows = append(doc.Rows, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("write SLO report JSON: %w", err)
	}
	return nil
}
