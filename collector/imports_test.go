package collector

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestNoClickHouseImport: internal/store is the only clickhouse-go importer (docs/architecture.md); the collector uses
// store's plain row types and its Sink interface, and none of its non-test files imports clickhouse-go or sarama
// (the Kafka adapter, internal/kafka and its subpackages, wraps sarama for it).
func TestNoClickHouseImport(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(path, "clickhouse") || strings.Contains(path, "IBM/sarama") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d source files read", n)
	}
}
