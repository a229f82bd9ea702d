package query

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tidemark/tidemark/internal/store"
)

// PercentileQuery asks for one stage's latency percentiles per time bucket.
type PercentileQuery struct {
	Window         Window
	Stage          Stage
	Levels         []float64 // fractions in (0, 1), at most MaxLevels
	GroupBy        Dimension
	Filter         Filter
	IncludeReplays bool
	Source         Source // SourceAuto: ChooseSource
}

// PercentilePoint is one bucket of one series.
type PercentilePoint struct {
	Time     time.Time // bucket start, UTC
	Key      string    // the GroupBy dimension's value; "" for DimNone
	ValuesMs []float64 // one per level, milliseconds
	Count    uint64    // samples in the bucket
	// LowerMs and UpperMs are, per level, the percentile of the samples' lower ends and of their upper ends: the
	// true percentile lies between them (an order statistic is monotone in each sample; docs/latency.md, "Bands").
	// An UpperMs of +Inf says the level falls among samples whose upper end is unbounded. Both are t-digest
	// estimates, within the sketch's error like ValuesMs.
	LowerMs, UpperMs []float64
	// Unbounded counts the bucket's samples whose upper end is unbounded (an end's clock offset unknown, or a raw
	// row stored without its interval): they are in Count and in every percentile, never dropped.
	Unbounded uint64
}

// UnboundedMs is the value an unbounded upper end enters a t-digest as (a t-digest turns +Inf into NaN), and
// unboundedFromMs the least upper percentile read back as +Inf (31,700 years: no stage is that long; a t-digest
// interpolating toward the sentinel gives values between the two, still far above any real latency).
const (
	UnboundedMs     = 1e30
	unboundedFromMs = 1e15
)

// upperMs reads an upper-end percentile: +Inf at or above unboundedFromMs.
func upperMs(v float32) float64 {
	if float64(v) >= unboundedFromMs || math.IsNaN(float64(v)) {
		return math.Inf(1)
	}
	return float64(v)
}

// PercentileResult is a PercentileQuery's answer, ordered by Key then Time.
type PercentileResult struct {
	Source Source
	Step   time.Duration // the step used: a rollup answer's step is a whole number of the tier's minutes or hours
	Points []PercentilePoint
}

// StagePercentiles answers q from the rollups or raw rows. Both use ClickHouse's t-digest (quantilesTDigest on raw
// values, quantilesTDigestMerge on the rollup's states), so the two answers agree within the sketch's error.
// Buckets without live samples are left out.
func (r *Reader) StagePercentiles(ctx context.Context, q PercentileQuery) (PercentileResult, error) {
	sp, err := q.Stage.spec()
	if err != nil {
		return PercentileResult{}, err
	}
	if err := q.Filter.validate(); err != nil {
		return PercentileResult{}, err
	}
	if err := validateLevels(q.Levels); err != nil {
		return PercentileResult{}, err
	}
	src, w, err := plan(q.Window, q.Source, q.IncludeReplays)
	if err != nil {
		return PercentileResult{}, err
	}
	key, err := latencyKey(q.GroupBy, src, sp)
	if err != nil {
		return PercentileResult{}, err
	}
	sql, args := latencySQL(src, sp, w, key, q.Filter, q.IncludeReplays,
		"quantilesTDigest%s("+levelsLiteral(q.Levels)+")(%s)", true)
	rows, err := r.conn.Query(ctx, sql+" ORDER BY k, t", args...)
	if err != nil {
		return PercentileResult{}, fmt.Errorf("query %s percentiles of %s: %w", src, q.Stage, classify(err))
	}
	defer rows.Close()
	res := PercentileResult{Source: src, Step: w.Step}
	for rows.Next() {
		var p PercentilePoint
		var vals, lows, highs []float32
		if err := rows.Scan(&p.Time, &p.Key, &vals, &lows, &highs, &p.Unbounded, &p.Count); err != nil {
			return PercentileResult{}, fmt.Errorf("scan %s percentiles: %w", src, err)
		}
		p.Time = p.Time.UTC()
		p.ValuesMs = make([]float64, len(vals))
		p.LowerMs = make([]float64, len(vals))
		p.UpperMs = make([]float64, len(vals))
		for i, v := range vals {
			p.ValuesMs[i] = float64(v)
			// A rollup row written before the bound states existed merges as an empty state: its band is unknown.
			p.LowerMs[i], p.UpperMs[i] = 0, math.Inf(1)
			if i < len(lows) && i < len(highs) {
				// The t-digest's own error may put an end a hair on the wrong side of the estimate: the band holds it.
				lo := float64(lows[i])
				if math.IsNaN(lo) {
					lo = 0
				}
				p.LowerMs[i], p.UpperMs[i] = math.Min(lo, p.ValuesMs[i]), math.Max(upperMs(highs[i]), p.ValuesMs[i])
			}
		}
		res.Points = append(res.Points, p)
	}
	if err := rows.Err(); err != nil {
		return PercentileResult{}, fmt.Errorf("read %s percentiles: %w", src, classify(err))
	}
	return res, nil
}

