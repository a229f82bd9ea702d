package importrules

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tidemark/tidemark/"

// may lists, per package (module-relative), every import its non-test files may have besides the standard library:
// a module-relative package, a module-relative tree ("x/..."), or an outside module path prefix. A package not
// listed here fails the test until its rule is written down (docs/architecture.md, "Package layout").
var may = map[string][]string{
	// The pure core: no I/O clients.
	"latency":                  {"github.com/DataDog/sketches-go/"},
	"latency/sim":              {"latency"},
	"lagexporter":              {},
	"lagexporter/lagapi":       {"lagexporter"},
	"lagexporter/timeline":     {"lagexporter"},
	"lagexporter/promexport":   {"lagexporter", "github.com/prometheus/", "github.com/klauspost/compress/"},
	"internal/report":          {"latency"},
	"internal/secret":          {},
	"internal/tlsconf":         {},
	"internal/tlsconf/tlstest": {},
	// Instrumentation applications import.
	"latency/instrument":        {"internal/kafkaconfig", "internal/tlsconf", "github.com/IBM/sarama", "go.opentelemetry.io/otel"},
	"latency/instrument/awsmsk": {"latency/instrument", "internal/kafkaconfig/awsmsk"},
	// Adapters: each outside system's client is imported here.
	// The Kafka adapter: the collector's consumers and producers; the lag exporter's cluster reads (lag types only,
	// never the collector or the store); topic administration; franz-go connections derived from sarama's config.
	"internal/kafka": {"internal/kafkaconfig", "internal/kafka/franzconn", "github.com/IBM/sarama",
		"github.com/twmb/franz-go/"},
	"internal/kafka/lagread":    {"internal/kafka/franzconn", "lagexporter", "github.com/IBM/sarama", "github.com/twmb/franz-go/"},
	"internal/kafka/topicadmin": {"github.com/IBM/sarama"},
	"internal/kafka/franzconn":  {"github.com/IBM/sarama", "github.com/twmb/franz-go/", "golang.org/x/net/proxy"},
	// The lag exporter's election: a consumer group of its own over sarama, the lease topic made by topicadmin.
	"internal/election": {"internal/kafka/topicadmin", "internal/kafkaconfig", "github.com/IBM/sarama"},
	"internal/kafkaconfig": {"internal/confdecode", "internal/secret", "internal/tlsconf", "github.com/IBM/sarama",
		"github.com/twmb/franz-go/pkg/kmsg", "github.com/xdg-go/scram", "golang.org/x/oauth2"},
	"internal/kafkaconfig/awsmsk": {"internal/kafkaconfig", "github.com/aws/aws-msk-iam-sasl-signer-go/"},
	"internal/confdecode":         {"internal/tlsconf", "github.com/go-viper/mapstructure/", "github.com/knadh/koanf/"},
	// What /readyz answers and how `tidemark run` retries its dependencies: pure policy over the lag exporter's health.
	"internal/readiness": {"lagexporter", "github.com/cenkalti/backoff/"},
	// The commands' configuration sources: file, environment and flags layered, and the redacted dump.
	"internal/confload": {"internal/confdecode", "github.com/knadh/koanf/", "github.com/spf13/pflag", "go.yaml.in/yaml/v3"},
	"internal/store": {"internal/secret", "internal/tlsconf", "lagexporter", "github.com/ClickHouse/clickhouse-go/",
		"github.com/cenkalti/backoff/", "github.com/prometheus/client_golang/"},
	"internal/store/query": {"internal/store", "latency", "github.com/ClickHouse/clickhouse-go/"},
	"internal/tracing": {"internal/tlsconf", "github.com/prometheus/client_golang/", "go.opentelemetry.io/otel",
		"google.golang.org/grpc/credentials"},
	// The collector: latency, lag and the adapters' interfaces; never a client library itself.
	"collector": {"latency", "latency/instrument", "lagexporter", "internal/kafka", "internal/kafka/lagread",
		"internal/kafka/topicadmin", "internal/kafkaconfig", "internal/store",
		"github.com/prometheus/client_golang/", "github.com/cenkalti/backoff/", "go.opentelemetry.io/otel",
		"golang.org/x/sync/errgroup",
		// the spans path: OTLP decoded with the OpenTelemetry Collector's pdata, served over OTLP/gRPC
		"go.opentelemetry.io/collector/pdata/", "google.golang.org/grpc"},
	// The Grafana plugin reads through the store's read API; it computes SLO bands with the latency core's formulas.
	"plugin/pkg":        {"plugin/pkg/plugin", "github.com/grafana/grafana-plugin-sdk-go/"},
	"plugin/pkg/plugin": {"internal/secret", "internal/store", "internal/store/query", "latency", "github.com/grafana/grafana-plugin-sdk-go/"},
	"dashboards":        {},
	// Wiring, tools and test support: anything but the plugin's internals.
	"cmd/...":                        {"*"},
	"internal/benchproc":             {"github.com/prometheus/"},
	"internal/testenv/...":           {"*"},
	"internal/store/query/querytest": {"internal/store", "internal/testenv", "github.com/ClickHouse/clickhouse-go/"},
	"internal/doccheck":              {},
	"internal/importrules":           {},
	"deploy/...":                     {"internal/testenv/oidcissuer"},
}

