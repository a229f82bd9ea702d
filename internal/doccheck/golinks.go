package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"unicode"
)

// The Go side of the check: each package's comments are parsed, and every doc link in a doc comment is resolved
// against the package's own declarations, this module's packages, the standard library (GOROOT) and the modules
// go.mod requires (the module cache).

// goPackage checks the comments of the Go files in directory abs (rel from the root): doc links in doc comments,
// repository paths and machine paths in every comment.
func (c *checker) goPackage(abs, rel string) error {
	files, _ := filepath.Glob(filepath.Join(abs, "*.go"))
	if len(files) == 0 {
		return nil
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	imports := map[string]string{} // name -> path, over the package's files
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			// go doc never shows a test file: only its comments' paths are checked, read by the scanner alone
			// (a third of a parse).
			if err := c.testComments(path.Join(rel, filepath.Base(f)), f); err != nil {
				return err
			}
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		parsed = append(parsed, af)
		for _, im := range af.Imports {
			ip := strings.Trim(im.Path.Value, `"`)
			name := path.Base(ip)
			if im.Name != nil {
				name = im.Name.Name
			} else if c.isVersionSuffix(name) {
				name = path.Base(path.Dir(ip))
			}
			imports[name] = ip
		}
	}
	local := symbolsOf(parsed)
	for _, af := range parsed {
		file := path.Join(rel, filepath.Base(fset.Position(af.Pos()).Filename))
		docs := map[*ast.CommentGroup]bool{}
		ast.Inspect(af, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.File:
				docs[n.Doc] = true
			case *ast.FuncDecl:
				docs[n.Doc] = true
			case *ast.GenDecl:
				docs[n.Doc] = true
			case *ast.TypeSpec:
				docs[n.Doc] = true
			case *ast.ValueSpec:
				docs[n.Doc] = true
			case *ast.Field:
				docs[n.Doc] = true
			}
			return true
		})
		if !strings.HasSuffix(file, "_test.go") {
			for _, d := range af.Decls {
				c.docName(file, fset, d, local)
			}
		}
		for _, cg := range af.Comments {
			for _, cm := range cg.List {
				line := fset.Position(cm.Pos()).Line
				for i, l := range strings.Split(cm.Text, "\n") {
					c.paths(file, line+i, l)
					if docs[cg] && !codeLine(l) {
						for _, link := range docLinks(l) {
							if msg := c.resolve(link, local, imports); msg != "" {
								c.add(file, line+i, "doc link [%s]: %s", link, msg)
							}
						}
					}
				}
			}
		}
	}
	return nil
}

// docName reports a declaration whose doc comment starts with another name: a name written as an identifier
// (camelCase, or with an underscore) or a name the package declares. Grouped declarations (const blocks) are skipped.
func (c *checker) docName(file string, fset *token.FileSet, d ast.Decl, local map[string]bool) {
	var doc *ast.CommentGroup
	var names []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		doc, names = d.Doc, []string{d.Name.Name}
		if d.Recv != nil && len(d.Recv.List) > 0 {
			names = append(names, recvType(d.Recv.List[0].Type)+"."+d.Name.Name)
		}
	case *ast.GenDecl:
		if d.Lparen.IsValid() || len(d.Specs) != 1 {
			return
		}
		doc = d.Doc
		switch sp := d.Specs[0].(type) {
		case *ast.TypeSpec:
			names = []string{sp.Name.Name}
		case *ast.ValueSpec:
			for _, n := range sp.Names {
				names = append(names, n.Name)
			}
		}
	}
	if doc == nil || len(names) == 0 {
		return
	}
	w, _, _ := strings.Cut(strings.TrimSpace(doc.Text()), " ")
	w = strings.TrimRight(w, ":,.;")
	if slices.Contains(names, w) || !(camel.MatchString(w) || local[w]) {
		return
	}
	c.add(file, fset.Position(doc.Pos()).Line, "the doc comment of %s starts with %s, another name", names[0], w)
}

