package store

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden DDL files in testdata/golden")

// goldenParams renders the golden files: the default retention, so they match a default `tidemark migrate`.
func goldenParams(d Dialect) SchemaParams {
	var c Config
	c.SetDefaults()
	return SchemaParams{Dialect: d, RetentionDays: c.RetentionDays, RollupRetentionDays: c.RollupRetentionDays}
}

func TestSchemaGolden(t *testing.T) {
	for _, d := range []Dialect{DialectLegacy, DialectModern} {
		t.Run(string(d), func(t *testing.T) {
			got, err := RenderSchema(goldenParams(d))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "golden", string(d)+".sql")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/store -run TestSchemaGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s DDL differs from %s; if the change is intended, rerun with -update and review the diff", d, path)
			}
		})
	}
}

// TestLegacyDialectSubset guards the 18.16 path: none of the features 18.16 lacks may appear in legacy DDL.
func TestLegacyDialectSubset(t *testing.T) {
	ms, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for _, m := range ms {
		stmts = append(stmts, m.Statements...) // statements only: the comments may name the features
	}
	sql := strings.Join(stmts, "\n")
	for _, banned := range []string{"TTL", "DateTime64", "Map(", "Bool", "CODEC", "SimpleAggregateFunction", "LowCardinality"} {
		if strings.Contains(sql, banned) {
			t.Errorf("legacy DDL uses %s, which ClickHouse 18.16 lacks", banned)
		}
	}
	modern, err := RenderSchema(goldenParams(DialectModern))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"LowCardinality(String)", "CODEC(Delta, ZSTD)", "TTL record_time + toIntervalDay(14)", "TTL minute + toIntervalDay(90)"} {
		if !strings.Contains(modern, want) {
			t.Errorf("modern DDL lacks %q", want)
		}
	}
}

func TestMigrationsVersions(t *testing.T) {
	ms, err := Migrations(goldenParams(DialectLegacy))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != CurrentSchemaVersion {
		t.Fatalf("%d migrations, CurrentSchemaVersion %d", len(ms), CurrentSchemaVersion)
	}
	for i, m := range ms {
		if m.Version != i+1 || len(m.Statements) == 0 || len(m.Checksum) != 64 {
			t.Errorf("migration %d: %+v", i, m)
		}
		for _, s := range m.Statements {
			if strings.HasSuffix(s, ";") || strings.Contains(s, "\n--") {
				t.Errorf("migration %s: statement not cleaned: %q", m.Name, s)
			}
		}
	}
	// The first migration creates 5 tables and 1 view.
	if got := len(ms[0].Statements); got != 6 {
		t.Errorf("0001 has %d statements, want 6", got)
	}
	if _, err := Migrations(SchemaParams{Dialect: "auto"}); err == nil {
		t.Error("rendering an undetected dialect succeeded")
	}
}

func TestSplitStatements(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"two statements", "SELECT 1;\nSELECT 2;\n", []string{"SELECT 1", "SELECT 2"}},
		// Comment lines vanish; a statement spans lines until a line ends with ';'.
		{"comments and multi-line", "-- c\nCREATE TABLE t\n(\n  a Int8 -- x\n);\n", []string{"CREATE TABLE t\n(\n  a Int8 -- x\n)"}},
		// A last statement without ';' is still returned.
		{"no trailing semicolon", "SELECT 1", []string{"SELECT 1"}},
		{"only comments", "-- a\n\n-- b\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SplitStatements(tt.in)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