// DistributionQuery asks for one stage's latency distribution over the whole window, as its quantile function.
type DistributionQuery struct {
	Window         Window // Step is ignored except for choosing the source
	Stage          Stage
	GroupBy        Dimension
	Filter         Filter
	IncludeReplays bool
	Source         Source
}

// DistributionLevels returns the levels a distribution is read at: every 5th percentile, then the tail. Each call
// returns a new slice.
func DistributionLevels() []float64 {
	return []float64{0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
		0.75, 0.8, 0.85, 0.9, 0.95, 0.99, 0.999}
}

// DistributionSeries is one key's quantile function: ValuesMs[i] is the DistributionLevels()[i] quantile.
type DistributionSeries struct {
	Key      string
	ValuesMs []float64
	Count    uint64
}

// Distribution answers q with one quantile function per key over the whole window.
func (r *Reader) Distribution(ctx context.Context, q DistributionQuery) (Source, []DistributionSeries, error) {
	sp, err := q.Stage.spec()
	if err != nil {
		return "", nil, err
	}
	if err := q.Filter.validate(); err != nil {
		return "", nil, err
	}
	src, w, err := plan(q.Window, q.Source, q.IncludeReplays)
	if err != nil {
		return "", nil, err
	}
	key, err := latencyKey(q.GroupBy, src, sp)
	if err != nil {
		return "", nil, err
	}
	// One bucket spanning the window: a step longer than any window makes every row's bucket 0.
	w.Step = 1 << 30 * time.Second
	sql, args := latencySQL(src, sp, w, key, q.Filter, q.IncludeReplays,
		"quantilesTDigest%s("+levelsLiteral(DistributionLevels())+")(%s)", false)
	rows, err := r.conn.Query(ctx, sql+" ORDER BY k", args...)
	if err != nil {
		return "", nil, fmt.Errorf("query %s distribution of %s: %w", src, q.Stage, classify(err))
	}
	defer rows.Close()
	var out []DistributionSeries
	for rows.Next() {
		var t time.Time
		var s DistributionSeries
		var vals []float32
		if err := rows.Scan(&t, &s.Key, &vals, &s.Count); err != nil {
			return "", nil, fmt.Errorf("scan %s distribution: %w", src, err)
		}
		s.ValuesMs = make([]float64, len(vals))
		for i, v := range vals {
			s.ValuesMs[i] = float64(v)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return "", nil, fmt.Errorf("read %s distribution: %w", src, classify(err))
	}
	return src, out, nil
}

// plan validates w, picks the source, and for a rollup tier widens the step to a whole number of the tier's rows
// (minutes or hours) and aligns the window's start to the tier's resolution.
func plan(w Window, forced Source, includeReplays bool) (Source, Window, error) {
	if err := w.validate(); err != nil {
		return "", w, err
	}
	src := forced
	switch src {
	case SourceAuto:
		src = ChooseSource(w, includeReplays)
	case SourceRaw, SourceRollup, SourceRollup1h:
	default:
		return "", w, fmt.Errorf("source %q: want one of raw, rollup, rollup_1h or empty (auto): %w", src, ErrBadInput)
	}
	if src.IsRollup() && includeReplays {
		return "", w, fmt.Errorf("the rollups hold live samples only; a query including replays reads raw rows: %w", ErrBadInput)
	}
	if res := src.Resolution(); res > 0 {
		w.Step = max(w.Step.Truncate(res), res)
		w.From = w.From.Truncate(res)
	}
	return src, w, nil
}

// latencyKey returns the SQL expression a latency series is keyed by.
func latencyKey(d Dimension, src Source, sp stageSpec) (string, error) {
	switch d {
	case DimNone, "":
		return "''", nil
	case DimTopic:
		return "topic", nil
	case DimGroup:
		return "consumer_group", nil
	case DimHost:
		if src.IsRollup() {
			return "host", nil
		}
		return sp.host, nil
	}
	return "", fmt.Errorf("group by %q: want one of none, topic, group, host: %w", d, ErrBadInput)
}

// latencySQL builds "SELECT t, k, <aggregate>, count FROM ... WHERE ... GROUP BY t, k HAVING n > 0" for raw rows or
// the rollups. agg is a format with two %s: "Merge" or "" after the function name, then its argument; aggArgs are
// rendered by levelsLiteral. With band, the aggregate is followed by the same aggregate of the samples' lower ends
// (vl), of their upper ends (vh, an unbounded one as UnboundedMs) and the count of unbounded upper ends (u).
func latencySQL(src Source, sp stageSpec, w Window, key string, f Filter, includeReplays bool, agg string, band bool) (string, []any) {
	var wh where
	var timeCol, from, count, host, value string
	switch src {
	case SourceRollup, SourceRollup1h:
		timeCol, from, count, host = "minute", store.TableLatency1m, "sumMerge(live)", "host"
		if src == SourceRollup1h {
			timeCol, from = "hour", store.TableLatency1h
		}
		value = fmt.Sprintf(agg, "Merge", "latency_ms")
		if band {
			value += " AS v, " + fmt.Sprintf(agg, "Merge", "lower_ms") + " AS vl, " + fmt.Sprintf(agg, "Merge", "upper_ms") +
				" AS vh, sumMerge(unbounded) AS u"
		}
		wh.add("stage = ?", sp.rollup)
	default:
		timeCol, from, count, host = "observed_time", "latency_events", "count()", sp.host
		value = fmt.Sprintf(agg, "", "toFloat64("+sp.column+")")
		if band {
			hi := sp.prefix + "_hi_ms"
			value += " AS v, " + fmt.Sprintf(agg, "", sp.prefix+"_lo_ms") + " AS vl, " +
				fmt.Sprintf(agg, "", fmt.Sprintf("if(isFinite(%s), %s, %g)", hi, hi, UnboundedMs)) +
				" AS vh, countIf(NOT isFinite(" + hi + ")) AS u"
		}
	}
	if !band {
		value += " AS v"
	}
	wh.timeRange(timeCol, w.From, w.To)
	if src == SourceRaw {
		liveSamples(&wh, sp, includeReplays)
	}
	wh.in("cluster", f.Clusters)
	wh.in("topic", f.Topics)
	wh.in("consumer_group", f.Groups)
	wh.in(host, f.Hosts)
	b, bargs := bucket(timeCol, w.Step)
	args := append(append([]any{}, bargs...), wh.args...)
	sql := "SELECT " + b + " AS t, " + key + " AS k, " + value + ", " + count + " AS n FROM " + from +
		" WHERE " + wh.sql() + " GROUP BY t, k HAVING n > 0"
	return sql, args
}
