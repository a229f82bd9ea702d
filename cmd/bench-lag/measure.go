package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/tidemark/internal/benchproc"
)

// phase is what the bench measures of one exporter in one round (or of the idle phase, without an exporter).
type phase struct {
	Tool  string `json:"tool"`
	Round int    `json:"round"`
	// FirstCompleteS: process start → first scrape with a lag series for every bench group-partition.
	FirstCompleteS   float64 `json:"first_complete_s,omitempty"`
	FirstCompleteCPU float64 `json:"first_complete_cpu_s,omitempty"`
	// FirstCorrect: that first complete scrape also passed the check against Kafka's consumer-groups command run
	// right after it (FirstCheck).
	FirstCorrect bool   `json:"first_correct"`
	FirstCheck   *check `json:"first_check,omitempty"`
	// WindowCheck: a scrape right after the window (workload still live, exporter still running) against Kafka's
	// command run just before it; the command runs outside the window so its requests are not counted.
	WindowCheck *check    `json:"window_check,omitempty"`
	Scrapes     []float64 `json:"scrape_s,omitempty"`
	ScrapeBytes int       `json:"scrape_bytes_gzip,omitempty"`
	Series      int       `json:"series,omitempty"`
	CPUPer180S  float64   `json:"cpu_s_per_180s,omitempty"`
	RSSMB       float64   `json:"rss_mb,omitempty"` // median over the window
	RSSMaxMB    float64   `json:"rss_max_mb,omitempty"`
	WindowS     float64   `json:"window_s"`
	// BrokerRequests: requests the brokers counted in the window (RequestMetrics RequestsPerSec, all brokers, the
	// workload's request types left out), by type.
	BrokerRequests   requestCounts `json:"broker_requests"`
	BrokerCPUPer180S float64       `json:"broker_cpu_s_per_180s"`
	LoadAvg          string        `json:"loadavg"` // 1, 5, 15 min at the end of the window
	// the daemon's own gauges (Tidemark only): each cycle's reads and evaluation, as it reports them
	cycles []cycleSample
}

type cycleSample struct{ n, read, eval float64 }

type measureOpts struct {
	window, every, poll time.Duration
	gp                  int
	names               seriesNames
	prefix              string
	cl                  *cluster
	wl                  *workload
	onScrape            func(metrics)
	during              func() error // runs concurrently with the window (profiles)
	startup             func() error // runs from the first answer of the HTTP server on; during starts after it ends
	logf                func(string, ...any)
}

// judge compares one scrape's text, taken at scrapeAt, with a truth; the tolerance follows from the poll interval,
// the time between the two readings and the workload's pace.
func judge(o measureOpts, text []byte, scrapeAt time.Time, tr *truth) (*check, error) {
	got, err := groupPartitions(text, o.names)
	if err != nil {
		return nil, err
	}
	from := scrapeAt.Add(-o.poll)
	if tr.start.Before(from) {
		from = tr.start
	}
	to := tr.end
	if scrapeAt.After(to) {
		to = scrapeAt
	}
	lagTol, timeTol := tolerance(to.Sub(from), float64(o.wl.rate), o.wl.commitEvery)
	c := compare(tr, got, o.names.seconds != "", lagTol, timeTol, o.wl.recordTS)
	if c.Rows == 0 {
		return nil, fmt.Errorf("0 rows compared: Kafka's consumer-groups command listed no bench group-partition")
	}
	return &c, nil
}

// complete reports whether a scrape has a lag series for every one of the bench's gp group-partitions.
func complete(text []byte, o measureOpts) bool {
	got, err := groupPartitions(text, o.names)
	if err != nil {
		return false
	}
	n := 0
	for k, e := range got {
		if strings.HasPrefix(k.group, o.prefix) && !isNaN(e.lag) {
			n++
		}
	}
	return n == o.gp
}

func isNaN(f float64) bool { return f != f }

