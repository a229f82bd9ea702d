package testenv

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (the kernel's ephemeral range, outside every
// worktree's fixed block), for a private server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr returns FreePort as a listen address, 127.0.0.1:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", FreePort(t))
}

// Eventually calls cond until it returns nil, every 100 ms (or a tenth of timeout when that is shorter), and fails
// the test with cond's last error when timeout passes first. cond's error says what the state is and what was
// wanted. timeout is a hang guard for a state the test waits for, never the thing tested.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	poll := min(100*time.Millisecond, timeout/10)
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %v", timeout, err)
		}
		time.Sleep(poll)
	}
}

// RunWithHangGuard runs fn in its own goroutine with a context that stop cancels (as SIGTERM does for the daemon);
// stop then waits for fn to return and returns its error. A fn that does not return within guard of the cancel fails
// the test (what names it): a hang guard, for code whose shutdown is bounded by its own timeouts. stop is idempotent
// and also runs at the test's end, where its error is ignored (call stop to check it).
func RunWithHangGuard(t testing.TB, what string, guard time.Duration, fn func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var stopped bool
	var result error
	stop = func() error {
		if stopped {
			return result
		}
		stopped = true
		cancel()
		select {
		case result = <-done:
			return result
		case <-time.After(guard):
			t.Errorf("%s did not return within %v of the stop", what, guard)
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// CommitOffsets sets the committed offsets of group (topic → partition → next offset to consume) through sarama's
// offset manager, as a consumer of the group that read nothing would: forward or backward, to exactly the value
// given. The test fails on error.
func CommitOffsets(t testing.TB, brokers []string, group string, offsets map[string]map[int32]int64) {
	t.Helper()
	client, err := sarama.NewClient(brokers, SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		t.Fatal(err)
	}
	var poms []sarama.PartitionOffsetManager
	for topic, parts := range offsets {
		for p, off := range parts {
			pom, err := om.ManagePartition(topic, p)
			if err != nil {
				t.Fatal(err)
			}
			pom.MarkOffset(off, "")  // forward only
			pom.ResetOffset(off, "") // backward only
			poms = append(poms, pom)
		}
	}
	om.Commit()
	for _, pom := range poms {
		_ = pom.Close()
	}
	if err := om.Close(); err != nil {
		t.Fatal(err)
	}
}

// Tool returns the path of the command-line tool name (e.g. promtool, Debian package prometheus, installed by
// `bash deploy/local/stack.sh install`). It skips the test when the tool is missing, and fails it under CI=true,
// where a missing tool is a broken set-up. Kafka's own tools run from KafkaLib's jars (KafkaTool).
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if InCI() {
			t.Fatalf("%s not found (CI=true): %v; `bash deploy/local/stack.sh install` installs it", name, err)
		}
		t.Skipf("%s not found: %v; `bash deploy/local/stack.sh install` installs it", name, err)
	}
	return p
}
