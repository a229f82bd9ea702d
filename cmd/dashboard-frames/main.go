// Command dashboard-frames asks the Grafana plugin's backend for the frames of every panel of the shipped dashboards,
// the way Grafana does: it starts the gpx_tidemark binary with hashicorp/go-plugin and the SDK's handshake, resolves
// each dashboard's template variables through the plugin's resource handler (CallResource over gRPC), interpolates
// them into each Tidemark target and sends one QueryData call per panel over gRPC. With -prometheus it evaluates each
// Prometheus panel's expressions with that Prometheus's HTTP API (query_range over the range; prometheus.go) and
// makes frames of the series as Grafana's Prometheus datasource does. It writes one JSON document that
// scripts/dashboards.mjs in plugin/ renders with Grafana's UI components (make screenshots; docs/plugin.md).
//
// Usage:
//
//	dashboard-frames -plugin ./gpx_tidemark -clickhouse 127.0.0.1:19000 -database tidemark_shots \
//	  -from 2026-01-02T15:04:05Z -to 2026-01-02T15:05:05Z -group shots-app \
//	  -prometheus http://127.0.0.1:19090 -scrape-interval 5s -out frames.json dashboards/*.json
//
// Output: {"from": ms, "to": ms, "intervalMs": ms, "dashboards": [{"file", "title", "variables": {name: value},
// "panels": [{"id", "type", "title", "gridPos", "fieldConfig", "options", "datasource", "results": {refId:
// {"frames": [DataFrameJSON...], "error": "..."}}, "excluded": "reason", "noData": "reason"}]}]}. Frames are the
// SDK's DataFrameJSON, what Grafana's /api/ds/query returns and @grafana/data's dataFrameFromJSON reads. Without
// -prometheus, panels whose targets read Prometheus carry "excluded" with the reason instead of results. "noData"
// is the reason a Prometheus panel may legitimately answer nothing after a short run (promNoData).
//
// Errors: a plugin that does not start, a variable whose values cannot be listed, or a -group the groups variable
// does not list stop the command with a non-zero exit. A query error is recorded in the panel's result.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/grpcplugin"
	"github.com/grafana/grafana-plugin-sdk-go/genproto/pluginv2"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tidemark/tidemark/dashboards"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dashboard-frames:", err)
		os.Exit(1)
	}
}

type options struct {
	plugin, clickhouse, database, group, out string
	prometheus                               string
	from, to                                 time.Time
	interval, scrape                         time.Duration
	maxDataPoints                            int64
	files                                    []string
}

