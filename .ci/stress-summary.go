//go:build ignore

// stress-summary reads `go test -json` streams and prints, per test, how many of its runs failed: the table
// `make stress` ends with (see docs/testing.md). It also lists the tests that skipped because a server was missing
// (testenv's "is not running" message), which .ci/stress runs again against the stack.
//
//	go run .ci/stress-summary.go [-skipped] PHASE=FILE.json...
//
// With -skipped it prints only "package<TAB>^(TestA|TestB)$" lines for those tests. Otherwise it prints the table
// and exits 1 when any run failed (a package that failed without a failing test, e.g. a build error, a panic in
// TestMain or a timeout, counts as a failure of "(package)").
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type key struct{ phase, pkg, test string }

type tally struct {
	runs, fails int
	first       string // why the first failed run failed (see failureLine)
}

var fileLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

func main() {
	skipped := flag.Bool("skipped", false, "print the tests skipped for a missing server, as package and -run regex")
	flag.Parse()
	tallies := map[key]*tally{}
	serverSkips := map[string]map[string]bool{} // package → top-level tests skipped for a missing server
	pkgFailed := map[key]bool{}
	pkgHadTestFail := map[key]bool{}
	var order []key
	for _, arg := range flag.Args() {
		phase, file, ok := strings.Cut(arg, "=")
		if !ok {
			fatalf("argument %q: want PHASE=FILE", arg)
		}
		f, err := os.Open(file)
		if err != nil {
			fatalf("%v", err)
		}
		output := map[key][]string{} // output of the current run of each test, for its failure line
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Package == "" {
				continue // go build output interleaved with the stream
			}
			k := key{phase, e.Package, e.Test}
			switch e.Action {
			case "run":
				output[k] = output[k][:0]
			case "output":
				output[k] = append(output[k], e.Output)
			case "skip":
				if e.Test != "" && strings.Contains(strings.Join(output[k], ""), " is not running (") {
					top, _, _ := strings.Cut(e.Test, "/")
					if serverSkips[e.Package] == nil {
						serverSkips[e.Package] = map[string]bool{}
					}
					serverSkips[e.Package][top] = true
				}
			case "pass", "fail":
				if e.Test == "" {
					if e.Action == "fail" {
						pkgFailed[k] = true
						if !pkgHadTestFail[k] {
							k.test = "(package)"
							t := get(tallies, k, &order)
							t.runs++
							t.fails++
							if t.first == "" {
								t.first = lastLines(output[key{phase, e.Package, ""}], 1)
							}
						}
					}
					continue
				}
				t := get(tallies, k, &order)
				t.runs++
				if e.Action == "fail" {
					t.fails++
					pkgHadTestFail[key{phase, e.Package, ""}] = true
					if t.first == "" {
						t.first = failureLine(output[k])
					}
				}
			}
		}
		if err := sc.Err(); err != nil {
			fatalf("read %s: %v", file, err)
		}
		f.Close()
	}
	if *skipped {
		pkgs := make([]string, 0, len(serverSkips))
		for p := range serverSkips {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
		for _, p := range pkgs {
			var tests []string
			for t := range serverSkips[p] {
				tests = append(tests, t)
			}
			sort.Strings(tests)
			fmt.Printf("%s\t^(%s)$\n", p, strings.Join(tests, "|"))
		}
		return
	}
	report(os.Stdout, tallies, order)
}

func get(m map[key]*tally, k key, order *[]key) *tally {
	t := m[k]
	if t == nil {
		t = &tally{}
		m[k] = t
		*order = append(*order, k)
	}
	return t
}

// failureLine picks the line that says why a run failed: the last file_test.go:NN: line of its output (t.Fatal
// ends the run; earlier ones are usually t.Log), else its last line.
func failureLine(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if fileLine.MatchString(lines[i]) {
			return strings.TrimSpace(lines[i])
		}
	}
	return lastLines(lines, 1)
}

func lastLines(lines []string, n int) string {
	var keep []string
	for i := len(lines) - 1; i >= 0 && len(keep) < n; i-- {
		if s := strings.TrimSpace(lines[i]); s != "" && !strings.HasPrefix(s, "FAIL") && !strings.HasPrefix(s, "---") {
			keep = append(keep, s)
		}
	}
	return strings.Join(keep, " | ")
}

func report(w io.Writer, tallies map[key]*tally, order []key) {
	type phaseTotal struct{ tests, runs, fails, failing int }
	totals := map[string]*phaseTotal{}
	var phases []string
	var failing []key
	for _, k := range order {
		t := tallies[k]
		pt := totals[k.phase]
		if pt == nil {
			pt = &phaseTotal{}
			totals[k.phase] = pt
			phases = append(phases, k.phase)
		}
		if k.test != "(package)" {
			pt.tests++
			pt.runs += t.runs
		}
		pt.fails += t.fails
		if t.fails > 0 {
			pt.failing++
			failing = append(failing, k)
		}
	}
	for _, p := range phases {
		pt := totals[p]
		fmt.Fprintf(w, "stress %s: %d tests (subtests included), %d runs, %d failed runs in %d tests\n",
			p, pt.tests, pt.runs, pt.fails, pt.failing)
	}
	if len(failing) == 0 {
		fmt.Fprintln(w, "no failures")
		return
	}
	sort.SliceStable(failing, func(i, j int) bool {
		a, b := tallies[failing[i]], tallies[failing[j]]
		return a.fails*b.runs > b.fails*a.runs // highest failure rate first
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tTEST\tFAILED/RUNS\tFIRST FAILURE")
	for _, k := range failing {
		t := tallies[k]
		pkg := strings.TrimPrefix(k.pkg, "github.com/tidemark/tidemark/")
		first := t.first
		if len(first) > 160 {
			first = first[:157] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s.%s\t%d/%d\t%s\n", k.phase, pkg, k.test, t.fails, t.runs, first)
	}
	tw.Flush()
	os.Exit(1)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "stress-summary: "+format+"\n", args...)
	os.Exit(2)
}
