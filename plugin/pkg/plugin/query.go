package plugin

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/tidemark/tidemark/internal/store/query"
)

// QueryType names one purpose-built question; docs/plugin.md documents each and its frames.
type QueryType string

// The query types this backend serves (src/types.ts lists the same).
const (
	QueryStagePercentiles QueryType = "stage_percentiles"
	QueryE2EDistribution  QueryType = "e2e_distribution"
	QueryConsumerLag      QueryType = "consumer_lag"
	QuerySLO              QueryType = "slo"
	QuerySlowestMessages  QueryType = "slowest_messages"
	QueryClockOffsets     QueryType = "clock_offsets"
	QueryProbeHealth      QueryType = "probe_health"
)

// QueryTypes lists every query type served, in the editor's order. The dashboards' test checks panels against it.
func QueryTypes() []QueryType {
	return []QueryType{QueryStagePercentiles, QueryE2EDistribution, QueryConsumerLag, QuerySLO, QuerySlowestMessages,
		QueryClockOffsets, QueryProbeHealth}
}

// Query is the query model shared with the frontend (src/types.ts). Pointers distinguish "not set" (take the
// default) from a zero the user typed (rejected where zero is meaningless).
type Query struct {
	QueryType QueryType `json:"queryType"`
	// Cluster selects by Kafka cluster (the cluster column); several joined by commas; empty means all.
	Cluster string `json:"cluster"`
	Topic   string `json:"topic"`
	Group   string `json:"group"`
	Host    string `json:"host"`
	// GroupType selects consumer lag by Kafka group type: classic, consumer (KIP-848), share, streams; several
	// joined by commas; empty means all.
	GroupType      string    `json:"groupType"`
	Stage          string    `json:"stage"`
	Percentiles    []float64 `json:"percentiles"`
	GroupBy        string    `json:"groupBy"`
	SLOThresholdMs *float64  `json:"sloThresholdMs"`
	SLOObjective   *float64  `json:"sloObjective"`
	Limit          *int      `json:"limit"`
	IncludeReplays bool      `json:"includeReplays"`
	// Fields keeps only these value fields of a time-series answer (the time field stays), e.g. ["burn_rate"]: an
	// alert rule's threshold then applies to that number alone. Empty keeps all.
	Fields []string `json:"fields"`
	// Tier pins where latency percentiles and distributions are read: "raw", "minute" or "hour"; empty or "auto"
	// lets query.ChooseSource pick by resolution and cost.
	Tier string `json:"tier"`
}

// Tiers maps the query model's tier names to the store's sources ("" and "auto": chosen by query.ChooseSource).
var Tiers = map[string]query.Source{"": query.SourceAuto, "auto": query.SourceAuto, "raw": query.SourceRaw,
	"minute": query.SourceRollup, "hour": query.SourceRollup1h}

// DefaultPercentiles returns the levels a query without percentiles gets: p50 and p99 (a new slice each call).
func DefaultPercentiles() []float64 { return []float64{0.5, 0.99} }

// Defaults of the query model.
const (
	DefaultStage          = query.StageE2E
	DefaultSLOThresholdMs = 500.0
	DefaultSLOObjective   = 0.999
	DefaultLimit          = 20
)

// ParsedQuery is a validated Query with defaults applied and filters split.
type ParsedQuery struct {
	Type           QueryType
	Filter         query.Filter
	Stage          query.Stage
	Levels         []float64
	GroupBy        query.Dimension
	ThresholdMs    float64
	Objective      float64
	Limit          int
	IncludeReplays bool
	Fields         []string
	// Source is the pinned tier (query.SourceAuto: chosen per window).
	Source query.Source
}

