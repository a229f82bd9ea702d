package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/confdecode"
)

//go:generate go test -run TestConfigReference -update-docs .

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/collector.md's generated key reference")

const (
	referenceDoc   = "../../docs/collector.md"
	referenceBegin = "<!-- BEGIN GENERATED: key reference (go generate ./cmd/tidemark) -->\n"
	referenceEnd   = "<!-- END GENERATED: key reference -->\n"
	modulePath     = "github.com/tidemark/tidemark"
)

// dynamicDefaults are the defaults that depend on the machine, said in words.
var dynamicDefaults = map[string]string{
	"collector.reference_host":    "the host name",
	"collector.probe.instance_id": "the host name",
}

// TestConfigReference: docs/collector.md's key reference is generated from runConfig (its keys by their yaml tags,
// each default from setDefaults on a zero configuration, each meaning from the field's doc comment), so it cannot
// drift from the code. Run `go generate ./cmd/tidemark` after changing a configuration struct.
func TestConfigReference(t *testing.T) {
	table := configReference(t)
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, referenceBegin), strings.Index(doc, referenceEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", referenceDoc, referenceBegin, referenceEnd)
	}
	updated := doc[:i+len(referenceBegin)] + table + doc[j:]
	if *updateDocs {
		if err := os.WriteFile(referenceDoc, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if updated != doc {
		t.Errorf("%s's key reference differs from the code: run `go generate ./cmd/tidemark`", referenceDoc)
	}
}

// configReference is the key reference table in Markdown: one row per key, deprecated keys saying their
// replacement, clusters[] entries listed once (their kafka, lag and collector keys are the top-level blocks').
func configReference(t *testing.T) string {
	var def runConfig
	def.setDefaults()
	dv := reflect.ValueOf(def)
	docs := fieldDocs(t)
	var b strings.Builder
	b.WriteString("| key | default | meaning |\n|---|---|---|\n")
	var prev confdecode.Key // the last key with a meaning: fields declared under one comment share it
	for _, k := range runConfigKeys() {
		if strings.HasPrefix(k.Name, "clusters[].") && strings.Count(k.Name, ".") > 1 ||
			strings.HasPrefix(k.Name, "clusters[].") && k.Name != "clusters[].name" {
			continue
		}
		if confdecode.IsBlock(k.Field.Type) {
			continue // its keys have rows
		}
		d := "—"
		if k.Index != nil {
			d = defaultText(dv.FieldByIndex(k.Index))
		}
		if w, ok := dynamicDefaults[k.Name]; ok {
			d = w
		}
		if k.Owner == reflect.TypeOf(latencyConfig{}) {
			d = "the engine's" // latency.Config.SetDefaults fills them; the meaning says the value
		}
		meaning := docs[k.Owner.PkgPath()+"."+k.Owner.Name()+"."+k.Field.Name]
		switch {
		case meaning != "":
			prev = k
		case prev.Owner == k.Owner:
			meaning = fmt.Sprintf("see `%s`", prev.Name)
		}
		if k.Deprecated != "" {
			meaning = fmt.Sprintf("**deprecated**: use `%s`. %s", k.Deprecated, meaning)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", k.Name, d, strings.ReplaceAll(meaning, "|", `\|`))
	}
	return b.String()
}

// defaultText shows a default value as a file writes it.
func defaultText(v reflect.Value) string {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "—"
		}
		v = v.Elem()
	}
	if v.Type() == reflect.TypeOf(time.Duration(0)) {
		if v.Int() == 0 {
			return "—"
		}
		return "`" + time.Duration(v.Int()).String() + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return "—"
		}
		return "`" + v.String() + "`"
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			return "—"
		}
		var parts []string
		for i := 0; i < v.Len() && v.Kind() == reflect.Slice; i++ {
			parts = append(parts, strings.Trim(defaultText(v.Index(i)), "`"))
		}
		return "`[" + strings.Join(parts, ", ") + "]`"
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// fieldDocs returns the doc comment of every struct field of the module's packages runConfig reaches, keyed by
// package path, type and field name, one line each.
func fieldDocs(t *testing.T) map[string]string {
	out := map[string]string{}
	dirs := map[string]bool{}
	for _, k := range runConfigKeys() {
		dirs[k.Owner.PkgPath()] = true
	}
	for pkg := range dirs {
		dir := "."
		if pkg != "main" {
			rel, ok := strings.CutPrefix(pkg, modulePath+"/")
			if !ok {
				continue
			}
			dir = filepath.Join("../..", rel)
		}
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkgs {
			for _, f := range p.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					ts, ok := n.(*ast.TypeSpec)
					if !ok {
						return true
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						return false
					}
					for _, fl := range st.Fields.List {
						text := fl.Doc.Text()
						if text == "" {
							text = fl.Comment.Text()
						}
						text = strings.Join(strings.Fields(text), " ")
						for _, name := range fl.Names {
							out[pkg+"."+ts.Name.Name+"."+name.Name] = text
						}
					}
					return false
				})
			}
		}
	}
	return out
}
