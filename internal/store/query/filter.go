package query

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stage names one latency stage (docs/architecture.md, "The three timestamps and the stages").
type Stage string

// The stages, named as the plugin's query model names them.
const (
	StageProduceAppend  Stage = "produce_append"  // append − produce: ingest
	StageAppendReceive  Stage = "append_receive"  // receive − append: queue wait
	StageReceiveProcess Stage = "receive_process" // processed − receive: processing
	StageE2E            Stage = "e2e"             // processed − produce
)

// stageSpec is how a stage is stored: its raw column, its validity bit in latency_events.valid, the rollup's stage
// enum value, and the raw column naming the host whose behaviour the stage measures (the rollup's host column).
type stageSpec struct {
	column, rollup, host string
	bit                  int
	prefix               string // the stage's interval columns are <prefix>_lo_ms and <prefix>_hi_ms
}

var stages = map[Stage]stageSpec{
	StageProduceAppend:  {column: "ingest_ms", prefix: "ingest", rollup: "ingest", host: "producer_host", bit: 1},
	StageAppendReceive:  {column: "queue_ms", prefix: "queue", rollup: "queue", host: "consumer_host", bit: 2},
	StageReceiveProcess: {column: "process_ms", prefix: "process", rollup: "process", host: "consumer_host", bit: 4},
	StageE2E:            {column: "e2e_ms", prefix: "e2e", rollup: "e2e", host: "consumer_host", bit: 8},
}

// Stages lists the stages in pipeline order.
func Stages() []Stage {
	return []Stage{StageProduceAppend, StageAppendReceive, StageReceiveProcess, StageE2E}
}

func (s Stage) spec() (stageSpec, error) {
	sp, ok := stages[s]
	if !ok {
		return stageSpec{}, fmt.Errorf("stage %q: want one of produce_append, append_receive, receive_process, e2e: %w", s, ErrBadInput)
	}
	return sp, nil
}

// Dimension is what a query's series are keyed by.
type Dimension string

// The dimensions. DimNone gives one series over everything the filter selects.
const (
	DimNone  Dimension = "none"
	DimTopic Dimension = "topic"
	DimGroup Dimension = "group"
	DimHost  Dimension = "host"
	// DimGroupType and DimSubtopology group consumer lag only: by Kafka group type (classic, consumer, share,
	// streams), and per streams-group subtopology ("group/subtopology"; other groups keep one series per group).
	DimGroupType   Dimension = "group_type"
	DimSubtopology Dimension = "subtopology"
)

// GroupTypes are the values lag_snapshots.group_type holds and a lag query's group-type filter accepts.
var GroupTypes = []string{"classic", "consumer", "share", "streams"}

// Filter selects rows by exact names; an empty list selects all. Values are bound as array parameters (has(?, col)).
type Filter struct {
	// Clusters selects by Kafka cluster (the cluster column every table has since schema version 6).
	Clusters []string
	Topics   []string
	Groups   []string
	Hosts    []string
	// GroupTypes selects consumer lag by Kafka group type (GroupTypes' values); other queries ignore it.
	GroupTypes []string
}

// Window is a query's time range [From, To) and the width of its time buckets.
type Window struct {
	From, To time.Time
	Step     time.Duration
}

// MinTime and MaxTime are the first and the last second ClickHouse's DateTime type holds (a UInt32 of Unix seconds):
// every time column Tidemark filters on is a DateTime. A bound outside them does not fail in ClickHouse, it wraps
// around (2107 reads as 1971, and [1970, 2262) as an empty range), so queries must not send one.
var (
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Unix(1<<32-1, 0).UTC()
)

// CheckTime returns an error wrapping ErrBadInput, naming what, when t is outside [MinTime, MaxTime].
func CheckTime(what string, t time.Time) error {
	if t.Before(MinTime) || t.After(MaxTime) {
		return fmt.Errorf("%s %s is outside the times ClickHouse's DateTime columns hold (%s to %s): %w", what,
			t.UTC().Format(time.RFC3339), MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339), ErrBadInput)
	}
	return nil
}

func (w Window) validate() error {
	if !w.To.After(w.From) {
		return fmt.Errorf("time range %s..%s is empty: %w", w.From.UTC().Format(time.RFC3339), w.To.UTC().Format(time.RFC3339), ErrBadInput)
	}
	// To is exclusive, but it is sent as a DateTime too: MaxTime is the latest end (its own second is left out).
	if w.From.Before(MinTime) || w.To.After(MaxTime) {
		return fmt.Errorf("time range %s..%s reaches outside the times ClickHouse's DateTime columns hold (%s to %s): choose a range within them: %w",
			w.From.UTC().Format(time.RFC3339), w.To.UTC().Format(time.RFC3339), MinTime.Format(time.RFC3339),
			MaxTime.Format(time.RFC3339), ErrBadInput)
	}
	if w.Step < time.Second {
		return fmt.Errorf("step %s: must be at least 1s: %w", w.Step, ErrBadInput)
	}
	return nil
}

