package testenv

import (
	"os"
	"strconv"
	"testing"
)

// PrivateAlertmanager starts an Alertmanager of the test's own (Debian's prometheus-alertmanager through
// deploy/local/alertmanager.sh, installed there when missing; state in t.TempDir, a free port) that sends every
// alert, firing and resolved, to webhook at once. It is stopped at cleanup. It returns its host:port.
func PrivateAlertmanager(t testing.TB, webhook string) string {
	t.Helper()
	port := strconv.Itoa(FreePort(t))
	env := append(os.Environ(), "TIDEMARK_STATE_DIR="+t.TempDir(), "TIDEMARK_ALERTMANAGER_PORT="+port)
	startScript(t, "alertmanager.sh", env, "start", "--webhook", webhook)
	return "127.0.0.1:" + port
}

// PrivatePrometheus starts a Prometheus of the test's own (Debian's, through deploy/local/prometheus.sh; state in
// t.TempDir, a free port) that loads the shipped rules (deploy/prometheus/*.rules.yml), scrapes target and evaluates
// the rules every interval (a Prometheus duration, e.g. "1s"), and sends alerts to alertmanager (host:port; "" for
// none). It is stopped at cleanup. It returns its host:port.
func PrivatePrometheus(t testing.TB, target, interval, alertmanager string) string {
	t.Helper()
	port := strconv.Itoa(FreePort(t))
	env := append(os.Environ(), "TIDEMARK_STATE_DIR="+t.TempDir(), "TIDEMARK_PROMETHEUS_PORT="+port)
	args := []string{"start", "--scrape", target, "--interval", interval}
	if alertmanager != "" {
		args = append(args, "--alertmanager", alertmanager)
	}
	startScript(t, "prometheus.sh", env, args...)
	return "127.0.0.1:" + port
}

// startScript runs deploy/local/<script> with args and registers `<script> stop` (same env) at cleanup; a failure to start
// fails the test with the script's output (e.g. the port was taken between FreePort and the server's bind).
func startScript(t testing.TB, script string, env []string, args ...string) {
	t.Helper()
	run := func(args ...string) ([]byte, error) { return localScript(0, script, env, args...) }
	t.Cleanup(func() {
		if out, err := run("stop"); err != nil {
			t.Errorf("%s stop: %v\n%s", script, err, out)
		}
	})
	if out, err := run(args...); err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
}