// ParseQuery decodes a query's JSON and validates it. queryType is the DataQuery's own QueryType, which Grafana fills
// from the same JSON field; either may be set. Errors are messages for the panel's error box.
func ParseQuery(raw json.RawMessage, queryType string) (ParsedQuery, error) {
	var q Query
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &q); err != nil {
			return ParsedQuery{}, fmt.Errorf("the query is not valid JSON for a Tidemark query: %v", err)
		}
	}
	if q.QueryType == "" {
		q.QueryType = QueryType(queryType)
	}
	p := ParsedQuery{Type: q.QueryType, IncludeReplays: q.IncludeReplays}
	if !knownType(p.Type) {
		return ParsedQuery{}, fmt.Errorf("unknown query type %q: choose one of %s", p.Type, joinTypes())
	}
	for _, step := range []func(*Query) error{p.parseSource, p.parseFilter, p.parseSeries, p.parseGroupBy, p.parseSLO,
		func(q *Query) error { return p.parseFields(q.Fields) }, p.parseLimit} {
		if err := step(&q); err != nil {
			return ParsedQuery{}, err
		}
	}
	return p, nil
}

// parseSource sets the tier the query reads (Tiers); a rollup tier holds live samples only, so it refuses
// includeReplays.
func (p *ParsedQuery) parseSource(q *Query) error {
	src, ok := Tiers[q.Tier]
	if !ok {
		return fmt.Errorf("unknown tier %q: choose auto, raw, minute or hour", q.Tier)
	}
	if src.IsRollup() && q.IncludeReplays {
		return fmt.Errorf("tier %s holds live samples only: a query including replays reads raw rows (tier auto or raw)", q.Tier)
	}
	p.Source = src
	return nil
}

// parseFilter sets the filter from the comma-separated cluster, topic, group, host and group type fields; a group
// type must be one of query.GroupTypes.
func (p *ParsedQuery) parseFilter(q *Query) error {
	var err error
	if p.Filter.Clusters, err = splitFilter("cluster", q.Cluster, nil); err != nil {
		return err
	}
	if p.Filter.Topics, err = splitFilter("topic", q.Topic, topicName); err != nil {
		return err
	}
	if p.Filter.Groups, err = splitFilter("group", q.Group, nil); err != nil {
		return err
	}
	if p.Filter.Hosts, err = splitFilter("host", q.Host, nil); err != nil {
		return err
	}
	if p.Filter.GroupTypes, err = splitFilter("group type", q.GroupType, nil); err != nil {
		return err
	}
	for _, gt := range p.Filter.GroupTypes {
		if !slices.Contains(query.GroupTypes, gt) {
			return fmt.Errorf("unknown group type %q: choose one of %s", gt, strings.Join(query.GroupTypes, ", "))
		}
	}
	return nil
}

// parseSeries sets the stage (DefaultStage when empty) and the percentile levels (DefaultPercentiles when none, at
// most query.MaxLevels).
func (p *ParsedQuery) parseSeries(q *Query) error {
	p.Stage = query.Stage(q.Stage)
	if p.Stage == "" {
		p.Stage = DefaultStage
	}
	if !knownStage(p.Stage) {
		return fmt.Errorf("unknown stage %q: choose one of produce_append, append_receive, receive_process, e2e", q.Stage)
	}
	p.Levels = q.Percentiles
	if len(p.Levels) == 0 {
		p.Levels = DefaultPercentiles()
	}
	if len(p.Levels) > query.MaxLevels {
		return fmt.Errorf("%d percentiles: at most %d per query", len(p.Levels), query.MaxLevels)
	}
	var err error
	p.Levels, err = parseLevels(p.Levels)
	return err
}

// parseGroupBy sets the dimension series are split by (none when empty): consumer lag has no host, and only
// consumer lag has a group type or a subtopology.
func (p *ParsedQuery) parseGroupBy(q *Query) error {
	p.GroupBy = query.Dimension(q.GroupBy)
	switch p.GroupBy {
	case "":
		p.GroupBy = query.DimNone
	case query.DimNone, query.DimTopic, query.DimGroup, query.DimHost, query.DimGroupType, query.DimSubtopology:
	default:
		return fmt.Errorf("unknown group by %q: choose one of none, topic, group, host, group_type, subtopology", q.GroupBy)
	}
	if p.Type == QueryConsumerLag && p.GroupBy == query.DimHost {
		return fmt.Errorf("consumer lag cannot be grouped by host (lag belongs to a group and topic): choose none, group, topic, group_type or subtopology")
	}
	if p.Type != QueryConsumerLag && (p.GroupBy == query.DimGroupType || p.GroupBy == query.DimSubtopology) {
		return fmt.Errorf("only consumer lag can be grouped by %s (latency rows carry no group type): choose none, topic, group or host", p.GroupBy)
	}
	return nil
}

