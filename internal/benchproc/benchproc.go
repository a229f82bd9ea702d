// Package benchproc runs the shipped binaries the way the benchmarks under cmd/bench-* measure them: built with
// `go build`, started as separate processes with a user's configuration file, observed from outside only (their
// /metrics, /readyz and /proc/PID/status), stopped by signal. Nothing here reaches into a process.
package benchproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Build compiles each package (e.g. "./cmd/tidemark") into dir, named after its last path element, and returns the
// binaries' paths in the same order. It runs in the current directory, which must be inside the module.
func Build(ctx context.Context, dir string, pkgs ...string) ([]string, error) {
	var bins []string
	for _, p := range pkgs {
		bin := filepath.Join(dir, filepath.Base(p))
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, p).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %v\n%s", p, err, out)
		}
		bins = append(bins, bin)
	}
	return bins, nil
}

// FreePort returns a loopback TCP port nobody listened on a moment ago (the kernel's choice), for an HTTP endpoint
// of a process the bench starts.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is one started process, its output appended to Log.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Log  string
	done chan struct{}
	err  error
}

// CleanEnv is the bench's environment without TIDEMARK_* variables: `tidemark run` reads TIDEMARK_* as configuration
// (TIDEMARK_KAFKA_BROKERS, TIDEMARK_CLICKHOUSE_ADDR, ...), and a process must run on its configuration file only.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TIDEMARK_") {
			env = append(env, kv)
		}
	}
	return env
}

// Start starts bin with args, stdout and stderr appended to logPath, env as given (nil: CleanEnv()).
func Start(name, logPath string, env []string, bin string, args ...string) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if env == nil {
		env = CleanEnv()
	}
	cmd.Env = env
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to end and returns its exit error (nil for exit status 0).
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.Name, timeout)
	}
}

// Kill sends SIGKILL (a crash: no shutdown, no group leave, nothing flushed) and waits for the process to end.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM, waits up to timeout for a clean exit, then SIGKILLs; it returns the exit error of a clean
// stop, or an error saying it had to kill.
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if err := p.Wait(timeout); err == nil || p.Exited() {
		return err
	}
	p.Kill()
	return fmt.Errorf("%s ignored SIGTERM for %v: killed", p.Name, timeout)
}

// Tail is the last n lines of the process's log (for error messages).
func (p *Proc) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StatusMB reads a kB field of /proc/PID/status (VmRSS: resident now, VmHWM: peak resident) in MB.
func StatusMB(pid int, field string) (float64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// LoadAvg is /proc/loadavg's three load averages, space-separated ("" if unreadable).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// Ready reports whether GET url answers 200 (a /readyz).
func Ready(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitReady polls url every 200 ms until it answers 200, p exits, or timeout passes.
func WaitReady(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !Ready(ctx, url) {
		if p.Exited() {
			return fmt.Errorf("%s exited before %s answered 200:\n%s", p.Name, url, p.Tail(30))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not 200 after %v:\n%s", p.Name, url, timeout, p.Tail(30))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// Families is one scrape: metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs a Prometheus text-format endpoint and parses it.
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseText(resp.Body)
}

// ParseText parses the Prometheus text exposition format.
func ParseText(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return Families(fams), nil
}

// Value is the value of the one series of family name whose labels include every pair of match (a counter's or a
// gauge's value; for several matching series, their sum), and whether any series matched.
func (f Families) Value(name string, match map[string]string) (float64, bool) {
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	var sum float64
	found := false
	for _, m := range mf.GetMetric() {
		if !labelsMatch(m, match) {
			continue
		}
		found = true
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, found
}

// Each calls fn with the labels and value of every counter, gauge or untyped series of family name.
func (f Families) Each(name string, fn func(labels map[string]string, v float64)) {
	mf := f[name]
	if mf == nil {
		return
	}
	for _, m := range mf.GetMetric() {
		ls := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			ls[l.GetName()] = l.GetValue()
		}
		var v float64
		switch {
		case m.GetCounter() != nil:
			v = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			v = m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			v = m.GetUntyped().GetValue()
		default:
			continue
		}
		fn(ls, v)
	}
}

func labelsMatch(m *dto.Metric, match map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := match[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(match)
}
