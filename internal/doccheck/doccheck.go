package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
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

// Finding is one stale reference: File (slash-separated, relative to the repository root) and Line (1-based) say
// where, Text what is wrong.
type Finding struct {
	File string
	Line int
	Text string
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Text) }

// skipDirs are directory names never read: version control, installed packages, build outputs and data.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "testdata": true, "dist": true, ".state": true}

// textExt are the file kinds read for absolute paths; .go and .md files are also read for links and paths.
var textExt = map[string]bool{".go": true, ".md": true, ".sh": true, ".yml": true, ".yaml": true, ".ts": true,
	".tsx": true, ".js": true, ".sql": true, ".toml": true, ".txt": true, ".json": true, "": true}

// Check reads the repository at root (the directory of go.mod) and returns its findings sorted by file and line.
// An error is returned only when the repository cannot be read.
func Check(root string) ([]Finding, error) {
	c, err := newChecker(root)
	if err != nil {
		return nil, err
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, root), string(filepath.Separator)))
		if d.IsDir() {
			if p != root && (skipDirs[d.Name()] || c.ignored(rel)) {
				return filepath.SkipDir
			}
			if err := c.goPackage(p, rel); err != nil {
				return err
			}
			return nil
		}
		if c.ignored(rel) || !textExt[filepath.Ext(rel)] || (filepath.Ext(rel) == "" && d.Name() != "Makefile" && !strings.HasPrefix(rel, ".ci/")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(rel, "internal/doccheck/") {
			c.absolutePaths(rel, b)
		}
		switch filepath.Ext(rel) {
		case ".md":
			c.markdown(rel, b)
		case ".ts", ".tsx", ".js", ".sh", ".yml", ".yaml":
			c.scriptComments(rel, b)
		}
		return nil
	})
	slices.SortFunc(c.found, func(a, b Finding) int {
		if a.File != b.File {
			return strings.Compare(a.File, b.File)
		}
		return a.Line - b.Line
	})
	return c.found, err
}

type checker struct {
	root     string
	goroot   string            // the Go installation whose src/ holds the standard library; "" when unknown
	module   string            // module path from go.mod
	requires map[string]string // required module path -> version
	top      map[string]bool   // names of the repository's top-level entries
	ignores  []ignoreRule
	symbols  map[string]map[string]bool // package directory -> identifiers, Type.Member included
	pkgNames map[string][]string        // package name -> in-module import paths
	found    []Finding
}

func newChecker(root string) (*checker, error) {
	c := &checker{root: root, goroot: goroot(), requires: map[string]string{}, top: map[string]bool{},
		symbols: map[string]map[string]bool{}, pkgNames: map[string][]string{}}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	req := regexp.MustCompile(`(?m)^\s*(?:require\s+)?([a-zA-Z0-9][^\s]*\.[^\s]+)\s+(v[^\s]+)`)
	for _, m := range req.FindAllStringSubmatch(string(mod), -1) {
		c.requires[m[1]] = m[2]
	}
	if m := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindStringSubmatch(string(mod)); m != nil {
		c.module = m[1]
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			c.top[e.Name()] = true
		}
	}
	// Every in-module package by name, for [pkg.Name] links whose package the citing file does not import.
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if p != root && skipDirs[d.Name()] {
			return filepath.SkipDir
		}
		rel := filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, root), string(filepath.Separator)))
		c.readIgnore(p, rel)
		if has, _ := filepath.Glob(filepath.Join(p, "*.go")); len(has) > 0 {
			c.pkgNames[path.Base(c.module+"/"+rel)] = append(c.pkgNames[path.Base(c.module+"/"+rel)], path.Join(c.module, rel))
		}
		return nil
	})
	return c, err
}

func (c *checker) add(file string, line int, format string, args ...any) {
	f := Finding{File: file, Line: line, Text: fmt.Sprintf(format, args...)}
	if !slices.Contains(c.found, f) { // a Markdown link target is also a path in its line
		c.found = append(c.found, f)
	}
}

