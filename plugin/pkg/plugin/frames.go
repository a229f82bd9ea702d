package plugin

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/latency"
)

// run answers one parsed query and builds its frames. Time series come as one frame per series (the
// "timeseries-multi" shape), each with a time field and numeric fields labelled by the series' key, which is what
// Grafana's alerting reads.
func run(ctx context.Context, r *query.Reader, q ParsedQuery, w query.Window, s Settings) (data.Frames, error) {
	frames, err := answer(ctx, r, q, w, s)
	if err != nil || len(q.Fields) == 0 {
		return frames, err
	}
	return keepFields(frames, q.Fields), nil
}

// keepFields drops the value fields not named in keep; time and string fields (the distribution's percentile) stay.
func keepFields(frames data.Frames, keep []string) data.Frames {
	want := map[string]bool{}
	for _, k := range keep {
		want[k] = true
	}
	for _, f := range frames {
		kept := f.Fields[:0]
		for _, fld := range f.Fields {
			if !fld.Type().Numeric() || want[fld.Name] {
				kept = append(kept, fld)
			}
		}
		f.Fields = kept
	}
	return frames
}

func answer(ctx context.Context, r *query.Reader, q ParsedQuery, w query.Window, s Settings) (data.Frames, error) {
	switch q.Type {
	case QueryStagePercentiles:
		res, err := r.StagePercentiles(ctx, query.PercentileQuery{Window: w, Stage: q.Stage, Levels: q.Levels,
			GroupBy: q.GroupBy, Filter: q.Filter, IncludeReplays: q.IncludeReplays, Source: q.Source})
		if err != nil {
			return nil, err
		}
		return percentileFrames(res, q, w), nil
	case QueryE2EDistribution:
		src, series, err := r.Distribution(ctx, query.DistributionQuery{Window: w, Stage: q.Stage, GroupBy: q.GroupBy,
			Filter: q.Filter, IncludeReplays: q.IncludeReplays, Source: q.Source})
		if err != nil {
			return nil, err
		}
		return distributionFrames(src, series, q, w), nil
	case QueryConsumerLag:
		pts, err := r.ConsumerLag(ctx, query.LagQuery{Window: w, GroupBy: q.GroupBy, Filter: q.Filter})
		if err != nil {
			return nil, err
		}
		return lagFrames(pts, q), nil
	case QuerySLO:
		pts, err := r.SLO(ctx, query.SLOQuery{Window: w, ThresholdMs: q.ThresholdMs, GroupBy: q.GroupBy, Filter: q.Filter,
			IncludeReplays: q.IncludeReplays})
		if err != nil {
			return nil, err
		}
		return sloFrames(pts, q), nil
	case QuerySlowestMessages:
		msgs, err := r.Slowest(ctx, query.SlowestQuery{Window: w, Stage: q.Stage, Filter: q.Filter, Limit: q.Limit,
			IncludeReplays: q.IncludeReplays})
		if err != nil {
			return nil, err
		}
		return data.Frames{slowestFrame(msgs, q, s.TracingDatasourceUID, s.TraceURL)}, nil
	case QueryClockOffsets:
		pts, err := r.ClockOffsets(ctx, query.ClockOffsetQuery{Window: w, Hosts: q.Filter.Hosts, Clusters: q.Filter.Clusters})
		if err != nil {
			return nil, err
		}
		return clockFrames(pts), nil
	case QueryProbeHealth:
		pts, err := r.ProbeHealth(ctx, query.ProbeQuery{Window: w, Brokers: q.Filter.Hosts, Clusters: q.Filter.Clusters})
		if err != nil {
			return nil, err
		}
		return probeFrames(pts), nil
	}
	return nil, fmt.Errorf("query type %q has no handler", q.Type)
}

// levelName is a percentile's field name, its percent rounded to levelDecimals decimals: 0.99 → "p99",
// 0.999 → "p99.9", 0.07 → "p7" (not "p7.000000000000001"), 0.123456 → "p12.346".
func levelName(l float64) string {
	return "p" + strconv.FormatFloat(math.Round(l*math.Pow10(levelDecimals+2))/math.Pow10(levelDecimals), 'f', -1, 64)
}

