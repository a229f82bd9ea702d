package dashboards

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// PluginType is the Tidemark datasource's plugin id.
const PluginType = "tidemark-kafka-datasource"

// tidemark and prometheus point panels at the dashboard's datasource variables.
var (
	tidemark   = &DatasourceRef{Type: PluginType, UID: "${datasource}"}
	prometheus = &DatasourceRef{Type: "prometheus", UID: "${prometheus}"}
)

// builder lays panels out left to right, wrapping at 24 columns.
type builder struct {
	d      Dashboard
	x, y   int
	rowH   int
	nextID int
}

func newDashboard(uid, title, desc string) *builder {
	return &builder{d: Dashboard{
		UID: uid, Title: title, Description: desc, Tags: []string{"tidemark", "kafka"}, Editable: true, SchemaVersion: 39,
		Time: TimeRange{From: "now-6h", To: "now"}, Refresh: "1m",
		Links: []Link{{Title: "Tidemark", Type: "dashboards", Tags: []string{"tidemark"}, AsDrop: true, Keep: true, Vars: true}},
	}, nextID: 1}
}

func (b *builder) vars(v ...Variable) *builder {
	b.d.Templating.List = append(b.d.Templating.List, v...)
	return b
}

// add places p with width w and height h.
func (b *builder) add(w, h int, p Panel) *builder {
	if b.x+w > 24 {
		b.x, b.y, b.rowH = 0, b.y+b.rowH, 0
	}
	p.ID = b.nextID
	b.nextID++
	p.GridPos = GridPos{H: h, W: w, X: b.x, Y: b.y}
	if p.FieldConfig.Defaults == nil {
		p.FieldConfig.Defaults = map[string]any{}
	}
	if p.FieldConfig.Overrides == nil {
		p.FieldConfig.Overrides = []map[string]any{}
	}
	b.d.Panels = append(b.d.Panels, p)
	b.x += w
	b.rowH = max(b.rowH, h)
	return b
}

// row starts a full-width row header.
func (b *builder) row(title string) *builder {
	if b.x > 0 {
		b.x, b.y, b.rowH = 0, b.y+b.rowH, 0
	}
	collapsed := false
	return b.add(24, 1, Panel{Type: "row", Title: title, Collapsed: &collapsed})
}

func (b *builder) build() Dashboard { return b.d }

// q is a Tidemark target: the query model of docs/plugin.md.
func q(refID, queryType string, fields map[string]any) map[string]any {
	t := map[string]any{"refId": refID, "datasource": tidemark, "queryType": queryType}
	for k, v := range fields {
		t[k] = v
	}
	return t
}

// prom is a Prometheus target.
func prom(refID, expr, legend string) map[string]any {
	return map[string]any{"refId": refID, "datasource": prometheus, "expr": byCluster(expr), "legendFormat": legend}
}

// tidemarkSelector is a Tidemark series name in PromQL (a metric or a recording rule), with its matcher's brace.
var tidemarkSelector = regexp.MustCompile(`\btidemark[_:][A-Za-z0-9_:]*(\{\}?)?`)

// byCluster narrows every Tidemark series of expr to the dashboard's $cluster variable: a cluster=~ matcher first in
// each selector (every series Tidemark exports about Kafka carries the cluster label). ${cluster:regex} is the
// selected names as a regular expression, every name when All is selected (clusterVar has no "All" value of its own).
func byCluster(expr string) string {
	const m = `cluster=~"${cluster:regex}"`
	return tidemarkSelector.ReplaceAllStringFunc(expr, func(sel string) string {
		name, brace, _ := strings.Cut(sel, "{")
		switch {
		case sel == name:
			return name + "{" + m + "}"
		case brace == "}":
			return name + "{" + m + "}"
		}
		return name + "{" + m + ","
	})
}

func unit(u string) FieldConfig {
	return FieldConfig{Defaults: map[string]any{"unit": u}}
}

// banded is a latency panel's field config with its percentiles' bands (the plugin's <level>_lower and
// <level>_upper fields: the true percentile lies between them) drawn as thin dashed lines around the estimate.
func banded(u string) FieldConfig {
	fc := unit(u)
	fc.Overrides = []map[string]any{{
		"matcher": map[string]any{"id": "byRegexp", "options": ".*_(lower|upper).*"},
		"properties": []map[string]any{
			{"id": "custom.lineStyle", "value": map[string]any{"fill": "dash", "dash": []int{4, 4}}},
			{"id": "custom.lineWidth", "value": 1},
			{"id": "custom.fillOpacity", "value": 0},
		},
	}}
	return fc
}

func timeseries(title, desc string, fc FieldConfig, targets ...map[string]any) Panel {
	return Panel{Type: "timeseries", Title: title, Description: desc, Datasource: datasourceOf(targets), Targets: targets, FieldConfig: fc,
		Options: map[string]any{"legend": map[string]any{"displayMode": "table", "placement": "bottom", "calcs": []string{"mean", "max", "lastNotNull"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"}}}
}

func stat(title, desc string, fc FieldConfig, targets ...map[string]any) Panel {
	return Panel{Type: "stat", Title: title, Description: desc, Datasource: datasourceOf(targets), Targets: targets, FieldConfig: fc,
		Options: map[string]any{"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
			"colorMode": "background", "graphMode": "area", "textMode": "value_and_name"}}
}

func table(title, desc string, targets ...map[string]any) Panel {
	return Panel{Type: "table", Title: title, Description: desc, Datasource: datasourceOf(targets), Targets: targets,
		FieldConfig: FieldConfig{Defaults: map[string]any{}}, Options: map[string]any{"showHeader": true, "cellHeight": "sm"}}
}

func datasourceOf(targets []map[string]any) *DatasourceRef {
	if len(targets) > 0 {
		if ds, ok := targets[0]["datasource"].(*DatasourceRef); ok {
			return ds
		}
	}
	return tidemark
}

func thresholds(steps ...any) map[string]any {
	var s []map[string]any
	for i := 0; i+1 < len(steps); i += 2 {
		s = append(s, map[string]any{"color": steps[i], "value": steps[i+1]})
	}
	return map[string]any{"mode": "absolute", "steps": s}
}

// Variables shared by the dashboards.
var (
	datasourceVar = Variable{Name: "datasource", Label: "Tidemark", Type: "datasource", Query: PluginType}
	prometheusVar = Variable{Name: "prometheus", Label: "Prometheus", Type: "datasource", Query: "prometheus"}
)

// clusterVar is the Kafka cluster variable every dashboard has. Its "All" is every cluster listed, not a value of
// its own, so it reads the same in the plugin's queries (${cluster:csv}) and in PromQL (${cluster:regex}).
func clusterVar() Variable {
	v := listVar("cluster", "Cluster", "clusters", nil)
	v.AllValue = ""
	return v
}

// listVar is a topics/groups/hosts variable answered by the plugin's resource handler. "All" sends "*", which the
// backend reads as no filter, rather than a list of every name.
func listVar(name, label, kind string, filter map[string]string) Variable {
	query := map[string]any{"kind": kind}
	def := kind
	keys := make([]string, 0, len(filter))
	for k := range filter {
		keys = append(keys, k)
	}
	sort.Strings(keys) // one definition text whatever the map's order: the files are compared byte for byte
	for _, k := range keys {
		query[k] = filter[k]
		def += fmt.Sprintf(" (%s=%s)", k, filter[k])
	}
	return Variable{Name: name, Label: label, Type: "query", Datasource: tidemark, Query: query, Definition: def,
		Multi: true, IncludeAll: true, AllValue: "*", Refresh: 2,
		Current: map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}}}
}