// ignoreRule is one .gitignore pattern: dir is the directory of its .gitignore (slash-separated, "" at the root).
type ignoreRule struct {
	dir, pattern      string
	anchored, dirOnly bool
}

func (c *checker) readIgnore(abs, rel string) {
	b, err := os.ReadFile(filepath.Join(abs, ".gitignore"))
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "!") {
			continue
		}
		r := ignoreRule{dir: rel, dirOnly: strings.HasSuffix(l, "/")}
		l = strings.TrimSuffix(l, "/")
		r.anchored = strings.Contains(l, "/")
		r.pattern = strings.TrimPrefix(l, "/")
		c.ignores = append(c.ignores, r)
	}
}

// ignored reports whether .gitignore ignores rel or one of its parent directories: such a path is a build output or
// run-time state, whose absence in a checkout proves nothing.
func (c *checker) ignored(rel string) bool {
	parts := strings.Split(rel, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		for _, r := range c.ignores {
			sub := prefix
			if r.dir != "" {
				if !strings.HasPrefix(prefix, r.dir+"/") {
					continue
				}
				sub = strings.TrimPrefix(prefix, r.dir+"/")
			}
			if r.dirOnly && i == len(parts)-1 {
				if st, err := os.Stat(filepath.Join(c.root, prefix)); err == nil && !st.IsDir() {
					continue
				}
			}
			var ok bool
			if r.anchored {
				ok, _ = path.Match(r.pattern, sub)
			} else {
				ok, _ = path.Match(r.pattern, path.Base(sub))
			}
			if ok {
				return true
			}
		}
	}
	return false
}

// machinePath finds absolute paths of a developer's machine.
var machinePath = regexp.MustCompile(`(?:^|[\s"'(` + "`" + `=:,\[])(/(?:home|Users|work)/[^\s"'()` + "`" + `]*)`)

func (c *checker) absolutePaths(rel string, b []byte) {
	if !bytes.Contains(b, []byte("/home/")) && !bytes.Contains(b, []byte("/Users/")) && !bytes.Contains(b, []byte("/work/")) {
		return // the common case, without running the regexp over every line
	}
	for i, l := range strings.Split(string(b), "\n") {
		for _, m := range machinePath.FindAllStringSubmatch(l, -1) {
			c.add(rel, i+1, "absolute path of a developer's machine %s: cite a path in the repository or a command",
				strings.TrimRight(m[1], ".,:;"))
		}
	}
}

// pathRE matches the path-like start of a word: two or more slash-separated elements.
var pathRE = regexp.MustCompile(`^\.{0,2}/?[A-Za-z0-9_.*-]+(?:/[A-Za-z0-9_.*{},<>$%-]*)+`)

// pathSep separates the words pathRE looks at.
const pathSep = " \t\"'(`="

// qualified matches the last element of a Go identifier qualified by its package's directory: pkg.Name, pkg.Type.Member.
var qualified = regexp.MustCompile(`^([a-z][a-z0-9_]*)\.([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)$`)

// allowed are path-like words that are not repository paths, each with the reason.
var allowed = map[string]string{
	"deploy/tidemark": "kubectl's name of the tidemark Deployment (kubectl exec deploy/tidemark)",
}

// mdLink finds the targets of Markdown links.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func (c *checker) markdown(rel string, b []byte) {
	for i, l := range strings.Split(string(b), "\n") {
		c.paths(rel, i+1, l)
		for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
			t := m[1]
			if strings.Contains(t, "://") || strings.HasPrefix(t, "#") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			t, _, _ = strings.Cut(t, "#")
			c.citedPath(rel, i+1, t, true)
		}
	}
}