// keyLabels labels a series by its group-by dimension; DimNone has no label.
func keyLabels(d query.Dimension, key string, extra data.Labels) data.Labels {
	l := data.Labels{}
	for k, v := range extra {
		l[k] = v
	}
	if d != query.DimNone {
		l[string(d)] = key
	}
	return l
}

func meta(custom map[string]any) *data.FrameMeta {
	return &data.FrameMeta{Type: data.FrameTypeTimeSeriesMulti, TypeVersion: data.FrameTypeVersion{0, 1}, Custom: custom}
}

// tierNotice says which tier answered a window asked as w, and why: the resolution asked for, its cost (buckets coarser
// than asked), or the user's pin.
// buckets is how the answer is bucketed ("in 1h0m0s buckets", "over the whole range").
func tierNotice(src query.Source, buckets string, q ParsedQuery, w query.Window) data.Notice {
	var why string
	switch {
	case q.Source != query.SourceAuto:
		why = "the tier is pinned to " + tierName(src)
	case src == query.SourceRollup1h && query.ByCost(w):
		why = fmt.Sprintf("%s buckets over %s would merge %d minute rollups per series (over %d): hourly data unless the "+
			"tier is pinned to minute", w.Step, w.To.Sub(w.From).Round(time.Minute), int(w.To.Sub(w.From)/time.Minute),
			query.MaxMinuteRows)
	case src == query.SourceRollup1h:
		why = "buckets of an hour or more use them"
	case src == query.SourceRollup:
		why = fmt.Sprintf("ranges over %s or minute buckets use them", query.RawMaxRange)
	case q.IncludeReplays:
		why = "replays are in raw rows only"
	default:
		why = fmt.Sprintf("ranges up to %s in buckets under a minute", query.RawMaxRange)
	}
	text := fmt.Sprintf("answered from %s %s (%s)", tierText[src], buckets, why)
	return data.Notice{Severity: data.NoticeSeverityInfo, Text: text}
}

var tierText = map[query.Source]string{query.SourceRaw: "raw rows", query.SourceRollup: "per-minute rollups (t-digest)",
	query.SourceRollup1h: "hourly rollups (t-digest)"}

func tierName(src query.Source) string {
	for name, s := range Tiers {
		if s == src && name != "" && name != "auto" {
			return name
		}
	}
	return string(src)
}

// percentileFrames makes one frame per key: a field per level (p50, p99, ...), then per level its band
// (p50_lower, p50_upper: the percentiles of the samples' lower and upper ends, between which the true percentile
// lies; null upper where the level falls among samples whose upper end is unbounded), the samples and the unbounded
// samples (counted in samples, never dropped).
func percentileFrames(res query.PercentileResult, q ParsedQuery, w query.Window) data.Frames {
	frames := data.Frames{}
	for i := 0; i < len(res.Points); {
		j := i
		for j < len(res.Points) && res.Points[j].Key == res.Points[i].Key {
			j++
		}
		pts := res.Points[i:j]
		labels := keyLabels(q.GroupBy, pts[0].Key, data.Labels{"stage": string(q.Stage)})
		times := make([]time.Time, len(pts))
		counts, unbounded := make([]float64, len(pts)), make([]float64, len(pts))
		vals := make([][]float64, len(q.Levels))
		lower, upper := make([][]*float64, len(q.Levels)), make([][]*float64, len(q.Levels))
		for k := range vals {
			vals[k] = make([]float64, len(pts))
			lower[k], upper[k] = make([]*float64, len(pts)), make([]*float64, len(pts))
		}
		for n, p := range pts {
			times[n] = p.Time
			counts[n], unbounded[n] = float64(p.Count), float64(p.Unbounded)
			for k := range q.Levels {
				vals[k][n] = p.ValuesMs[k]
				if k < len(p.LowerMs) && k < len(p.UpperMs) {
					lower[k][n], upper[k][n] = finite(p.LowerMs[k]), finite(p.UpperMs[k])
				}
			}
		}
		f := data.NewFrame("stage_percentiles", data.NewField("time", nil, times))
		for k, l := range q.Levels {
			f.Fields = append(f.Fields, data.NewField(levelName(l), labels, vals[k]).SetConfig(&data.FieldConfig{Unit: "ms"}))
		}
		for k, l := range q.Levels {
			f.Fields = append(f.Fields,
				data.NewField(levelName(l)+"_lower", labels, lower[k]).SetConfig(&data.FieldConfig{Unit: "ms"}),
				data.NewField(levelName(l)+"_upper", labels, upper[k]).SetConfig(&data.FieldConfig{Unit: "ms"}))
		}
		f.Fields = append(f.Fields, data.NewField("samples", labels, counts).SetConfig(&data.FieldConfig{Unit: "short"}),
			data.NewField("unbounded", labels, unbounded).SetConfig(&data.FieldConfig{Unit: "short"}))
		f.Meta = meta(map[string]any{"source": string(res.Source), "stepSeconds": int(res.Step / time.Second)})
		f.Meta.Notices = []data.Notice{tierNotice(res.Source, fmt.Sprintf("in %s buckets", res.Step), q, w)}
		frames = append(frames, f)
		i = j
	}
	return frames
}