// camel matches a name written as an identifier: a lower-case letter followed by an upper-case one, or an underscore.
var camel = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:[a-z0-9][A-Z]|_)[A-Za-z0-9_.]*$`)

// testComments checks the repository paths cited in the comments of the test file abs (rel from the root).
func (c *checker) testComments(rel, abs string) error {
	src, err := os.ReadFile(abs)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(abs, -1, len(src)), src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return nil
		}
		if tok == token.COMMENT {
			line := fset.Position(pos).Line
			for i, l := range strings.Split(lit, "\n") {
				c.paths(rel, line+i, l)
			}
		}
	}
}

func (c *checker) isVersionSuffix(s string) bool {
	return len(s) > 1 && s[0] == 'v' && strings.Trim(s[1:], "0123456789") == ""
}

// codeLine reports whether a comment line is part of a code block: gofmt indents code blocks in doc comments with a
// tab (and list items with spaces).
func codeLine(l string) bool {
	return strings.HasPrefix(strings.TrimPrefix(l, "//"), "\t")
}

// linkRE finds doc links as go/doc/comment reads them: `[Name]`, `[Name.Name]`, `[*Name]`, `[pkg.Name]`,
// `[path/pkg.Name]`,
// preceded and followed by punctuation, space or the line's end, and not a Markdown link ("[text](url)", "[x]: url").
var linkRE = regexp.MustCompile(`(?:^|[\s(,;:"'])\[(\*?[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_.-]*)*)\]([^(\[:A-Za-z0-9_]|$)`)

func docLinks(l string) []string {
	var out []string
	for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
		out = append(out, m[1])
	}
	return out
}

// resolve returns why link names nothing, or "" when it names something.
func (c *checker) resolve(link string, local map[string]bool, imports map[string]string) string {
	link = strings.TrimPrefix(link, "*")
	if i := strings.LastIndex(link, "/"); i >= 0 { // [path/to/pkg] or [path/to/pkg.Name...]
		pkg, name, _ := strings.Cut(link[i+1:], ".")
		return c.inPackage(link[:i+1]+pkg, name)
	}
	parts := strings.Split(link, ".")
	if len(parts) == 1 && !unicode.IsUpper(rune(parts[0][0])) {
		return "" // go/doc links only exported names; "[redacted]" is text
	}
	if local[parts[0]] {
		if len(parts) == 1 || local[parts[0]+"."+parts[1]] {
			return ""
		}
		return fmt.Sprintf("%s has no field or method %s", parts[0], parts[1])
	}
	if len(parts) == 1 {
		if _, ok := imports[parts[0]]; ok {
			return ""
		}
		return "no such identifier in this package" // an exported name; package names are lower case
	}
	name := strings.Join(parts[1:], ".")
	if ip, ok := imports[parts[0]]; ok {
		return c.inPackage(ip, name)
	}
	if c.stdDir(parts[0]) != "" {
		return c.inPackage(parts[0], name)
	}
	if ips := c.pkgNames[parts[0]]; len(ips) > 0 {
		for _, ip := range ips {
			if c.inPackage(ip, name) == "" {
				return ""
			}
		}
		return c.inPackage(ips[0], name)
	}
	if c.goroot == "" {
		return "" // perhaps a standard package, which cannot be read here
	}
	return fmt.Sprintf("no identifier %s here and no package %s", parts[0], parts[0])
}

// inPackage returns why name (Name or Type.Member; "" for the package itself) is not in the package at import path
// ip, or "" when it is or when the package's source is not on this machine (nothing to check against).
func (c *checker) inPackage(ip, name string) string {
	dir := c.packageDir(ip)
	if dir == "" {
		if first, _, _ := strings.Cut(ip, "/"); (!strings.Contains(first, ".") && c.goroot != "") || strings.HasPrefix(ip, c.module+"/") || ip == c.module {
			return "no package " + ip // in this module or the standard library, where every package is on this machine
		}
		return ""
	}
	if name == "" {
		return ""
	}
	syms, ok := c.symbols[dir]
	if !ok {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		fset := token.NewFileSet()
		var parsed []*ast.File
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			if af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution); err == nil {
				parsed = append(parsed, af)
			}
		}
		syms = symbolsOf(parsed)
		c.symbols[dir] = syms
	}
	parts := strings.Split(name, ".")
	if !syms[parts[0]] {
		return fmt.Sprintf("%s has no %s", ip, parts[0])
	}
	if len(parts) > 1 && !syms[parts[0]+"."+parts[1]] {
		return fmt.Sprintf("%s.%s has no field or method %s", ip, parts[0], parts[1])
	}
	return ""
}

// packageDir returns the source directory of import path ip, or "" when it is not on this machine.
func (c *checker) packageDir(ip string) string {
	if ip == c.module || strings.HasPrefix(ip, c.module+"/") {
		d := filepath.Join(c.root, filepath.FromSlash(strings.TrimPrefix(ip, c.module)))
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		return ""
	}
	if d := c.stdDir(ip); d != "" {
		return d
	}
	best := ""
	for m := range c.requires {
		if (ip == m || strings.HasPrefix(ip, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best == "" {
		return ""
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		gp := os.Getenv("GOPATH")
		if gp == "" {
			home, _ := os.UserHomeDir()
			gp = filepath.Join(home, "go")
		}
		cache = filepath.Join(filepath.SplitList(gp)[0], "pkg", "mod")
	}
	d := filepath.Join(cache, escapeModule(best)+"@"+c.requires[best], filepath.FromSlash(strings.TrimPrefix(ip, best)))
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

// goroot finds the Go installation: $GOROOT, else `go env GOROOT`, else the one this test was built with.
func goroot() string {
	for _, d := range []string{os.Getenv("GOROOT"), goEnvGOROOT(), runtime.GOROOT()} {
		if st, err := os.Stat(filepath.Join(d, "src", "fmt")); d != "" && err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

func goEnvGOROOT() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func (c *checker) stdDir(ip string) string {
	first, _, _ := strings.Cut(ip, "/")
	if strings.Contains(first, ".") || c.goroot == "" {
		return ""
	}
	d := filepath.Join(c.goroot, "src", filepath.FromSlash(ip))
	if st, err := os.Stat(d); err == nil && st.IsDir() {
		return d
	}
	return ""
}

// escapeModule is the module cache's case encoding: an upper-case letter becomes '!' and its lower case.
func escapeModule(m string) string {
	var b strings.Builder
	for _, r := range m {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// symbolsOf lists the package-level identifiers of files, and Type.Member for the fields and methods of their types
// (embedded fields by their type's name; interface methods included).
func symbolsOf(files []*ast.File) map[string]bool {
	s := map[string]bool{}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					s[d.Name.Name] = true
					continue
				}
				if t := recvType(d.Recv.List[0].Type); t != "" {
					s[t+"."+d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.TypeSpec:
						s[sp.Name.Name] = true
						members(s, sp.Name.Name, sp.Type)
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							s[n.Name] = true
						}
					}
				}
			}
		}
	}
	return s
}

func members(s map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			s[typ+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded
			if t := recvType(f.Type); t != "" {
				s[typ+"."+t] = true
			}
		}
	}
}

func recvType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}
