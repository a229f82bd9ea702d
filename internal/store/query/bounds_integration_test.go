package query_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/store/query"
)

// TestInputBoundsReachClickHouse runs every query with its inputs at the validated bounds on the real server: each
// must be answered (the bounds keep the SQL parseable and under max_query_size), and one step past a bound must be
// refused with ErrBadInput before any SQL is sent.
func TestInputBoundsReachClickHouse(t *testing.T) {
	r := seeded(t)
	// Three filters at both bounds with every byte a quote, which the binder escapes to two bytes: the largest
	// query text a validated filter can produce.
	worst := func() []string {
		out := make([]string, query.MaxFilterValues)
		for i := range out {
			out[i] = strings.Repeat("'", query.MaxFilterBytes/query.MaxFilterValues)
		}
		return out
	}
	big := query.Filter{Topics: worst(), Groups: worst(), Hosts: worst()}
	c := ctx(t)
	res, err := r.StagePercentiles(c, query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E,
		Levels: []float64{query.MinLevel, query.MaxLevel}, Source: query.SourceRaw})
	if err != nil || len(res.Points) == 0 {
		t.Fatalf("levels at the bounds: %v %+v", err, res)
	}
	if _, err := r.StagePercentiles(c, query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E,
		Levels: []float64{0.5}, Filter: big, Source: query.SourceRaw}); err != nil {
		t.Fatalf("filters at the bounds: %v", err)
	}
	for _, ms := range []float64{query.MinThresholdMs, query.MaxThresholdMs} {
		pts, err := r.SLO(c, query.SLOQuery{Window: twoMinutes, ThresholdMs: ms, Filter: big})
		if err != nil {
			t.Fatalf("threshold %v ms with filters at the bounds: %v", ms, err)
		}
		if len(pts) != 0 { // the quotes match no fixture name
			t.Fatalf("threshold %v ms: %+v", ms, pts)
		}
	}
	pts, err := r.SLO(c, query.SLOQuery{Window: twoMinutes, ThresholdMs: query.MaxThresholdMs})
	if err != nil || len(pts) == 0 || pts[0].Good != pts[0].Total {
		t.Fatalf("a week's threshold counts every sample good: %v %+v", err, pts)
	}
	over := append(worst(), "x")
	for name, call := range map[string]func() error{
		"subnormal level": func() error {
			_, err := r.StagePercentiles(c, query.PercentileQuery{Window: twoMinutes, Stage: query.StageE2E, Levels: []float64{5e-324}})
			return err
		},
		"subnormal threshold": func() error {
			_, err := r.SLO(c, query.SLOQuery{Window: twoMinutes, ThresholdMs: 5e-324})
			return err
		},
		"group filter over the bound": func() error {
			_, err := r.ConsumerLag(c, query.LagQuery{Window: twoMinutes, Filter: query.Filter{Groups: over}})
			return err
		},
		"host filter over the bound": func() error {
			_, err := r.ClockOffsets(c, query.ClockOffsetQuery{Window: twoMinutes, Hosts: over})
			return err
		},
		"broker filter over the bound": func() error {
			_, err := r.ProbeHealth(c, query.ProbeQuery{Window: twoMinutes, Brokers: over})
			return err
		},
		"slowest filter over the bound": func() error {
			_, err := r.Slowest(c, query.SlowestQuery{Window: twoMinutes, Stage: query.StageE2E, Limit: 1, Filter: query.Filter{Topics: over}})
			return err
		},
		"distribution filter over the bound": func() error {
			_, _, err := r.Distribution(c, query.DistributionQuery{Window: twoMinutes, Stage: query.StageE2E, Filter: query.Filter{Hosts: over}})
			return err
		},
		"list filter over the bound": func() error {
			_, err := r.List(c, query.ListQuery{Kind: query.ListGroups, Since: t0, Filter: query.Filter{Topics: over}})
			return err
		},
	} {
		if err := call(); !errors.Is(err, query.ErrBadInput) {
			t.Errorf("%s: got %v, want ErrBadInput", name, err)
		}
	}
}
