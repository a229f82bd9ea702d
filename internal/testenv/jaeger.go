package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// JaegerAddrs are the endpoints of a running Jaeger: OTLP in, query API out.
type JaegerAddrs struct {
	OTLPGRPC string // host:port
	OTLPHTTP string // host:port
	Query    string // http://host:port (the UI and /api/...)
}

// Jaeger returns the endpoints of the stack's Jaeger (TIDEMARK_JAEGER_OTLP_GRPC, TIDEMARK_JAEGER_OTLP_HTTP,
// TIDEMARK_JAEGER_QUERY, exported by `stack.sh up --jaeger` and `make test`). It skips the test, or fails it under
// CI=true, when they are not set.
func Jaeger(t testing.TB) JaegerAddrs {
	t.Helper()
	const start = "`eval \"$(bash deploy/local/stack.sh up --jaeger)\"` in this shell"
	return JaegerAddrs{OTLPGRPC: requireStartedBy(t, "TIDEMARK_JAEGER_OTLP_GRPC", "Jaeger", start),
		OTLPHTTP: requireStartedBy(t, "TIDEMARK_JAEGER_OTLP_HTTP", "Jaeger", start),
		Query:    requireStartedBy(t, "TIDEMARK_JAEGER_QUERY", "Jaeger", start)}
}

// PrivateJaeger starts a Jaeger of the test's own (deploy/local/jaeger.sh with a state dir in t.TempDir and free
// ports), for tests that stop it mid-run; Stop stops it and is also called at cleanup. It needs the stack's Jaeger
// to have been built (the same cache), so it requires TIDEMARK_JAEGER_QUERY like Jaeger does.
func PrivateJaeger(t testing.TB) *Private {
	t.Helper()
	Jaeger(t)
	p := &Private{t: t, state: t.TempDir()}
	ports := make([]int, 4)
	for i := range ports {
		ports[i] = FreePort(t)
	}
	p.env = append(os.Environ(), "TIDEMARK_STATE_DIR="+p.state,
		"TIDEMARK_JAEGER_OTLP_GRPC_PORT="+strconv.Itoa(ports[0]), "TIDEMARK_JAEGER_OTLP_HTTP_PORT="+strconv.Itoa(ports[1]),
		"TIDEMARK_JAEGER_QUERY_PORT="+strconv.Itoa(ports[2]), "TIDEMARK_JAEGER_QUERY_GRPC_PORT="+strconv.Itoa(ports[3]))
	p.JaegerAddrs = JaegerAddrs{OTLPGRPC: "127.0.0.1:" + strconv.Itoa(ports[0]), OTLPHTTP: "127.0.0.1:" + strconv.Itoa(ports[1]),
		Query: "http://127.0.0.1:" + strconv.Itoa(ports[2])}
	if out, err := p.script("start"); err != nil {
		t.Fatalf("start a private Jaeger: %v\n%s", err, out)
	}
	t.Cleanup(p.Stop)
	return p
}

// Private is a Jaeger started by PrivateJaeger.
type Private struct {
	JaegerAddrs
	t       testing.TB
	state   string
	env     []string
	stopped bool
}

// Stop stops the private Jaeger (TERM, bounded wait, KILL: jaeger.sh stop).
func (p *Private) Stop() {
	if p.stopped {
		return
	}
	p.stopped = true
	if out, err := p.script("stop"); err != nil {
		p.t.Errorf("stop the private Jaeger: %v\n%s", err, out)
	}
}

func (p *Private) script(cmd string) ([]byte, error) {
	return localScript(0, "jaeger.sh", p.env, cmd)
}

// repoRoot is the repository's root directory (this file is internal/testenv/jaeger.go).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// localScript runs deploy/local/<script> with args under bash in environment env and returns its combined output;
// a timeout above 0 kills it after that long.
func localScript(timeout time.Duration, script string, env []string, args ...string) ([]byte, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	c := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(repoRoot(), "deploy", "local", script)}, args...)...)
	c.Env = env
	return c.CombinedOutput()
}

// JaegerTrace is a trace as Jaeger's query API returns it (GET /api/traces/<id>).
type JaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []JaegerSpan             `json:"spans"`
	Processes map[string]JaegerProcess `json:"processes"`
}

// JaegerSpan is one span of a JaegerTrace. StartTime and Duration are microseconds.
type JaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"`
	Duration  int64 `json:"duration"`
	Tags      []struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

// JaegerProcess is a span's service.
type JaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

// Tag returns the value of a span tag (nil if absent).
func (s *JaegerSpan) Tag(key string) any {
	for _, t := range s.Tags {
		if t.Key == key {
			return t.Value
		}
	}
	return nil
}

// ChildOf returns the span id s is a CHILD_OF, "" if none.
func (s *JaegerSpan) ChildOf() string { return s.ref("CHILD_OF") }

// FollowsFrom returns the span id s FOLLOWS_FROM (an OpenTelemetry link), "" if none. Jaeger's OTLP translation keeps
// one reference per span: a span parented to and linked with the same span shows only FOLLOWS_FROM.
func (s *JaegerSpan) FollowsFrom() string { return s.ref("FOLLOWS_FROM") }

func (s *JaegerSpan) ref(kind string) string {
	for _, r := range s.References {
		if r.RefType == kind {
			return r.SpanID
		}
	}
	return ""
}

// Start is the span's start time.
func (s *JaegerSpan) Start() time.Time { return time.UnixMicro(s.StartTime) }

// End is the span's end time.
func (s *JaegerSpan) End() time.Time { return time.UnixMicro(s.StartTime + s.Duration) }

// FetchTrace reads one trace from Jaeger's query API. found is false while Jaeger does not have it (404).
func FetchTrace(ctx context.Context, query, traceID string) (tr JaegerTrace, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(query, "/")+"/api/traces/"+traceID, nil)
	if err != nil {
		return tr, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tr, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return tr, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		return tr, false, fmt.Errorf("GET /api/traces/%s: %s", traceID, resp.Status)
	}
	var body struct {
		Data []JaegerTrace `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return tr, false, fmt.Errorf("decode trace %s: %w", traceID, err)
	}
	if len(body.Data) == 0 {
		return tr, false, nil
	}
	return body.Data[0], true, nil
}
