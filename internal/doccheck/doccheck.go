package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
