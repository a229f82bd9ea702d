package benchproc

import (
	"context"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Provenance is what every benchmark's JSON line says about where its figures come from: the code measured, the
// versions of what it was measured against, and how busy the machine was.
type Provenance struct {
	// Commit is `git rev-parse HEAD` of the working tree the bench runs in, with "-dirty" appended when
	// `git status --porcelain` lists changes ("" outside a git checkout).
	Commit string `json:"commit"`
	// Go is the Go toolchain the bench (and the binaries it builds) ran with.
	Go string `json:"go"`
	// Peers are the versions of the other parts measured or used: Go modules of the bench's build (sarama,
	// clickhouse-go, ...), servers (clickhouse, kafka) and peer tools, by name.
	Peers map[string]string `json:"peers"`
	// Rounds is how many times each phase ran (alternated with the others).
	Rounds int `json:"rounds"`
	// LoadAvg is /proc/loadavg's 1-minute load average at the end of each phase, by phase name, in the order the
	// phases ran.
	LoadAvg map[string][]float64 `json:"loadavg_1m"`
}

// NewProvenance fills Commit, Go and the versions of the named Go modules this binary was built with (e.g.
// "github.com/IBM/sarama"), keyed by module path.
func NewProvenance(ctx context.Context, modules ...string) *Provenance {
	p := &Provenance{Commit: Commit(ctx), Go: runtime.Version(), Peers: map[string]string{}, LoadAvg: map[string][]float64{}}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			for _, m := range modules {
				if d.Path == m {
					p.Peers[m] = d.Version
				}
			}
		}
	}
	return p
}

// Phase records the 1-minute load average at the end of a run of phase (nothing if /proc/loadavg is unreadable).
func (p *Provenance) Phase(phase string) {
	if v, ok := LoadAvg1(); ok {
		p.LoadAvg[phase] = append(p.LoadAvg[phase], v)
	}
}

// Commit is `git rev-parse HEAD` in the current directory, "-dirty" appended when the tree has changes; "" when git
// or the checkout is missing.
func Commit(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		c += "-dirty"
	}
	return c
}

// LoadAvg1 is /proc/loadavg's 1-minute load average; ok is false when it cannot be read.
func LoadAvg1() (v float64, ok bool) {
	f := strings.Fields(LoadAvg())
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}