func distributionFrames(src query.Source, series []query.DistributionSeries, q ParsedQuery, w query.Window) data.Frames {
	frames := data.Frames{}
	// The percentile is a string ("p99.9") so a bar chart can use it as its x axis.
	levels := query.DistributionLevels()
	pct := make([]string, len(levels))
	for i, l := range levels {
		pct[i] = levelName(l)
	}
	for _, s := range series {
		labels := keyLabels(q.GroupBy, s.Key, data.Labels{"stage": string(q.Stage)})
		f := data.NewFrame("e2e_distribution",
			data.NewField("percentile", nil, append([]string(nil), pct...)),
			data.NewField("latency", labels, s.ValuesMs).SetConfig(&data.FieldConfig{Unit: "ms"}),
		)
		f.Meta = &data.FrameMeta{Custom: map[string]any{"source": string(src), "samples": s.Count}}
		f.Meta.Notices = []data.Notice{tierNotice(src, "over the whole range", q, w)}
		frames = append(frames, f)
	}
	return frames
}

func lagFrames(pts []query.LagPoint, q ParsedQuery) data.Frames {
	frames := data.Frames{}
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].Key == pts[i].Key {
			j++
		}
		s := pts[i:j]
		labels := keyLabels(q.GroupBy, s[0].Key, nil)
		times := make([]time.Time, len(s))
		lag, tl, exp, parts := make([]float64, len(s)), make([]float64, len(s)), make([]float64, len(s)), make([]float64, len(s))
		for n, p := range s {
			times[n], lag[n], tl[n], exp[n], parts[n] = p.Time, float64(p.Lag), float64(p.TimeLagMs)/1000, float64(p.Expired), float64(p.Partitions)
		}
		f := data.NewFrame("consumer_lag",
			data.NewField("time", nil, times),
			data.NewField("lag", labels, lag).SetConfig(&data.FieldConfig{Unit: "short", DisplayNameFromDS: displayName("lag", q.GroupBy, s[0].Key)}),
			data.NewField("time_lag", labels, tl).SetConfig(&data.FieldConfig{Unit: "s", DisplayNameFromDS: displayName("time lag", q.GroupBy, s[0].Key)}),
			data.NewField("expired", labels, exp).SetConfig(&data.FieldConfig{Unit: "short"}),
			data.NewField("partitions", labels, parts).SetConfig(&data.FieldConfig{Unit: "short"}),
		)
		f.Meta = meta(nil)
		frames = append(frames, f)
		i = j
	}
	return frames
}

func displayName(what string, d query.Dimension, key string) string {
	if d == query.DimNone {
		return what
	}
	return key + " " + what
}

