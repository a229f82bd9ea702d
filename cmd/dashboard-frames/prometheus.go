package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/data"

	"github.com/tidemark/tidemark/dashboards"
)

// promVars are Grafana's own interval variables for a Prometheus target, as Grafana computes them: $__interval is
// the panel's interval, $__rate_interval max(4 × scrape interval, interval + scrape interval), $__range the range.
func promVars(o options) map[string]string {
	rate := max(4*o.scrape, o.step()+o.scrape)
	return map[string]string{
		"__interval":      promDuration(o.step()),
		"__interval_ms":   strconv.FormatInt(o.step().Milliseconds(), 10),
		"__rate_interval": promDuration(rate),
		"__range":         promDuration(o.to.Sub(o.from).Round(time.Second)),
		"__range_s":       strconv.FormatInt(int64(o.to.Sub(o.from).Round(time.Second)/time.Second), 10),
	}
}

// step is the query step: the panel's interval, not below the scrape interval (the datasource's min interval).
func (o options) step() time.Duration { return max(o.interval, o.scrape) }

// promDuration writes d in PromQL's duration syntax (whole seconds, or milliseconds below a second).
func promDuration(d time.Duration) string {
	if d%time.Second != 0 || d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}

// regexMeta are the characters Grafana's regex format escapes.
var regexMeta = regexp.MustCompile(`[\\^$*+?.()|{}\[\]/]`)

// promInterpolate interpolates a PromQL expression: the dashboard's variables (${x:regex} by promRegex) and Grafana's
// $__ variables.
func promInterpolate(expr string, vars map[string]string, o options) string {
	all := maps.Clone(vars)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, promVars(o))
	return substitute(expr, all, promRegex)
}

// promRegex is Grafana's regex format of a variable's value for PromQL: each value escaped, several joined as (a|b),
// the escape's backslash doubled inside PromQL's string literal.
func promRegex(v string) string {
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = regexMeta.ReplaceAllStringFunc(p, func(c string) string { return `\\` + c })
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "(" + strings.Join(parts, "|") + ")"
}

// legendRef matches {{label}} in a legendFormat.
var legendRef = regexp.MustCompile(`\{\{\s*([A-Za-z0-9_]+)\s*\}\}`)

// seriesName is a series' display name as Grafana's Prometheus datasource gives it: the legendFormat with the
// series' labels, else the metric with its labels in braces.
func seriesName(legend string, labels map[string]string) string {
	if legend != "" && legend != "__auto" {
		return legendRef.ReplaceAllStringFunc(legend, func(m string) string {
			return labels[legendRef.FindStringSubmatch(m)[1]]
		})
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		if k != "__name__" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + `="` + labels[k] + `"`
	}
	if len(parts) == 0 {
		return labels["__name__"]
	}
	return labels["__name__"] + "{" + strings.Join(parts, ", ") + "}"
}