// measure starts cmd (nil: the idle phase, no exporter), waits for its first complete scrape and checks it against
// Kafka's consumer-groups command, then measures one window: scrapes every o.every (mid-interval), CPU and RSS of
// the process from /proc, the brokers' request counters (JmxTool) and CPU at its ends; after the window, with the
// workload still live, it runs the command again and checks a scrape taken right after it (the command's requests
// stay out of the window's count). It stops the process with SIGTERM.
func measure(ctx context.Context, name string, cmd *exec.Cmd, url string, o measureOpts) (*phase, error) {
	logf := o.logf
	ph := &phase{Tool: name}
	pid := 0
	var exited chan error
	if cmd != nil {
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		exited = make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		stopped := false
		defer func() {
			if stopped {
				return
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}()
		pid = cmd.Process.Pid
		var startupDone chan error
		var first []byte
		var firstAt time.Time
		for {
			select {
			case err := <-exited:
				stopped = true
				return nil, fmt.Errorf("exited before its first complete scrape: %v", err)
			default:
			}
			if time.Since(t0) > 15*time.Minute {
				return nil, errors.New("no complete scrape within 15 minutes")
			}
			_, _, text, err := scrape(url)
			if err == nil && o.startup != nil && startupDone == nil {
				startupDone = make(chan error, 1)
				go func() { startupDone <- o.startup() }()
			}
			if err == nil && complete(text, o) {
				firstAt = time.Now()
				ph.FirstCompleteS = firstAt.Sub(t0).Seconds()
				if ph.FirstCompleteCPU, err = procCPUSeconds(pid); err != nil {
					return nil, err
				}
				first = text
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		m := parseMetrics(first)
		for n, c := range m.counts {
			if strings.HasPrefix(n, o.names.lag[:strings.Index(o.names.lag, "_")+1]) {
				ph.Series += c
			}
		}
		if o.onScrape != nil {
			o.onScrape(m)
		}
		tr, err := describeGroups(ctx, o.cl.lib, strings.Join(o.cl.brokers, ","), o.prefix)
		if err != nil {
			return nil, err
		}
		if ph.FirstCheck, err = judge(o, first, firstAt, tr); err != nil {
			return nil, fmt.Errorf("%s first complete scrape: %w", name, err)
		}
		ph.FirstCorrect = ph.FirstCheck.Missing == 0 && ph.FirstCheck.LagErrors == 0 && ph.FirstCheck.TimeErrors == 0
		logf("%s: first complete scrape after %.2fs (%.2f CPU s), %d series; against Kafka's command: %d rows, %d missing, %d lag errors, %d time-lag errors",
			name, ph.FirstCompleteS, ph.FirstCompleteCPU, ph.Series, ph.FirstCheck.Rows, ph.FirstCheck.Missing,
			ph.FirstCheck.LagErrors, ph.FirstCheck.TimeErrors)
		if o.during != nil {
			go func() {
				if startupDone != nil {
					if err := <-startupDone; err != nil {
						logf("start-up profile: %v", err)
					}
				}
				if err := o.during(); err != nil {
					logf("profiles: %v", err)
				}
			}()
		}
	}

	req0, err := o.cl.requests(ctx)
	if err != nil {
		return nil, err
	}
	bcpu0, err := o.cl.cpuSeconds()
	if err != nil {
		return nil, err
	}
	w0 := time.Now()
	var cpu0 float64
	if pid != 0 {
		if cpu0, err = procCPUSeconds(pid); err != nil {
			return nil, err
		}
	}
	var rss []float64
	nextScrape := w0.Add(o.every / 2) // mid-interval: never on a cycle boundary
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(w0) < o.window {
		select {
		case err := <-exited:
			return nil, fmt.Errorf("exited during the window: %v", err)
		case <-tick.C:
		}
		if pid != 0 {
			if v, err := benchproc.StatusMB(pid, "VmRSS"); err == nil {
				rss = append(rss, v)
			}
		}
		if !time.Now().After(nextScrape) {
			continue
		}
		nextScrape = nextScrape.Add(o.every)
		if pid == 0 {
			continue
		}
		d, n, text, err := scrape(url)
		if err != nil {
			return nil, fmt.Errorf("scrape: %w", err)
		}
		ph.Scrapes, ph.ScrapeBytes = append(ph.Scrapes, d), n
		if o.onScrape != nil {
			o.onScrape(parseMetrics(text))
		}
	}
	if pid != 0 {
		cpu1, err := procCPUSeconds(pid)
		if err != nil {
			return nil, err
		}
		ph.WindowS = time.Since(w0).Seconds()
		ph.CPUPer180S = (cpu1 - cpu0) / ph.WindowS * 180
	} else {
		ph.WindowS = time.Since(w0).Seconds()
	}
	bcpu1, err := o.cl.cpuSeconds()
	if err != nil {
		return nil, err
	}
	req1, err := o.cl.requests(ctx)
	if err != nil {
		return nil, err
	}
	ph.BrokerRequests = req1.sub(req0)
	ph.BrokerCPUPer180S = (bcpu1 - bcpu0) / ph.WindowS * 180
	if pid != 0 {
		tr, err := describeGroups(ctx, o.cl.lib, strings.Join(o.cl.brokers, ","), o.prefix)
		if err != nil {
			return nil, err
		}
		at := time.Now()
		_, _, text, err := scrape(url)
		if err != nil {
			return nil, fmt.Errorf("scrape after the window: %w", err)
		}
		if ph.WindowCheck, err = judge(o, text, at, tr); err != nil {
			return nil, fmt.Errorf("%s scrape after the window: %w", name, err)
		}
		if len(rss) == 0 || len(ph.Scrapes) == 0 {
			return nil, errors.New("window too short: no RSS sample or no scrape")
		}
		ph.RSSMB, ph.RSSMaxMB = p50(rss), slices.Max(rss)
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		ph.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return ph, nil
}