func run() error {
	var o options
	var from, to string
	flag.StringVar(&o.plugin, "plugin", "", "the gpx_tidemark binary (built from ./plugin/pkg)")
	flag.StringVar(&o.clickhouse, "clickhouse", os.Getenv("TIDEMARK_CLICKHOUSE_ADDR"), "ClickHouse native address (the datasource's address)")
	flag.StringVar(&o.database, "database", "tidemark", "the datasource's database")
	flag.StringVar(&o.group, "group", "", "the value of single-value group variables (the consumer-group dashboard's $group)")
	flag.StringVar(&from, "from", "", "time range start, RFC 3339")
	flag.StringVar(&to, "to", "", "time range end, RFC 3339")
	flag.DurationVar(&o.interval, "interval", 2*time.Second, "the panels' interval (Grafana's $__interval)")
	flag.StringVar(&o.prometheus, "prometheus", "", "Prometheus base URL (http://HOST:PORT) that scraped the run; without it Prometheus panels are left out")
	flag.DurationVar(&o.scrape, "scrape-interval", 5*time.Second, "that Prometheus's scrape interval (for $__rate_interval and the minimum step)")
	flag.Int64Var(&o.maxDataPoints, "max-data-points", 1000, "the panels' MaxDataPoints")
	flag.StringVar(&o.out, "out", "", "output file (default stdout)")
	flag.Parse()
	o.files = flag.Args()
	var err error
	if o.from, err = time.Parse(time.RFC3339, from); err != nil {
		return fmt.Errorf("-from: %w", err)
	}
	if o.to, err = time.Parse(time.RFC3339, to); err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	if !o.to.After(o.from) {
		return errors.New("-to must be after -from")
	}
	if o.plugin == "" || o.clickhouse == "" || len(o.files) == 0 {
		return errors.New("need -plugin, -clickhouse (or TIDEMARK_CLICKHOUSE_ADDR) and dashboard files")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := startPlugin(o)
	if err != nil {
		return err
	}
	defer p.close()
	out := Output{From: o.from.UnixMilli(), To: o.to.UnixMilli(), IntervalMs: o.interval.Milliseconds()}
	for _, f := range o.files {
		d, err := frames(ctx, p, o, f)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		out.Dashboards = append(out.Dashboards, d)
	}
	w := io.Writer(os.Stdout)
	if o.out != "" {
		fh, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer fh.Close()
		w = fh
	}
	enc := json.NewEncoder(w)
	return enc.Encode(out)
}

// Output is the document the renderer reads.
type Output struct {
	From       int64       `json:"from"`
	To         int64       `json:"to"`
	IntervalMs int64       `json:"intervalMs"`
	Dashboards []Dashboard `json:"dashboards"`
}

// Dashboard is one shipped dashboard with its panels' frames.
type Dashboard struct {
	File      string            `json:"file"`
	Title     string            `json:"title"`
	Variables map[string]string `json:"variables"`
	Panels    []Panel           `json:"panels"`
}

// Panel is one panel as the dashboard file has it, with the backend's answer per target.
type Panel struct {
	ID          int                        `json:"id"`
	Type        string                     `json:"type"`
	Title       string                     `json:"title"`
	GridPos     dashboards.GridPos         `json:"gridPos"`
	FieldConfig dashboards.FieldConfig     `json:"fieldConfig"`
	Options     map[string]any             `json:"options,omitempty"`
	Datasource  string                     `json:"datasource"`
	Results     map[string]json.RawMessage `json:"results,omitempty"`
	Excluded    string                     `json:"excluded,omitempty"`
	NoData      string                     `json:"noData,omitempty"`
}

// plugin is a running gpx_tidemark and its gRPC clients.
type plugin struct {
	client   *goplugin.Client
	data     grpcplugin.DataClient
	resource grpcplugin.ResourceClient
	pctx     *pluginv2.PluginContext
}

func (p *plugin) close() { p.client.Kill() }

// startPlugin starts the binary as Grafana does: go-plugin with the SDK's handshake, gRPC only.
func startPlugin(o options) (*plugin, error) {
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: grpcplugin.ProtocolVersion,
			MagicCookieKey: grpcplugin.MagicCookieKey, MagicCookieValue: grpcplugin.MagicCookieValue},
		VersionedPlugins: map[int]goplugin.PluginSet{grpcplugin.ProtocolVersion: {
			"data":     &grpcplugin.DataGRPCPlugin{},
			"resource": &grpcplugin.ResourceGRPCPlugin{},
		}},
		Cmd:              exec.Command(o.plugin),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     60 * time.Second,
		// the plugin's own log lines arrive through this logger; warnings and errors are enough here
		Logger: hclog.New(&hclog.LoggerOptions{Name: "gpx_tidemark", Level: hclog.Warn, Output: os.Stderr}),
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("start %s: %w", o.plugin, err)
	}
	data, err := rpc.Dispense("data")
	if err == nil {
		var res any
		if res, err = rpc.Dispense("resource"); err == nil {
			js, _ := json.Marshal(map[string]any{"address": o.clickhouse, "database": o.database})
			return &plugin{client: client, data: data.(grpcplugin.DataClient), resource: res.(grpcplugin.ResourceClient),
				pctx: &pluginv2.PluginContext{OrgId: 1, PluginId: dashboards.PluginType,
					DataSourceInstanceSettings: &pluginv2.DataSourceInstanceSettings{Id: 1, Uid: "tidemark", Name: "Tidemark",
						JsonData: js, LastUpdatedMS: time.Now().UnixMilli()}}}, nil
		}
	}
	client.Kill()
	return nil, err
}