// sloFrames turns good/total counts into compliance (good/total), burn rate ((bad/total)/(1−objective), the Google
// SRE workbook's definition: 1 spends the error budget exactly over the SLO window), and the error budget remaining
// since the start of the range (1 − cumulative bad / ((1−objective) × cumulative total)). compliance_min and
// compliance_max bound the true compliance (latency.NewComplianceBand: good by upper ends, good by lower ends);
// unbounded counts the samples whose upper end is unbounded. Burn rate and budget use the estimate.
func sloFrames(pts []query.SLOPoint, q ParsedQuery) data.Frames {
	frames := data.Frames{}
	budget := 1 - q.Objective
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].Key == pts[i].Key {
			j++
		}
		s := pts[i:j]
		labels := keyLabels(q.GroupBy, s[0].Key, nil)
		n := len(s)
		times := make([]time.Time, n)
		comp, burn, remain, good, total := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		cmin, cmax, unb := make([]float64, n), make([]float64, n), make([]float64, n)
		var cumBad, cumTotal float64
		for k, p := range s {
			times[k], good[k], total[k] = p.Time, float64(p.Good), float64(p.Total)
			bad := float64(p.Total - p.Good)
			band := latency.NewComplianceBand(float64(p.Good), float64(p.GoodMin), float64(p.GoodMax), float64(p.Total))
			cmin[k], cmax[k], unb[k] = band.Min, band.Max, float64(p.Unbounded)
			comp[k] = float64(p.Good) / float64(p.Total)
			burn[k] = bad / float64(p.Total) / budget
			cumBad += bad
			cumTotal += float64(p.Total)
			remain[k] = 1 - cumBad/(budget*cumTotal)
		}
		f := data.NewFrame("slo",
			data.NewField("time", nil, times),
			data.NewField("compliance", labels, comp).SetConfig(&data.FieldConfig{Unit: "percentunit", DisplayNameFromDS: displayName("compliance", q.GroupBy, s[0].Key)}),
			data.NewField("burn_rate", labels, burn).SetConfig(&data.FieldConfig{Unit: "short", DisplayNameFromDS: displayName("burn rate", q.GroupBy, s[0].Key)}),
			data.NewField("error_budget_remaining", labels, remain).SetConfig(&data.FieldConfig{Unit: "percentunit", DisplayNameFromDS: displayName("error budget remaining", q.GroupBy, s[0].Key)}),
			data.NewField("good", labels, good),
			data.NewField("total", labels, total),
			data.NewField("compliance_min", labels, cmin).SetConfig(&data.FieldConfig{Unit: "percentunit", DisplayNameFromDS: displayName("compliance min", q.GroupBy, s[0].Key)}),
			data.NewField("compliance_max", labels, cmax).SetConfig(&data.FieldConfig{Unit: "percentunit", DisplayNameFromDS: displayName("compliance max", q.GroupBy, s[0].Key)}),
			data.NewField("unbounded", labels, unb).SetConfig(&data.FieldConfig{Unit: "short"}),
		)
		f.Meta = meta(map[string]any{"thresholdMs": q.ThresholdMs, "objective": q.Objective})
		frames = append(frames, f)
		i = j
	}
	return frames
}

// slowestFrame is a table of the slowest messages. Each trace id links to the trace (data links): inside Grafana to
// the tracing datasource (tracingUID: Tempo, Jaeger, Zipkin), and out to a tracing UI (traceURL, with
// ${__value.raw} for the id). A message without trace context has a null trace id, so it shows no link.
func slowestFrame(msgs []query.Message, q ParsedQuery, tracingUID, traceURL string) *data.Frame {
	n := len(msgs)
	times := make([]time.Time, n)
	topic, group, rc, prod, cons := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	trace := make([]*string, n)
	part, off, lat := make([]int64, n), make([]int64, n), make([]float64, n)
	for i, m := range msgs {
		times[i], topic[i], group[i], part[i], off[i] = m.ObservedTime, m.Topic, m.Group, int64(m.Partition), m.Offset
		lat[i], rc[i], prod[i], cons[i] = float64(m.LatencyMs), m.ReplayClass, m.ProducerHost, m.ConsumerHost
		if m.TraceID != "" {
			trace[i] = &msgs[i].TraceID
		}
	}
	traceCfg := &data.FieldConfig{DisplayName: "trace id"}
	if tracingUID != "" {
		traceCfg.Links = append(traceCfg.Links, data.DataLink{
			Title: "Open trace",
			Internal: &data.InternalDataLink{
				DatasourceUID: tracingUID,
				// Tempo reads a TraceQL query holding a trace id; Jaeger and Zipkin read "query" as the trace id
				// (a query type they do not know is their trace-id lookup).
				Query: map[string]any{"query": "${__value.raw}", "queryType": "traceql"},
			},
		})
	}
	if traceURL != "" {
		traceCfg.Links = append(traceCfg.Links, data.DataLink{Title: "Open in tracing UI", URL: traceURL, TargetBlank: true})
	}
	f := data.NewFrame("slowest_messages",
		data.NewField("time", nil, times),
		data.NewField("topic", nil, topic),
		data.NewField("group", nil, group),
		data.NewField("partition", nil, part),
		data.NewField("offset", nil, off),
		data.NewField("latency", nil, lat).SetConfig(&data.FieldConfig{Unit: "ms", DisplayName: string(q.Stage) + " latency"}),
		data.NewField("replay_class", nil, rc),
		data.NewField("trace_id", nil, trace).SetConfig(traceCfg),
		data.NewField("producer_host", nil, prod),
		data.NewField("consumer_host", nil, cons),
	)
	f.Meta = &data.FrameMeta{PreferredVisualization: data.VisTypeTable}
	return f
}