// parseSLO sets the SLO threshold (ms, DefaultSLOThresholdMs when unset, within query.MinThresholdMs to
// query.MaxThresholdMs) and objective (a fraction in (0, 1), DefaultSLOObjective when unset).
func (p *ParsedQuery) parseSLO(q *Query) error {
	p.ThresholdMs = DefaultSLOThresholdMs
	if q.SLOThresholdMs != nil {
		p.ThresholdMs = *q.SLOThresholdMs
		if !(p.ThresholdMs > 0) || math.IsInf(p.ThresholdMs, 0) {
			return fmt.Errorf("SLO threshold %v ms must be a positive number of milliseconds", p.ThresholdMs)
		}
		if p.ThresholdMs < query.MinThresholdMs || p.ThresholdMs > query.MaxThresholdMs {
			return fmt.Errorf("SLO threshold %v ms is outside %v to %v ms (a microsecond to a week)",
				p.ThresholdMs, query.MinThresholdMs, query.MaxThresholdMs)
		}
	}
	p.Objective = DefaultSLOObjective
	if q.SLOObjective != nil {
		p.Objective = *q.SLOObjective
		if !(p.Objective > 0 && p.Objective < 1) {
			return fmt.Errorf("SLO objective %v is outside (0, 1): write 0.999 for 99.9%%", p.Objective)
		}
	}
	return nil
}

// parseLimit sets how many slowest messages are listed: DefaultLimit when unset, else 1 to query.MaxSlowest.
func (p *ParsedQuery) parseLimit(q *Query) error {
	p.Limit = DefaultLimit
	if q.Limit != nil {
		p.Limit = *q.Limit
		if p.Limit < 1 || p.Limit > query.MaxSlowest {
			return fmt.Errorf("limit %d must be from 1 to %d", p.Limit, query.MaxSlowest)
		}
	}
	return nil
}

// levelDecimals is how many decimals of a percent a percentile keeps: 0.07 is p7, 0.999 is p99.9, 0.123456 is
// p12.346. A field is named after, and ClickHouse asked for, the rounded level, so "fields":["p7"] matches what
// 0.07 produces (0.07*100 is 7.000000000000001 in float64).
const levelDecimals = 3

// roundLevel rounds a fraction to levelDecimals decimals of a percent.
func roundLevel(l float64) float64 {
	scale := math.Pow10(levelDecimals + 2)
	return math.Round(l*scale) / scale
}

// parseLevels checks percentiles (fractions) and rounds them to levelDecimals decimals of a percent. A level must be
// finite, in (0, 1), within [query.MinLevel, query.MaxLevel] (p0.001 to p99.999) after rounding, and name a field
// no other level names.
func parseLevels(levels []float64) ([]float64, error) {
	out := make([]float64, len(levels))
	seen := map[string]float64{}
	for i, l := range levels {
		if !(l > 0 && l < 1) {
			return nil, fmt.Errorf("percentile %v is outside (0, 1): write 0.99 for p99", l)
		}
		r := roundLevel(l)
		if r < query.MinLevel || r > query.MaxLevel {
			return nil, fmt.Errorf("percentile %v is outside %v to %v (p0.001 to p99.999)", l, query.MinLevel, query.MaxLevel)
		}
		name := levelName(r)
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("percentiles %v and %v are both %s (percentiles keep %d decimals of a percent): ask for each once",
				prev, l, name, levelDecimals)
		}
		seen[name] = l
		out[i] = r
	}
	return out, nil
}

func knownType(t QueryType) bool {
	for _, k := range QueryTypes() {
		if t == k {
			return true
		}
	}
	return false
}

func joinTypes() string {
	var s []string
	for _, t := range QueryTypes() {
		s = append(s, string(t))
	}
	return strings.Join(s, ", ")
}