// Source is where an answer comes from.
type Source string

// The sources. SourceAuto lets ChooseSource decide.
const (
	SourceAuto     Source = ""
	SourceRaw      Source = "raw"       // latency_events rows
	SourceRollup   Source = "rollup"    // the per-minute rollups, latency_1m
	SourceRollup1h Source = "rollup_1h" // the hourly rollups, latency_1h (schema version 2)
)

// IsRollup reports whether s is one of the rollup tiers: live samples only, time aligned to the tier's resolution.
func (s Source) IsRollup() bool { return s == SourceRollup || s == SourceRollup1h }

// Resolution returns the width of one row of a rollup tier (a minute or an hour), or 0 for raw rows and auto.
func (s Source) Resolution() time.Duration {
	switch s {
	case SourceRollup:
		return time.Minute
	case SourceRollup1h:
		return time.Hour
	}
	return 0
}

// RawMaxRange is the longest range answered from raw rows by default; longer ranges read a rollup tier. The rollups
// also outlive raw rows (90 against 14 days by default).
const RawMaxRange = 6 * time.Hour

// MaxMinuteRows is the most minute-tier rows (t-digest states) per series an automatically chosen answer merges:
// two days of minutes. A longer window reads the hourly tier even when its buckets are finer than an hour.
const MaxMinuteRows = 2 * 24 * 60

// ChooseSource picks where a window's answer comes from, by resolution and by cost:
//   - the hourly rollups for buckets of an hour or more: one t-digest state per hour and series. The minute tier's
//     states hold about as many values as their minute had samples at ~100 samples per minute and series, so merging
//     60 of them per hour costs what scanning raw rows does; cmd/bench-plugin measures the hourly tier against raw
//     rows (docs/plugin.md has the figures: ~18× faster for 7 days at 20 M rows);
//   - the hourly rollups too, in hour buckets coarser than asked, when the minute tier would merge more than
//     MaxMinuteRows states per series: Grafana's default 7-day panel at ~1000 points asks for 10-minute buckets,
//     which the minute tier answers no faster than raw rows (a user who wants them pins the minute tier);
//   - the per-minute rollups for buckets of a minute or more, or a window longer than RawMaxRange;
//   - raw rows otherwise.
//
// Queries that include replays always read raw rows: the rollups keep live samples only. The answers of all three
// agree within the t-digest's error (1% of rank), so a panel crossing a threshold moves by no more than that.
func ChooseSource(w Window, includeReplays bool) Source {
	switch {
	case includeReplays:
		return SourceRaw
	case w.Step >= time.Hour || ByCost(w):
		return SourceRollup1h
	case w.To.Sub(w.From) > RawMaxRange || w.Step >= time.Minute:
		return SourceRollup
	}
	return SourceRaw
}

// ByCost reports whether ChooseSource answers w from the hourly tier for cost rather than resolution: its buckets
// are finer than an hour and the minute tier would merge more than MaxMinuteRows states per series.
func ByCost(w Window) bool {
	return w.Step < time.Hour && w.To.Sub(w.From) > MaxMinuteRows*time.Minute
}

// where accumulates a WHERE clause from fixed SQL fragments and the values bound to their placeholders.
type where struct {
	conds []string
	args  []any
}

func (w *where) add(cond string, args ...any) {
	w.conds = append(w.conds, cond)
	w.args = append(w.args, args...)
}

// in adds has(?, column) when values is not empty.
func (w *where) in(column string, values []string) {
	if len(values) > 0 {
		w.add("has(?, "+column+")", values)
	}
}

func (w *where) sql() string { return strings.Join(w.conds, " AND ") }

// timeRange adds column >= from AND column < to, bound as Unix seconds.
func (w *where) timeRange(column string, from, to time.Time) {
	w.add(column+" >= toDateTime(?) AND "+column+" < toDateTime(?)", from.Unix(), to.Unix())
}

// bucket returns the SQL for column's time bucket of width step (bound twice) and its arguments. Buckets start at
// multiples of step since the Unix epoch, so raw and rollup answers with the same step share bucket boundaries.
func bucket(column string, step time.Duration) (string, []any) {
	s := int64(step / time.Second)
	return "toDateTime(intDiv(toUInt32(" + column + "), ?) * ?)", []any{s, s}
}