// finite is v, or nil for ±Inf and NaN (an open side of an interval).
func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}

func clockFrames(pts []query.ClockOffsetPoint) data.Frames {
	frames := data.Frames{}
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].Host == pts[i].Host && pts[j].Kind == pts[i].Kind {
			j++
		}
		s := pts[i:j]
		labels := data.Labels{"host": s[0].Host, "kind": s[0].Kind}
		times := make([]time.Time, len(s))
		off, est := make([]float64, len(s)), make([]float64, len(s))
		unc, lo, hi := make([]*float64, len(s)), make([]*float64, len(s)), make([]*float64, len(s))
		for k, p := range s {
			times[k], off[k], est[k] = p.Time, p.OffsetMs, p.EstimateMs
			unc[k], lo[k], hi[k] = finite(p.UncertaintyMs), finite(p.LowerMs), finite(p.UpperMs)
		}
		// An interval's open side (a causal envelope bounds one side only) is null, never a number: no panel may show
		// a precision the estimate does not have.
		f := data.NewFrame("clock_offsets",
			data.NewField("time", nil, times),
			data.NewField("offset", labels, off).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: s[0].Host + " offset"}),
			data.NewField("estimate", labels, est).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: s[0].Host + " estimate"}),
			data.NewField("lower", labels, lo).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: s[0].Host + " lower bound"}),
			data.NewField("upper", labels, hi).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: s[0].Host + " upper bound"}),
			data.NewField("uncertainty", labels, unc).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: s[0].Host + " ± uncertainty"}),
		)
		f.Meta = &data.FrameMeta{Type: data.FrameTypeTimeSeriesMulti, TypeVersion: data.FrameTypeVersion{0, 1}}
		frames = append(frames, f)
		i = j
	}
	return frames
}

func probeFrames(pts []query.ProbePoint) data.Frames {
	frames := data.Frames{}
	for i := 0; i < len(pts); {
		j := i
		for j < len(pts) && pts[j].Broker == pts[i].Broker {
			j++
		}
		s := pts[i:j]
		labels := data.Labels{"broker": s[0].Broker}
		n := len(s)
		times := make([]time.Time, n)
		sent, lost, loss, dups, p50, p99 := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
		for k, p := range s {
			times[k], sent[k], lost[k], dups[k], p50[k], p99[k] = p.Time, float64(p.Sent), float64(p.Lost), float64(p.Duplicates), p.P50Ms, p.P99Ms
			loss[k] = float64(p.Lost) / float64(p.Sent)
		}
		b := "broker " + s[0].Broker
		f := data.NewFrame("probe_health",
			data.NewField("time", nil, times),
			data.NewField("sent", labels, sent).SetConfig(&data.FieldConfig{Unit: "short", DisplayNameFromDS: b + " sent"}),
			data.NewField("lost", labels, lost).SetConfig(&data.FieldConfig{Unit: "short", DisplayNameFromDS: b + " lost"}),
			data.NewField("loss_ratio", labels, loss).SetConfig(&data.FieldConfig{Unit: "percentunit", DisplayNameFromDS: b + " loss"}),
			data.NewField("duplicates", labels, dups).SetConfig(&data.FieldConfig{Unit: "short", DisplayNameFromDS: b + " duplicates"}),
			data.NewField("p50", labels, p50).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: b + " p50"}),
			data.NewField("p99", labels, p99).SetConfig(&data.FieldConfig{Unit: "ms", DisplayNameFromDS: b + " p99"}),
		)
		f.Meta = &data.FrameMeta{Type: data.FrameTypeTimeSeriesMulti, TypeVersion: data.FrameTypeVersion{0, 1}}
		frames = append(frames, f)
		i = j
	}
	return frames
}
