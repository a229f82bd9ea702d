package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrivateKafka is a one-broker Kafka of the test's own, started with the project's deploy/local/kafka.sh on free
// ports and a temporary state directory, so a test can stop its broker or change its features without touching the
// shared stack.
type PrivateKafka struct {
	t       testing.TB
	env     []string
	Brokers []string // bootstrap address
}

// StartPrivateKafka starts the broker and stops it when the test ends. It needs what the shared stack needs (Java and
// the Kafka jars that `stack.sh up` caches), so it runs under the same integration environment: without the stack it
// skips, and under CI=true it fails (Kafka).
func StartPrivateKafka(t testing.TB) *PrivateKafka {
	t.Helper()
	Kafka(t)
	dir := t.TempDir() // removed after the Cleanup below has stopped the broker (cleanups run last-in first-out)
	port, controller := FreePort(t), FreePort(t)
	k := &PrivateKafka{t: t, Brokers: []string{"127.0.0.1:" + strconv.Itoa(port)},
		env: append(os.Environ(), "TIDEMARK_STATE_DIR="+dir, "TIDEMARK_KAFKA_PORT="+strconv.Itoa(port),
			"TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(controller))}
	t.Cleanup(func() {
		at := time.Now()
		k.Run("stop")
		t.Logf("private Kafka stopped in %v", time.Since(at).Round(time.Millisecond))
	})
	at := time.Now()
	k.Run("start", "--brokers", "1")
	t.Logf("private Kafka on %s ready in %v", k.Brokers[0], time.Since(at).Round(time.Millisecond))
	return k
}

// Run runs kafka.sh with args against the private cluster (each step waits for readiness with a real client call).
func (k *PrivateKafka) Run(args ...string) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(), "deploy", "local", "kafka.sh"))
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = k.env
	if out, err := cmd.CombinedOutput(); err != nil {
		k.t.Fatalf("kafka.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Bootstrap is the broker list as Kafka's command-line tools take it (--bootstrap-server).
func (k *PrivateKafka) Bootstrap() string { return strings.Join(k.Brokers, ",") }
