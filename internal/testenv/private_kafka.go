package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// PrivateKafka is a Kafka (one broker, or a few) of the test's own, started with the project's deploy/local/kafka.sh
// on free ports and a temporary state directory, so a test can stop its brokers or change their features without
// touching the shared stack.
type PrivateKafka struct {
	t       testing.TB
	env     []string
	Brokers []string // bootstrap addresses of the brokers started
	ports   []string // of brokers 1, 2, … (those not started yet included)
}

// StartPrivateKafka starts the broker and stops it when the test ends. It needs what the shared stack needs (Java and
// the Kafka jars that `stack.sh up` caches), so it runs under the same integration environment: without the stack it
// skips, and under CI=true it fails (Kafka).
func StartPrivateKafka(t testing.TB) *PrivateKafka {
	t.Helper()
	return StartPrivateCluster(t, 1, 1)
}

// StartPrivateCluster starts n brokers of a private cluster with room (free ports) for up to maxBrokers brokers, so
// that AddNode can make more join. extraEnv are further kafka.sh settings (TIDEMARK_KAFKA_FAKETIME, …).
func StartPrivateCluster(t testing.TB, n, maxBrokers int, extraEnv ...string) *PrivateKafka {
	t.Helper()
	Kafka(t)
	return onFreePorts(t, fmt.Sprintf("kafka.sh start --brokers %d", n),
		func() (*PrivateKafka, string, error) { return startPrivateCluster(t, n, maxBrokers, extraEnv) })
}

// startPrivateCluster is one attempt of StartPrivateCluster on freshly picked ports: the start's output and error.
func startPrivateCluster(t testing.TB, n, maxBrokers int, extraEnv []string) (*PrivateKafka, string, error) {
	t.Helper()
	dir := t.TempDir() // removed after the Cleanup below has stopped the broker (cleanups run last-in first-out)
	var ports []string
	for range maxBrokers {
		ports = append(ports, strconv.Itoa(FreePort(t)))
	}
	controller := FreePort(t)
	k := &PrivateKafka{t: t, ports: ports,
		env: append(append(os.Environ(), "TIDEMARK_STATE_DIR="+dir, "TIDEMARK_KAFKA_PORT="+ports[0],
			"TIDEMARK_KAFKA_NODE_PORTS="+strings.Join(ports, ","), "TIDEMARK_KAFKA_CONTROLLER_PORT="+strconv.Itoa(controller),
			"TIDEMARK_KAFKA_READY_TIMEOUT=540"), extraEnv...)}
	for i := range n {
		k.Brokers = append(k.Brokers, "127.0.0.1:"+ports[i])
	}
	at := time.Now()
	if out, err := k.run("start", "--brokers", strconv.Itoa(n)); err != nil {
		_, _ = k.run("stop")
		return nil, out, err
	}
	t.Cleanup(func() {
		at := time.Now()
		k.Run("stop")
		t.Logf("private Kafka stopped in %v", time.Since(at).Round(time.Millisecond))
	})
	t.Logf("private Kafka on %v ready in %v", k.Brokers, time.Since(at).Round(time.Millisecond))
	return k, "", nil
}

// AddNode makes broker id (the next one) join the private cluster.
func (k *PrivateKafka) AddNode(id int) {
	k.t.Helper()
	k.Run("add-node", strconv.Itoa(id))
	k.Brokers = append(k.Brokers, "127.0.0.1:"+k.ports[id-1])
}

// Run runs kafka.sh with args against the private cluster (each step waits for readiness with a real client call).
func (k *PrivateKafka) Run(args ...string) {
	k.t.Helper()
	if out, err := k.run(args...); err != nil {
		k.t.Fatalf("kafka.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// run runs kafka.sh with args and returns its combined output.
func (k *PrivateKafka) run(args ...string) (string, error) {
	out, err := localScript(600*time.Second, "kafka.sh", k.env, args...)
	return string(out), err
}

// Bootstrap is the broker list as Kafka's command-line tools take it (--bootstrap-server).
func (k *PrivateKafka) Bootstrap() string { return strings.Join(k.Brokers, ",") }
