package readiness

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// TestState: the zero State is ready; a reason wins until a check replaces it; the check runs at every question.
func TestState(t *testing.T) {
	var s State
	if why := s.NotReady(); why != "" {
		t.Fatalf("zero state: %q", why)
	}
	s.Set("starting")
	if why := s.NotReady(); why != "starting" {
		t.Fatalf("after Set: %q", why)
	}
	var err error
	s.SetCheck(func() error { return err })
	if why := s.NotReady(); why != "" {
		t.Fatalf("check passing: %q", why)
	}
	err = errors.New("sink failing")
	if why := s.NotReady(); why != "sink failing" {
		t.Fatalf("check failing: %q", why)
	}
	s.Set("stopping") // a reason drops the check
	if why := s.NotReady(); why != "stopping" {
		t.Fatalf("after Set over a check: %q", why)
	}
}

func state(reason string) *State {
	s := &State{}
	s.Set(reason)
	return s
}

// TestProcessStatus: the process's own reason comes first; one cluster's reason is the answer; with several the
// process is ready while one cluster is, naming every cluster; ?cluster=NAME answers for that cluster alone.
func TestProcessStatus(t *testing.T) {
	up, down := func(n string) Entry { return Entry{n, state("")} }, func(n string) Entry { return Entry{n, state("no brokers")} }
	for _, tc := range []struct {
		name    string
		process string
		entries []Entry
		only    string
		code    int
		body    string
	}{
		{"starting", "starting", []Entry{up("a")}, "", 503, "not ready: starting\n"},
		// the process's reason wins over a cluster asked about
		{"starting, one asked", "starting", []Entry{up("a")}, "a", 503, "not ready: starting\n"},
		{"one cluster ready", "", []Entry{up("a")}, "", 200, "ready\n"},
		{"one cluster down", "", []Entry{down("a")}, "", 503, "not ready: no brokers\n"},
		{"all up", "", []Entry{up("a"), up("b")}, "", 200, "ready\ncluster a: ready\ncluster b: ready\n"},
		// one cluster down keeps the pod in its Service: the others' series must still be scraped
		{"one of two down", "", []Entry{down("a"), up("b")}, "", 200,
			"ready: 1 of 2 clusters\ncluster a: not ready: no brokers\ncluster b: ready\n"},
		{"none up", "", []Entry{down("a"), down("b")}, "", 503,
			"not ready: no cluster is ready\ncluster a: not ready: no brokers\ncluster b: not ready: no brokers\n"},
		{"asked, down", "", []Entry{down("a"), up("b")}, "a", 503, "cluster a: not ready: no brokers\n"},
		{"asked, up", "", []Entry{down("a"), up("b")}, "b", 200, "cluster b: ready\n"},
		{"asked, unknown", "", []Entry{up("a")}, "c", 404, "no cluster \"c\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Process{Entries: tc.entries}
			p.State.Set(tc.process)
			if code, body := p.Status(tc.only); code != tc.code || body != tc.body {
				t.Errorf("got %d %q, want %d %q", code, body, tc.code, tc.body)
			}
		})
	}
}

// TestProcessServeHTTP: the summary is the last line of every body, ready or not; ?cluster= is read from the query.
func TestProcessServeHTTP(t *testing.T) {
	p := &Process{Entries: []Entry{{"a", state("")}, {"b", state("no brokers")}}, Summary: "2 clusters"}
	for _, tc := range []struct {
		url  string
		code int
		body string
	}{
		{"/readyz", 200, "ready: 1 of 2 clusters\ncluster a: ready\ncluster b: not ready: no brokers\nruns: 2 clusters\n"},
		{"/readyz?cluster=b", 503, "cluster b: not ready: no brokers\nruns: 2 clusters\n\n"}, // http.Error adds a newline
	} {
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.url, nil))
		if rec.Code != tc.code || rec.Body.String() != tc.body {
			t.Errorf("%s: got %d %q, want %d %q", tc.url, rec.Code, rec.Body.String(), tc.code, tc.body)
		}
	}
}

type fakeHealth struct{ last time.Time }

func (f fakeHealth) Health() lagexporter.Health { return lagexporter.Health{LastSuccess: f.last} }

// TestLag: not ready before the first cycle; ready while the last success is within three poll intervals plus a
// cycle timeout (30 s × 3 + 10 s = 100 s); stale past it, the age rounded to the second.
func TestLag(t *testing.T) {
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	cfg := &lagexporter.Config{PollInterval: 30 * time.Second, CycleTimeout: 10 * time.Second}
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name string
		last time.Time
		want string
	}{
		{"no cycle yet", time.Time{}, "lag exporter: no poll cycle has completed yet"},
		{"fresh", now.Add(-time.Second), ""},
		{"at the bound", now.Add(-100 * time.Second), ""}, // the bound itself is still fresh (age > bound is stale)
		{"stale", now.Add(-100*time.Second - 600*time.Millisecond), "lag exporter: no successful poll cycle for 1m41s"},
	} {
		err := Lag(fakeHealth{tc.last}, cfg, clock)()
		if got := errText(err); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestCluster: the collector's reason wins; when only the collector is not ready the reason says the lag is served.
func TestCluster(t *testing.T) {
	col, lag := errors.New("collector waits for ClickHouse"), errors.New("lag exporter: no poll cycle has completed yet")
	for _, tc := range []struct {
		col, lag error
		want     string
	}{
		{nil, nil, ""},
		{col, nil, "collector waits for ClickHouse; lag exporter ready"},
		{nil, lag, lag.Error()},
		{col, lag, col.Error()},
	} {
		got := errText(Cluster(func() error { return tc.col }, func() error { return tc.lag })())
		if got != tc.want {
			t.Errorf("collector %v, lag %v: got %q, want %q", tc.col, tc.lag, got, tc.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestRetry: a dependency is called until it answers; each failure is the State's reason and one warning; a
// cancelled context ends the retries with its cause.
func TestRetry(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var st State
	calls := 0
	var reasons []string
	v, err := Retry(context.Background(), Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, Multiplier: 2}, log, &st,
		"ClickHouse", func() (int, error) {
			calls++
			reasons = append(reasons, st.NotReady())
			if calls < 3 {
				return 0, errors.New("connection refused")
			}
			return 7, nil
		})
	if v != 7 || err != nil || calls != 3 {
		t.Fatalf("got %d, %v after %d calls; want 7, nil after 3", v, err, calls)
	}
	if want := "connecting to ClickHouse: connection refused"; reasons[1] != want || reasons[2] != want {
		t.Errorf("reasons seen by the later attempts %q, want %q", reasons[1:], want)
	}
	if n := strings.Count(logs.String(), "cannot reach ClickHouse; retrying"); n != 2 {
		t.Errorf("%d warnings, want 2:\n%s", n, logs.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	_, err = Retry(ctx, DependencyBackoff(), log, &st, "Kafka", func() (int, error) {
		cancel()
		return 0, errors.New("no brokers")
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// TestStartError: a context ended by a failure (the HTTP server's) returns that failure; a cancel (a signal)
// returns the retries' own error.
func TestStartError(t *testing.T) {
	own := errors.New("connecting")
	ctx, fail := context.WithCancelCause(context.Background())
	fail(errors.New("http server: address in use"))
	if err := StartError(ctx, own); err == nil || err.Error() != "http server: address in use" {
		t.Errorf("failed context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := StartError(ctx, own); err != own {
		t.Errorf("cancelled context: %v, want %v", err, own)
	}
	if err := StartError(context.Background(), own); err != own {
		t.Errorf("live context: %v, want %v", err, own)
	}
}
