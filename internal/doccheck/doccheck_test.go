package doccheck

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRepository: no comment or doc of the repository links an identifier, or cites a path, that does not exist, and
// none holds a path of a developer's machine.
func TestRepository(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	found, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
	t.Logf("checked in %v", time.Since(start))
}

// TestFindings: on a small repository with one of each mistake, Check finds exactly those.
func TestFindings(t *testing.T) {
	found, err := Check("testdata/repo")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.String())
	}
	want := []string{
		"docs/a.md:1: absolute path of a developer's machine /home/someone/x.sh: cite a path in the repository or a command",
		"docs/a.md:1: path ../pkg/gone.go does not exist",
		`docs/a.md:2: "issue 11" is history: state the rule (the commit message carries the issue)`,
		"pkg/pkg.go:1: doc link [Missing]: no such identifier in this package",
		"pkg/pkg.go:1: doc link [Real.Gone]: Real has no field or method Gone",
		"pkg/pkg.go:1: doc link [strings.Nope]: strings has no Nope",
		"pkg/pkg.go:1: doc link [pkg/sub.X]: no package pkg/sub",
		"pkg/pkg.go:2: path pkg/none.go does not exist",
		"pkg/pkg.go:11: the doc comment of F starts with other, another name",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