// scriptComments checks the repository paths cited in the comments of a TypeScript, shell or YAML file: the text
// after a line's leading //, /*, * or #.
func (c *checker) scriptComments(rel string, b []byte) {
	for i, l := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(l)
		for _, p := range []string{"//", "/*", "*", "#"} {
			if strings.HasPrefix(t, p) && !strings.HasPrefix(t, "#!") {
				c.paths(rel, i+1, strings.TrimPrefix(t, p))
				break
			}
		}
	}
}

// issueRE finds a citation of one of this project's issues (the word issue and its number): history, which belongs in
// commit messages. Another project's issue is cited by its name and number (Burrow #854).
var issueRE = regexp.MustCompile(`(?i)\bissues?[ -]#?[0-9]+\b`)

// paths checks the repository paths cited in one line of text of file rel, and that it cites no issue.
func (c *checker) paths(rel string, line int, text string) {
	if strings.Contains(text, "ssue") {
		if m := issueRE.FindString(text); m != "" {
			c.add(rel, line, "%q is history: state the rule (the commit message carries the issue)", m)
		}
	}
	if !strings.Contains(text, "/") {
		return
	}
	for start := 0; start < len(text); {
		end := start
		for end < len(text) && !strings.ContainsRune(pathSep, rune(text[end])) {
			end++
		}
		if word := text[start:end]; strings.Contains(word, "/") {
			p := pathRE.FindString(word)
			call := len(p) == len(word) && end < len(text) && text[end] == '(' // pkg/x.F(...) is code, not a path
			if p != "" && !call {
				c.citedPath(rel, line, p, false)
			}
		}
		start = end + 1
	}
}

// citedPath checks one path p cited in file rel. link: p is a Markdown link target (relative to rel's directory).
func (c *checker) citedPath(rel string, line int, p string, link bool) {
	p = strings.TrimRight(p, ".,:;!?'\"`)]")
	if i := strings.Index(p, ":"); i > 0 { // file.go:123
		p = p[:i]
	}
	p = strings.TrimSuffix(p, "/...")
	if p == "" || strings.ContainsAny(p, "<>{}$%") || strings.Contains(p, "://") {
		return
	}
	if reason, ok := allowed[p]; ok && reason != "" {
		return
	}
	dir := path.Dir(rel)
	var cands []string
	switch {
	case link, strings.HasPrefix(p, "../"):
		cands = []string{path.Join(dir, p)}
	case strings.HasPrefix(p, "/"):
		return // an HTTP path, or a machine path that absolutePaths reports
	default:
		// A path starting with ./ is relative to the repository root in a command (go test ./collector), else to
		// the citing file's directory.
		bare := strings.TrimPrefix(p, "./")
		first, _, _ := strings.Cut(bare, "/")
		if c.top[first] || strings.HasPrefix(p, "./") {
			cands = append(cands, path.Clean(bare))
		}
		if _, err := os.Stat(filepath.Join(c.root, dir, first)); err == nil && dir != "." {
			cands = append(cands, path.Join(dir, bare))
		}
	}
	if len(cands) == 0 {
		return
	}
	// dir/pkg.Name (a Go identifier qualified by its package's directory): the package must declare it.
	if m := qualified.FindStringSubmatch(path.Base(p)); m != nil {
		for _, cand := range cands {
			pkgDir := path.Join(path.Dir(cand), m[1])
			if c.exists(pkgDir) {
				if msg := c.inPackage(path.Join(c.module, pkgDir), m[2]); msg != "" {
					c.add(rel, line, "%s: %s", p, msg)
				}
				return
			}
		}
	}
	for _, cand := range cands {
		if cand == ".." || strings.HasPrefix(cand, "../") {
			c.add(rel, line, "path %s is outside the repository", p)
			return
		}
		if c.exists(cand) || c.ignored(cand) {
			return
		}
	}
	c.add(rel, line, "path %s does not exist", p)
}

func (c *checker) exists(rel string) bool {
	if strings.Contains(rel, "*") {
		m, _ := filepath.Glob(filepath.Join(c.root, filepath.FromSlash(rel)))
		return len(m) > 0
	}
	_, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel)))
	return err == nil
}

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