// list asks the resource handler for a variable's values (GET /<kind>?filter...), as Grafana does for the
// plugin's variable query.
func (p *plugin) list(ctx context.Context, query map[string]string) ([]string, error) {
	kind := query["kind"]
	params := []string{}
	keys := make([]string, 0, len(query))
	for k := range query {
		if k != "kind" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		params = append(params, k+"="+query[k])
	}
	u := kind
	if len(params) > 0 {
		u += "?" + strings.Join(params, "&")
	}
	stream, err := p.resource.CallResource(ctx, &pluginv2.CallResourceRequest{PluginContext: p.pctx, Path: kind, Method: "GET", Url: u})
	if err != nil {
		return nil, err
	}
	var body []byte
	var status int32
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if r.Code != 0 {
			status = r.Code
		}
		body = append(body, r.Body...)
	}
	var v struct {
		Values []string `json:"values"`
		Error  string   `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("resource %s: status %d: %w", u, status, err)
	}
	if status != 200 {
		return nil, fmt.Errorf("resource %s: status %d: %s", u, status, v.Error)
	}
	return v.Values, nil
}

// varRef matches $name, ${name} and ${name:format}.
var varRef = regexp.MustCompile(`\$\{([A-Za-z0-9_]+)(?::[a-z]+)?\}|\$([A-Za-z0-9_]+)`)

// interpolate replaces the variables in s; a multi-value variable's value is already comma-separated (csv).
// Unknown names ($__interval and the like) are left as they are.
func interpolate(s string, vars map[string]string) string { return substitute(s, vars, nil) }

// substitute replaces each variable reference in s that vars names by its value; a ${name:regex} reference by
// regex(value) when regex is not nil (a datasource's regex format).
func substitute(s string, vars map[string]string, regex func(string) string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		v, ok := vars[sub[1]+sub[2]]
		switch {
		case !ok:
			return m
		case regex != nil && strings.HasSuffix(m, ":regex}"):
			return regex(v)
		}
		return v
	})
}

// resolve gives each variable its value as Grafana would with the dashboard's saved selection: "All" is the
// variable's all value when it has one, else every listed value; a single-value variable without a selection (the
// consumer-group dashboard's group) takes -group, which must be among the listed values; a textbox keeps its text.
func resolve(ctx context.Context, p *plugin, o options, d dashboards.Dashboard) (map[string]string, error) {
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		switch v.Type {
		case "datasource":
			continue
		case "textbox", "constant":
			s, _ := v.Current["value"].(string)
			vars[v.Name] = s
			continue
		case "query":
		default:
			return nil, fmt.Errorf("variable %s: type %s not supported", v.Name, v.Type)
		}
		if v.Datasource == nil || v.Datasource.Type != dashboards.PluginType {
			return nil, fmt.Errorf("variable %s: not a Tidemark query", v.Name)
		}
		raw, _ := v.Query.(map[string]any)
		q := map[string]string{}
		for k, x := range raw {
			s, _ := x.(string)
			q[k] = interpolate(s, vars)
		}
		values, err := p.list(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		all := v.Current != nil && fmt.Sprint(v.Current["value"]) == "[$__all]"
		switch {
		case all && v.AllValue != "":
			vars[v.Name] = v.AllValue
		case all:
			vars[v.Name] = strings.Join(values, ",")
		case !v.Multi && v.Current == nil:
			if !slices.Contains(values, o.group) {
				return nil, fmt.Errorf("variable %s: -group %q is not among the listed %q", v.Name, o.group, values)
			}
			vars[v.Name] = o.group
		default:
			return nil, fmt.Errorf("variable %s: saved selection %v not supported", v.Name, v.Current)
		}
		if len(values) == 0 {
			return nil, fmt.Errorf("variable %s: the backend lists no values (%v): the load wrote nothing it reads", v.Name, q)
		}
	}
	return vars, nil
}

// frames reads one dashboard file and asks the backend for each Tidemark panel's frames.
func frames(ctx context.Context, p *plugin, o options, file string) (Dashboard, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return Dashboard{}, err
	}
	var d dashboards.Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return Dashboard{}, err
	}
	vars, err := resolve(ctx, p, o, d)
	if err != nil {
		return Dashboard{}, err
	}
	out := Dashboard{File: filepath.Base(file), Title: d.Title, Variables: vars}
	for _, pn := range d.Panels {
		if pn.Type == "row" {
			continue
		}
		op := Panel{ID: pn.ID, Type: pn.Type, Title: pn.Title, GridPos: pn.GridPos, FieldConfig: pn.FieldConfig, Options: pn.Options}
		if pn.Datasource != nil {
			op.Datasource = pn.Datasource.Type
		}
		if op.Datasource == "prometheus" && o.prometheus != "" {
			if op.Results, err = promPanel(ctx, o, pn, vars); err != nil {
				return Dashboard{}, err
			}
			op.NoData = promNoData[filepath.Base(file)+" / "+pn.Title]
			out.Panels = append(out.Panels, op)
			continue
		}
		if op.Datasource != dashboards.PluginType {
			op.Excluded = fmt.Sprintf("reads the %s datasource; no -prometheus was given", op.Datasource)
			out.Panels = append(out.Panels, op)
			continue
		}
		var qs []backend.DataQuery
		for _, t := range pn.Targets {
			js, err := json.Marshal(t)
			if err != nil {
				return Dashboard{}, err
			}
			var tq map[string]any
			if err := json.Unmarshal([]byte(interpolate(string(js), vars)), &tq); err != nil {
				return Dashboard{}, fmt.Errorf("panel %q: interpolated target: %w", pn.Title, err)
			}
			delete(tq, "datasource")
			js, _ = json.Marshal(tq)
			refID, _ := tq["refId"].(string)
			qt, _ := tq["queryType"].(string)
			qs = append(qs, backend.DataQuery{RefID: refID, QueryType: qt, JSON: js, Interval: o.interval,
				MaxDataPoints: o.maxDataPoints, TimeRange: backend.TimeRange{From: o.from, To: o.to}})
		}
		req := backend.ToProto().QueryDataRequest(&backend.QueryDataRequest{Queries: qs})
		req.PluginContext = p.pctx
		resp, err := p.data.QueryData(ctx, req)
		if err != nil {
			return Dashboard{}, fmt.Errorf("panel %q: QueryData: %w", pn.Title, err)
		}
		got, err := backend.FromProto().QueryDataResponse(resp)
		if err != nil {
			return Dashboard{}, fmt.Errorf("panel %q: %w", pn.Title, err)
		}
		op.Results = map[string]json.RawMessage{}
		for ref, r := range got.Responses {
			js, err := json.Marshal(r)
			if err != nil {
				return Dashboard{}, fmt.Errorf("panel %q: %w", pn.Title, err)
			}
			op.Results[ref] = js
		}
		out.Panels = append(out.Panels, op)
	}
	return out, nil
}