// liveSamples is the condition the rollup's materialized view uses for a live, valid sample of a stage
// (internal/store/migrations/0001_init.sql, 0004); includeReplays widens it to every reprocessing: replays and
// redeliveries.
func liveSamples(w *where, sp stageSpec, includeReplays bool) {
	w.add("bitAnd(valid, ?) != 0", sp.bit)
	if includeReplays {
		w.add("replay_class IN ('live', 'replay', 'redelivery')")
	} else {
		w.add("replay_class = 'live'")
	}
}

func validateLevels(levels []float64) error {
	if len(levels) == 0 || len(levels) > MaxLevels {
		return fmt.Errorf("%d percentiles: want 1 to %d: %w", len(levels), MaxLevels, ErrBadInput)
	}
	for _, l := range levels {
		// NaN fails both comparisons; the range also keeps levelsLiteral's text short (no 300-digit subnormals).
		if !(l >= MinLevel && l <= MaxLevel) {
			return fmt.Errorf("percentile %v: want a fraction in [%v, %v]: %w", l, MinLevel, MaxLevel, ErrBadInput)
		}
	}
	return nil
}

// MaxLevels is the most percentile levels one query may ask for.
const MaxLevels = 10

// MinLevel and MaxLevel bound a percentile level (a fraction): p0.001 to p99.999. Finer levels are beyond what a
// t-digest of a bucket's samples resolves, and a level such as 5e-324 would be written into the SQL as 300 digits,
// which ClickHouse rejects as a syntax error.
const (
	MinLevel = 0.00001
	MaxLevel = 0.99999
)

// MinThresholdMs and MaxThresholdMs bound an SLO latency threshold in milliseconds: a microsecond to a week.
// clickhouse-go renders a bound float with strconv's 'g' format, so a subnormal such as 5e-324 reaches ClickHouse as
// a literal it cannot parse; latencies are stored as whole milliseconds, so finer or larger thresholds mean nothing.
const (
	MinThresholdMs = 0.001
	MaxThresholdMs = 7 * 24 * 3600 * 1000.0
)

func validateThreshold(ms float64) error {
	if !(ms >= MinThresholdMs && ms <= MaxThresholdMs) {
		return fmt.Errorf("SLO threshold %v ms: want %v to %v ms: %w", ms, MinThresholdMs, MaxThresholdMs, ErrBadInput)
	}
	return nil
}

// MaxFilterValues is the most names one filter (topics, groups or hosts) may hold, and MaxFilterBytes the most bytes
// their names may total. clickhouse-go writes bound arrays into the query text, which ClickHouse caps at
// max_query_size (256 KiB by default): three filters at these limits, every byte escaped, stay well under it.
const (
	MaxFilterValues = 1000
	MaxFilterBytes  = 32 << 10
)

// validateValues checks one filter's names against MaxFilterValues and MaxFilterBytes; what names the filter is for
// the error.
func validateValues(what string, values []string) error {
	if len(values) > MaxFilterValues {
		return fmt.Errorf("%s filter of %d names: at most %d: %w", what, len(values), MaxFilterValues, ErrBadInput)
	}
	n := 0
	for _, v := range values {
		n += len(v)
	}
	if n > MaxFilterBytes {
		return fmt.Errorf("%s filter of %d bytes: at most %d: %w", what, n, MaxFilterBytes, ErrBadInput)
	}
	return nil
}

func (f Filter) validate() error {
	if err := validateValues("cluster", f.Clusters); err != nil {
		return err
	}
	if err := validateValues("topic", f.Topics); err != nil {
		return err
	}
	if err := validateValues("group", f.Groups); err != nil {
		return err
	}
	return validateValues("host", f.Hosts)
}

// levelsLiteral renders validated levels as the literal parameter list of a quantiles function, e.g. "0.5, 0.99".
// It is the one place a user's value reaches the SQL text other than through a placeholder: ClickHouse requires an
// aggregate function's parameters to be literals ("Parameters to aggregate functions must be literals"), and
// clickhouse-go binds a float as cast(x, 'Float64'). What is written is not the user's text but the shortest decimal
// rendering of a float64 that validateLevels has checked to lie in [MinLevel, MaxLevel], so it only ever holds digits and one '.'
// (strconv 'f' format never writes an exponent).
func levelsLiteral(levels []float64) string {
	parts := make([]string, len(levels))
	for i, l := range levels {
		parts[i] = strconv.FormatFloat(l, 'f', -1, 64)
	}
	return strings.Join(parts, ", ")
}