func knownStage(s query.Stage) bool {
	for _, k := range query.Stages() {
		if s == k {
			return true
		}
	}
	return false
}

// topicName is Kafka's legal topic name (kafka.common.internals.Topic): letters, digits, '.', '_', '-'; at most 249.
var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// unresolved matches a template variable Grafana did not replace (alert rules run without dashboard variables).
var unresolved = regexp.MustCompile(`\$\{?[A-Za-z_]\w*\}?`)

// allValues are what a variable's "All" option may turn into when the dashboard sets a custom all value.
var allValues = map[string]bool{"*": true, "$__all": true, ".*": true}

// splitFilter splits a comma-separated filter into names. Empty selects all; a name must be non-empty, at most 255
// characters, without control characters, and match pattern when one is given; a filter holds at most
// query.MaxFilterValues names totalling at most query.MaxFilterBytes bytes (they are written into the SQL text,
// which ClickHouse caps at max_query_size).
func splitFilter(field, value string, pattern *regexp.Regexp) ([]string, error) {
	value = strings.TrimSpace(value)
	if value == "" || allValues[value] {
		return nil, nil
	}
	if m := unresolved.FindString(value); m != "" {
		return nil, fmt.Errorf("%s filter %q holds the template variable %s, which was not replaced: alert rules and "+
			"Explore have no dashboard variables, so write the %s name", field, value, m, field)
	}
	parts := strings.Split(value, ",")
	if len(parts) > query.MaxFilterValues {
		return nil, fmt.Errorf("%s filter has %d names: at most %d per query; filter by fewer or use All", field, len(parts), query.MaxFilterValues)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return nil, fmt.Errorf("%s filter %q is malformed: an empty name between commas", field, value)
		case len(p) > 255:
			return nil, fmt.Errorf("%s filter: name %.20q… is longer than 255 characters", field, p)
		case strings.IndexFunc(p, unicode.IsControl) >= 0:
			return nil, fmt.Errorf("%s filter %q holds a control character", field, p)
		case pattern != nil && !pattern.MatchString(p):
			return nil, fmt.Errorf("%s filter %q is not a Kafka topic name (letters, digits, '.', '_', '-')", field, p)
		}
		out = append(out, p)
	}
	if n := len(strings.Join(out, "")); n > query.MaxFilterBytes {
		return nil, fmt.Errorf("%s filter names total %d bytes: at most %d per query; filter by fewer or use All", field, n, query.MaxFilterBytes)
	}
	return out, nil
}

// FieldNames returns the value fields a parsed query's frames carry, in frame order; slowest messages (a table) has
// none to choose.
func (p ParsedQuery) FieldNames() []string {
	switch p.Type {
	case QueryStagePercentiles:
		var out []string
		for _, l := range p.Levels {
			out = append(out, levelName(l))
		}
		for _, l := range p.Levels {
			out = append(out, levelName(l)+"_lower", levelName(l)+"_upper")
		}
		return append(out, "samples", "unbounded")
	case QueryE2EDistribution:
		return []string{"latency"}
	case QueryConsumerLag:
		return []string{"lag", "time_lag", "expired", "partitions"}
	case QuerySLO:
		return []string{"compliance", "burn_rate", "error_budget_remaining", "good", "total", "compliance_min", "compliance_max", "unbounded"}
	case QueryClockOffsets:
		return []string{"offset", "uncertainty"}
	case QueryProbeHealth:
		return []string{"sent", "lost", "loss_ratio", "duplicates", "p50", "p99"}
	}
	return nil
}

func (p *ParsedQuery) parseFields(fields []string) error {
	if len(fields) == 0 {
		return nil
	}
	valid := p.FieldNames()
	if len(valid) == 0 {
		return fmt.Errorf("%s has no fields to choose: remove \"fields\"", p.Type)
	}
	for _, f := range fields {
		found := false
		for _, v := range valid {
			found = found || f == v
		}
		if !found {
			return fmt.Errorf("%s has no field %q: choose from %s", p.Type, f, strings.Join(valid, ", "))
		}
	}
	p.Fields = fields
	return nil
}
