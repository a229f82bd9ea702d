package dashboards

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/plugin/pkg/plugin"
)

var update = flag.Bool("update", false, "rewrite the dashboard JSON files from the code")

func render(t *testing.T, d Dashboard) []byte {
	t.Helper()
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestFilesMatchCode(t *testing.T) {
	for name, d := range All() {
		want := render(t, d)
		if *update {
			if err := os.WriteFile(name, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%s: %v (run go test ./dashboards -update)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the code: run go test ./dashboards -update", name)
		}
	}
	// no stray dashboard files the code no longer makes
	files, _ := filepath.Glob("*.json")
	if len(files) != len(All()) {
		t.Errorf("files %v, code makes %d dashboards", files, len(All()))
	}
}

// panels flattens rows.
func panels(d Dashboard) []Panel {
	var out []Panel
	for _, p := range d.Panels {
		out = append(out, p)
		out = append(out, p.Panels...)
	}
	return out
}

// sampleVars stands in for what Grafana interpolates before a query reaches the backend.
var sampleVars = strings.NewReplacer("${cluster:csv}", "prod,dr", "${topic:csv}", "orders,payments", "${group:csv}", "billing", "${group}", "billing",
	"${host:csv}", "c1", "${broker:csv}", "1", "$group", "billing")

func TestPanelsUseQueriesThePluginServes(t *testing.T) {
	served := map[string]bool{}
	for _, qt := range plugin.QueryTypes() {
		served[string(qt)] = true
	}
	used := map[string]bool{}
	for name, d := range All() {
		for _, p := range panels(d) {
			for _, tgt := range p.Targets {
				ds := tgt["datasource"].(*DatasourceRef)
				if ds.Type != PluginType {
					continue
				}
				qt, _ := tgt["queryType"].(string)
				if !served[qt] {
					t.Errorf("%s / %q: query type %q is not served by the plugin", name, p.Title, qt)
				}
				used[qt] = true
				raw, _ := json.Marshal(tgt)
				if _, err := plugin.ParseQuery([]byte(sampleVars.Replace(string(raw))), ""); err != nil {
					t.Errorf("%s / %q: the plugin rejects the query: %v", name, p.Title, err)
				}
			}
		}
	}
	// every query type has a panel somewhere, so none is untested by a person looking at the dashboards
	for qt := range served {
		if !used[qt] {
			t.Errorf("no dashboard panel uses query type %s", qt)
		}
	}
}

// TestPanelFieldsMatchTitles pins the overview's SLO panels, which share one query definition, to their own fields.
func TestPanelFieldsMatchTitles(t *testing.T) {
	want := map[string]string{"Compliance": "compliance", "Error budget remaining": "error_budget_remaining", "Burn rate": "burn_rate"}
	for _, p := range Overview().Panels {
		if f, ok := want[p.Title]; ok {
			got, _ := p.Targets[0]["fields"].([]string)
			if len(got) != 1 || got[0] != f {
				t.Errorf("%q keeps fields %v, want [%s]", p.Title, got, f)
			}
			delete(want, p.Title)
		}
	}
	if len(want) != 0 {
		t.Errorf("panels not found: %v", want)
	}
}

// documentedMetrics reads every `tidemark_...` name docs/metrics.md lists.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatalf("read docs/metrics.md: %v", err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("`((?:tidemark|kafka)_[a-z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

var metricName = regexp.MustCompile(`\b(?:tidemark|kafka)_[a-z0-9_]+`)

func TestPrometheusPanelsNameDocumentedMetrics(t *testing.T) {
	docs := documentedMetrics(t)
	n := 0
	for name, d := range All() {
		for _, p := range panels(d) {
			for _, tgt := range p.Targets {
				expr, ok := tgt["expr"].(string)
				if !ok {
					continue
				}
				for _, m := range metricName.FindAllString(expr, -1) {
					n++
					base := m
					for _, suffix := range []string{"_bucket", "_count", "_sum"} {
						if !docs[base] {
							base = strings.TrimSuffix(base, suffix)
						}
					}
					if !docs[base] {
						t.Errorf("%s / %q: metric %s is not in docs/metrics.md", name, p.Title, m)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no Prometheus panel found: the check checked nothing")
	}
}

func TestDatasourcesAreVariables(t *testing.T) {
	for name, d := range All() {
		vars := map[string]bool{}
		for _, v := range d.Templating.List {
			vars["${"+v.Name+"}"] = true
		}
		for _, p := range panels(d) {
			if p.Datasource != nil && !vars[p.Datasource.UID] {
				t.Errorf("%s / %q: datasource %q is not a dashboard variable", name, p.Title, p.Datasource.UID)
			}
		}
	}
}

func TestPanelsDoNotOverlap(t *testing.T) {
	for name, d := range All() {
		cells := map[[2]int]string{}
		for _, p := range d.Panels {
			g := p.GridPos
			if g.X+g.W > 24 {
				t.Errorf("%s / %q overflows the grid", name, p.Title)
			}
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, ok := cells[[2]int{x, y}]; ok {
						t.Fatalf("%s: %q overlaps %q", name, p.Title, other)
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
		}
	}
}

func TestProvisioning(t *testing.T) {
	ds, err := os.ReadFile("../deploy/grafana/provisioning/datasources/tidemark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type: " + PluginType, "uid: tidemark", "address:", "password:"} {
		if !strings.Contains(string(ds), want) {
			t.Errorf("datasource provisioning lacks %q", want)
		}
	}
	prov, err := os.ReadFile("../deploy/grafana/provisioning/dashboards/tidemark.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prov), "path: /var/lib/grafana/dashboards/tidemark") {
		t.Errorf("dashboard provisioning does not point at the dashboards folder:\n%s", prov)
	}
	var names []string
	for n := range All() {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) != 4 {
		t.Errorf("dashboards %v", names)
	}
}

// TestEveryDashboardFiltersByCluster: every dashboard has the cluster variable, every Tidemark query is narrowed by
// it, and every Tidemark series in every PromQL expression has the cluster matcher.
func TestEveryDashboardFiltersByCluster(t *testing.T) {
	for name, d := range All() {
		has := false
		for _, v := range d.Templating.List {
			has = has || (v.Name == "cluster" && v.AllValue == "")
		}
		if !has {
			t.Errorf("%s: no cluster variable (listing every cluster for All)", name)
		}
		for _, p := range panels(d) {
			for _, tgt := range p.Targets {
				if tgt["datasource"].(*DatasourceRef).Type == PluginType {
					if tgt["cluster"] != "${cluster:csv}" {
						t.Errorf("%s / %q: Tidemark query without the cluster filter: %v", name, p.Title, tgt)
					}
					continue
				}
				expr := tgt["expr"].(string)
				for _, sel := range tidemarkSelector.FindAllString(expr, -1) {
					if !strings.HasSuffix(sel, "{") {
						t.Errorf("%s / %q: %s in %q has no cluster matcher", name, p.Title, sel, expr)
					}
				}
				if n, m := len(tidemarkSelector.FindAllString(expr, -1)), strings.Count(expr, `cluster=~"${cluster:regex}"`); n != m {
					t.Errorf("%s / %q: %d Tidemark selectors, %d cluster matchers in %q", name, p.Title, n, m, expr)
				}
			}
		}
	}
	for in, want := range map[string]string{
		`sum(tidemark_lag_group_status{status!="OK"}) or vector(0)`:      `sum(tidemark_lag_group_status{cluster=~"${cluster:regex}",status!="OK"}) or vector(0)`,
		`max(time() - tidemark_lag_exporter_snapshot_timestamp_seconds)`: `max(time() - tidemark_lag_exporter_snapshot_timestamp_seconds{cluster=~"${cluster:regex}"})`,
		`count(tidemark:lag_retention_margin_seconds:min < 3600)`:        `count(tidemark:lag_retention_margin_seconds:min{cluster=~"${cluster:regex}"} < 3600)`,
		`rate(tidemark_x_total{}[5m])`:                                   `rate(tidemark_x_total{cluster=~"${cluster:regex}"}[5m])`,
	} {
		if got := byCluster(in); got != want {
			t.Errorf("byCluster(%s) = %s, want %s", in, got, want)
		}
	}
}