// promResponse is the HTTP API's answer to query and query_range.
type promResponse struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	ErrorType string `json:"errorType"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// promQuery evaluates one target with Prometheus's HTTP API: query_range over the range with the step, or an
// instant query at the range's end when the target says instant.
func promQuery(ctx context.Context, o options, expr string, instant bool) (promResponse, error) {
	q := url.Values{"query": {expr}}
	path := "/api/v1/query_range"
	if instant {
		path = "/api/v1/query"
		q.Set("time", strconv.FormatInt(o.to.Unix(), 10))
	} else {
		step := o.step()
		// aligned to the step as Grafana aligns a range query
		from := o.from.Truncate(step)
		q.Set("start", strconv.FormatInt(from.Unix(), 10))
		q.Set("end", strconv.FormatInt(o.to.Unix(), 10))
		q.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	}
	u := strings.TrimSuffix(o.prometheus, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(q.Encode()))
	if err != nil {
		return promResponse{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return promResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return promResponse{}, err
	}
	var r promResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return promResponse{}, fmt.Errorf("%s: status %d: %w", path, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return r, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r, nil
}

// sample reads one [unix seconds, "value"] pair of the API.
func sample(p [2]any) (time.Time, float64, error) {
	ts, ok := p[0].(float64)
	s, ok2 := p[1].(string)
	if !ok || !ok2 {
		return time.Time{}, 0, fmt.Errorf("sample %v", p)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, 0, err
	}
	sec, frac := math.Modf(ts)
	return time.Unix(int64(sec), int64(math.Round(frac*1e3))*int64(time.Millisecond)).UTC(), v, nil
}

// promFrames turns the API's answer into frames as Grafana's Prometheus datasource does: one frame per series, a
// time field and a value field carrying the series' labels, displayed by the legendFormat.
func promFrames(r promResponse, refID, legend string) (data.Frames, error) {
	var out data.Frames
	for _, s := range r.Data.Result {
		pts := s.Values
		if r.Data.ResultType == "vector" {
			pts = [][2]any{s.Value}
		}
		times := make([]time.Time, 0, len(pts))
		vals := make([]float64, 0, len(pts))
		for _, p := range pts {
			t, v, err := sample(p)
			if err != nil {
				return nil, err
			}
			times = append(times, t)
			vals = append(vals, v)
		}
		labels := data.Labels{}
		for k, v := range s.Metric {
			if k != "__name__" {
				labels[k] = v
			}
		}
		name := seriesName(legend, s.Metric)
		value := data.NewField("Value", labels, vals).SetConfig(&data.FieldConfig{DisplayNameFromDS: name})
		f := data.NewFrame(name, data.NewField("Time", nil, times), value)
		f.RefID = refID
		f.Meta = &data.FrameMeta{Type: data.FrameTypeTimeSeriesMulti, TypeVersion: data.FrameTypeVersion{0, 1},
			ExecutedQueryString: "Expr: " + s.Metric["__name__"]}
		out = append(out, f)
	}
	return out, nil
}

// promPanel evaluates every target of a Prometheus panel; a query error is recorded in its result.
func promPanel(ctx context.Context, o options, pn dashboards.Panel, vars map[string]string) (map[string]json.RawMessage, error) {
	res := map[string]json.RawMessage{}
	for _, t := range pn.Targets {
		refID, _ := t["refId"].(string)
		expr, _ := t["expr"].(string)
		legend, _ := t["legendFormat"].(string)
		instant, _ := t["instant"].(bool)
		if rng, ok := t["range"].(bool); ok && rng {
			instant = false
		}
		expr = promInterpolate(expr, vars, o)
		var dr backend.DataResponse
		r, err := promQuery(ctx, o, expr, instant)
		if err == nil {
			dr.Frames, err = promFrames(r, refID, legend)
		}
		if err != nil {
			dr.Error = fmt.Errorf("%s: %w", expr, err)
		}
		js, err := json.Marshal(dr)
		if err != nil {
			return nil, fmt.Errorf("panel %q: %w", pn.Title, err)
		}
		res[refID] = js
	}
	return res, nil
}

// promNoData names the Prometheus panels ("file / title") whose query legitimately answers nothing after the short
// load make screenshots runs, with the reason; the renderer reports them as "no data" instead of failing, and only
// when they did draw nothing. Keep it short: every other Prometheus panel must draw.
var promNoData = map[string]string{
	"consumer-group.json / Catch-up estimate": "the catch-up estimate exists only while a backlog drains at a " +
		"measurable rate over the status window; a short load may end before one has (make screenshots' 75 s load draws it)",
	"consumer-group.json / Retention margin in bytes": "tidemark_lag_topic_retention_margin_bytes is emitted only for a " +
		"topic with a finite retention.bytes; the load's topic keeps the broker default (-1, unbounded) (docs/metrics.md)",
	"consumer-group.json / Committed ahead of the end": "tidemark_lag_partition_ahead_offsets is emitted only while a " +
		"commit is past the log end (offset sync, truncation); the load's consumers never commit past it",
	"consumer-group.json / Skipped at the head of the backlog": "the control and compacted offsets are emitted only " +
		"when > 0; the load writes no transactions and its topic is not compacted",
	"consumer-group.json / Stale partitions": "tidemark_lag_partition_stale_seconds exists only while a partition's " +
		"offsets or commits could not be read; every read of the run succeeded",
	"consumer-group.json / Stale commits on unassigned partitions": "the expression keeps only > 0: the group's two " +
		"members are assigned every partition it commits on, so there are no stale commits",
	"overview.json / Failing partitions by error code": "tidemark_lag_exporter_partition_errors_total has series only " +
		"for partitions failing now; no offset read failed during the run",
}
