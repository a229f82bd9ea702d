package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
)

// fetchProfiles writes the daemon's CPU profile over most of the window and a heap profile after it.
func fetchProfiles(base, dir string, window time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	secs := max(int((window - 10*time.Second).Seconds()), 5)
	get := func(path, file string) error {
		resp, err := (&http.Client{Timeout: window + time.Minute}).Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}
	if err := get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), "tidemark-cpu.pprof"); err != nil {
		return err
	}
	if err := get("/debug/pprof/heap?gc=1", "tidemark-heap.pprof"); err != nil {
		return err
	}
	return get("/debug/pprof/allocs", "tidemark-allocs.pprof")
}

// startupProfileSeconds is the length of the start-up CPU profile: the first cycle and its rendering at 100,000
// group-partitions on a loaded machine.
const startupProfileSeconds = 15

// fetchStartupProfile writes the daemon's CPU profile of its first startupProfileSeconds after its HTTP server
// answered (the cold first cycle, its evaluation and first rendering): tidemark-startup-cpu.pprof.
func fetchStartupProfile(base, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 2 * startupProfileSeconds * time.Second}).Get(
		fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, startupProfileSeconds))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("start-up profile: %s", resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, "tidemark-startup-cpu.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// metrics is one scrape, parsed just enough: series per metric name and the value of each name's first series.
type metrics struct {
	counts map[string]int
	first  map[string]float64
}

func (m metrics) value(name string) float64 { return m.first[name] }
func (m metrics) count(name string) int     { return m.counts[name] }

func parseMetrics(text []byte) metrics {
	m := metrics{counts: map[string]int{}, first: map[string]float64{}}
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		end := bytes.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := string(line[:end])
		m.counts[name]++
		if m.counts[name] == 1 {
			rest := line[end:]
			if rest[0] == '{' {
				if i := bytes.LastIndexByte(rest, '}'); i >= 0 {
					rest = rest[i+1:]
				}
			}
			f := strings.Fields(string(rest))
			if len(f) > 0 {
				m.first[name], _ = strconv.ParseFloat(f[0], 64)
			}
		}
	}
	return m
}

// prometheusAccept is the Accept header Prometheus sends by default.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrape GETs url as Prometheus does (gzip) and returns the time until the whole compressed body was read, its
// size, and the uncompressed text.
func scrape(url string) (float64, int, []byte, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	req.Header.Set("Accept", prometheusAccept)
	req.Header.Set("Accept-Encoding", "gzip")
	t := time.Now()
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(t).Seconds()
	if err != nil {
		return 0, 0, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	text := body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return 0, 0, nil, err
		}
		if text, err = io.ReadAll(zr); err != nil {
			return 0, 0, nil, err
		}
	}
	return d, len(body), text, nil
}

// procCPUSeconds returns the user + system CPU time of process pid (fields 14 and 15 of /proc/PID/stat, in clock
// ticks of 1/100 s: USER_HZ is 100 on Linux).
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])) // after "pid (comm) ": field 3 is f[0]
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return (ut + st) / 100, nil
}

// cleanEnv returns the environment without the variables starting with prefix.
func cleanEnv(prefix string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// prefixWriter passes on the lines matching keep (warnings and errors of the process under test), prefixed.
type prefixWriter struct {
	prefix string
	w      io.Writer
	keep   string
	re     *regexp.Regexp
	mu     sync.Mutex
	buf    []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.re == nil {
		p.re = regexp.MustCompile(p.keep)
	}
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		if line := p.buf[:i+1]; p.re.Match(line) {
			_, _ = fmt.Fprintf(p.w, "%s%s", p.prefix, line)
		}
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func waitTopics(ctx context.Context, r *lagread.ClusterReader, prefix string, topics, parts int) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		md, err := r.Metadata(ctx)
		if err == nil {
			ready := 0
			for _, t := range md {
				if strings.HasPrefix(t.Topic, prefix) && len(t.Partitions) == parts {
					ok := true
					for _, p := range t.Partitions {
						ok = ok && p.Leader >= 0
					}
					if ok {
						ready++
					}
				}
			}
			if ready == topics {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return errors.New("topics not ready after 60s")
}

// forEach runs fn(0..n-1) on workers goroutines and returns the first error.
func forEach(n, workers int, fn func(i int) error) error {
	var mu sync.Mutex
	var first error
	next := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil
				mu.Unlock()
				if i >= n || stop {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// p50 is the median (the upper one of an even count); p99 the 99th percentile by nearest rank.
func p50(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func p99(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*99+99)/100-1)]
}