// only lists the outside clients that only some packages may import, and those packages.
var only = map[string][]string{
	"github.com/IBM/sarama":                {"internal/kafka/...", "internal/kafkaconfig", "internal/election", "latency/instrument", "cmd/...", "internal/testenv"},
	"github.com/ClickHouse/clickhouse-go/": {"internal/store", "internal/store/query", "internal/store/query/querytest", "cmd/...", "internal/testenv"},
	// cmd/dashboard-frames plays Grafana: it starts the plugin binary and speaks the SDK's gRPC protocol to it.
	"github.com/grafana/grafana-plugin-sdk-go/": {"plugin/pkg", "plugin/pkg/plugin", "cmd/dashboard-frames"},
	module + "plugin/":                          {"plugin/pkg", "plugin/pkg/plugin"},
	module + "internal/testenv":                 {"internal/testenv/...", "internal/store/query/querytest", "deploy/..."},
}

// matches reports whether pattern (a package, a tree "x/..." or "*") covers the module-relative package pkg.
func matches(pattern, pkg string) bool {
	if pattern == "*" || pattern == pkg {
		return true
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == tree || strings.HasPrefix(pkg, tree+"/")
	}
	return false
}

// allowed reports whether rule allows importing path (a full import path).
func allowed(rule []string, path string) bool {
	for _, a := range rule {
		if a == "*" {
			return true
		}
		if strings.Contains(strings.SplitN(a, "/", 2)[0], ".") { // an outside module prefix
			if path == strings.TrimSuffix(a, "/") || strings.HasPrefix(path, strings.TrimSuffix(a, "/")+"/") {
				return true
			}
			continue
		}
		if rel, ok := strings.CutPrefix(path, module); ok && matches(a, rel) {
			return true
		}
	}
	return false
}

// imports returns the imports of the non-test Go files of every package under root, by module-relative directory.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		rel = filepath.ToSlash(rel)
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if !slices.Contains(out[rel], path) {
				out[rel] = append(out[rel], path)
			}
		}
		if _, ok := out[rel]; !ok {
			out[rel] = []string{}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportRules: every package's non-test imports are within its rule (may), and each outside client is imported
// only where only says.
func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	pkgs := imports(t, root)
	if len(pkgs) < 30 {
		t.Fatalf("only %d packages read", len(pkgs))
	}
	for pkg, paths := range pkgs {
		var rule []string
		found := false
		for pattern, r := range may {
			if matches(pattern, pkg) {
				rule, found = r, true
				break
			}
		}
		if !found {
			t.Errorf("%s has no import rule: add it to may (and to docs/architecture.md)", pkg)
			continue
		}
		for _, path := range paths {
			if first := strings.SplitN(path, "/", 2)[0]; !strings.Contains(first, ".") {
				continue // the standard library
			}
			if !allowed(rule, path) {
				t.Errorf("%s imports %s, outside its rule %v", pkg, path, rule)
			}
			for client, importers := range only {
				if path != strings.TrimSuffix(client, "/") && !strings.HasPrefix(path, client) {
					continue
				}
				if !slices.ContainsFunc(importers, func(p string) bool { return matches(p, pkg) }) {
					t.Errorf("%s imports %s, which only %v may import", pkg, path, importers)
				}
			}
		}
	}
}
