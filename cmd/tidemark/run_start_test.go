package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// forward accepts on ln and pipes every connection to target until the test ends.
func forward(t *testing.T, ln net.Listener, target string) {
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(u, c); _ = u.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, u); _ = c.Close() }()
		}
	}()
}

// get returns the status and body of GET url, or 0 when nothing answers.
func get(url string) (int, string) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus waits until url answers with status want and returns the body.
func waitStatus(t *testing.T, url string, want int, timeout time.Duration) string {
	t.Helper()
	var body string
	testenv.Eventually(t, timeout, func() error {
		var code int
		if code, body = get(url); code != want {
			return fmt.Errorf("%s: %d %q, want %d", url, code, body, want)
		}
		return nil
	})
	return body
}

// TestRunWaitsForClickHouse is QA defect 5: with ClickHouse unreachable at start, `tidemark run` serves /healthz
// and /metrics, answers /readyz 503 with the reason, retries, and becomes ready once ClickHouse answers (a proxy
// that starts listening later). A stop during the retries is clean.
func TestRunWaitsForClickHouse(t *testing.T) {
	brokers := testenv.Kafka(t)
	db, _ := testenv.ClickHouseDB(t)
	chAddr := testenv.FreeAddr(t)
	writeCfg := func(brokers []string, httpAddr string) string {
		p := filepath.Join(t.TempDir(), "run.yaml")
		cfg := fmt.Sprintf(`kafka: {brokers: [%s]}
clickhouse: {addr: [%s], database: %s, dial_timeout: 1s}
collector:
  dead_letter_topic: %s
  replay_state_topic: %s
  receipts: {enabled: true, topic: %s, group: %s, partitions: 1}
lag: {enabled: false}
http: {listen: "%s"}
`, strings.Join(brokers, ", "), chAddr, db, testenv.Name(t, "dlq"), testenv.Name(t, "rs"), testenv.Name(t, "rc"), testenv.Name(t, "g"), httpAddr)
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var retries *logCounter // the running process's "cannot reach ClickHouse; retrying" warnings
	start := func(brokers []string) (base string, stop func() error) {
		httpAddr := testenv.FreeAddr(t)
		cfg, err := loadConfig(writeCfg(brokers, httpAddr), nil, noEnv)
		if err != nil {
			t.Fatal(err)
		}
		retries = newLogCounter(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}),
			"cannot reach ClickHouse; retrying")
		return "http://" + httpAddr, runInTest(t, cfg, slog.New(retries))
	}

	// A stop while ClickHouse is still unreachable is a clean stop (run returns nil, SIGTERM exits 0).
	base, stop := start(brokers)
	waitStatus(t, base+"/healthz", http.StatusOK, 10*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("stop during the retries: %v, want a clean stop", err)
	}

	base, stop = start(brokers)
	waitStatus(t, base+"/healthz", http.StatusOK, 10*time.Second)
	if code, body := get(base + "/metrics"); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("/metrics: %d", code)
	}
	// A few failed attempts (the process logs each), then /readyz still says why it is not ready.
	select {
	case <-retries.reached(3):
	case <-time.After(60 * time.Second): // a hang guard: attempts come 0.5, 1 and 2 s apart
		t.Fatalf("%d ClickHouse retries logged in 60 s, want 3", retries.count())
	}
	if code, body := get(base + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "connecting to ClickHouse: ") {
		t.Fatalf("/readyz %d %q while ClickHouse is unreachable, want 503 with the last attempt's error", code, body)
	}
	ln, err := net.Listen("tcp", chAddr)
	if err != nil {
		t.Fatalf("take the ClickHouse port back for the proxy: %v", err)
	}
	forward(t, ln, testenv.ClickHouseAddr(t))
	waitStatus(t, base+"/readyz", http.StatusOK, 45*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}

	// Brokers unreachable (ClickHouse up through the proxy): the collector retries instead of exiting on "ensure
	// dead-letter topic", /readyz names Kafka, and a stop is clean.
	base, stop = start([]string{testenv.FreeAddr(t)})
	waitStatus(t, base+"/healthz", http.StatusOK, 10*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get(base + "/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "Kafka") {
			break
		}
		if code == http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("/readyz %d %q with brokers unreachable, want 503 naming Kafka", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatalf("stop while Kafka is unreachable: %v, want a clean stop", err)
	}
}

// logCounter is a slog.Handler that passes records on to next and counts those whose message is msg, so a test can
// wait for the process under test to have logged it n times (see reached).
type logCounter struct {
	next slog.Handler
	msg  string
	st   *logCount // shared by the handlers WithAttrs/WithGroup derive
}

type logCount struct {
	mu      sync.Mutex // guards n and waiters
	n       int
	waiters map[int][]chan struct{}
}

func newLogCounter(next slog.Handler, msg string) *logCounter {
	return &logCounter{next: next, msg: msg, st: &logCount{waiters: map[int][]chan struct{}{}}}
}

func (h *logCounter) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *logCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.st.mu.Lock()
		h.st.n++
		for n, ws := range h.st.waiters {
			if h.st.n >= n {
				for _, w := range ws {
					close(w)
				}
				delete(h.st.waiters, n)
			}
		}
		h.st.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *logCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return &logCounter{next: h.next.WithAttrs(as), msg: h.msg, st: h.st}
}

func (h *logCounter) WithGroup(name string) slog.Handler {
	return &logCounter{next: h.next.WithGroup(name), msg: h.msg, st: h.st}
}

// reached returns a channel closed once msg was logged n times.
func (h *logCounter) reached(n int) <-chan struct{} {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	c := make(chan struct{})
	if h.st.n >= n {
		close(c)
		return c
	}
	h.st.waiters[n] = append(h.st.waiters[n], c)
	return c
}

func (h *logCounter) count() int {
	h.st.mu.Lock()
	defer h.st.mu.Unlock()
	return h.st.n
}
