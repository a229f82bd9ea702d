package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB that records failures instead of failing the test; Fatal* ends the calling goroutine as
// testing.T's does.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}
func (r *recorder) Fatalf(format string, args ...any) { r.Errorf(format, args...); runtime.Goexit() }
func (r *recorder) failures() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.msgs, "; ")
}

// inGoroutine runs f in its own goroutine (so that a Fatalf ends it, not the test) and waits for it.
func inGoroutine(f func()) {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	<-done
}

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	ln, err := net.Listen("tcp", FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = ln.Close()
}

// TestEventually: a condition that holds on its third call passes; one that never holds fails with its last error.
func TestEventually(t *testing.T) {
	calls := 0
	Eventually(t, time.Minute, func() error {
		if calls++; calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("%d calls, want 3", calls)
	}
	r := &recorder{TB: t}
	inGoroutine(func() { Eventually(r, 50*time.Millisecond, func() error { return errors.New("still 2, want 3") }) })
	if got := r.failures(); !strings.Contains(got, "not within 50ms: still 2, want 3") {
		t.Errorf("failure %q", got)
	}
}

// TestRunWithHangGuard: stop cancels the context and returns fn's error, once; a fn that ignores the cancel fails the
// test after the guard.
func TestRunWithHangGuard(t *testing.T) {
	stop := RunWithHangGuard(t, "worker", time.Minute, func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("stopped")
	})
	if err := stop(); err == nil || err.Error() != "stopped" {
		t.Errorf("stop: %v", err)
	}
	if err := stop(); err == nil || err.Error() != "stopped" {
		t.Errorf("second stop: %v", err)
	}
	r := &recorder{TB: t}
	release := make(chan struct{})
	defer close(release)
	hung := RunWithHangGuard(r, "hung worker", 50*time.Millisecond, func(context.Context) error { <-release; return nil })
	_ = hung()
	if got := r.failures(); got != "hung worker did not return within 50ms of the stop" {
		t.Errorf("failure %q", got)
	}
}

// TestCommitOffsets on the real cluster: offsets set forward, then backward, read back as set.
func TestCommitOffsets(t *testing.T) {
	brokers := Kafka(t)
	topic, group := CreateTopic(t, "commit", Topic{Partitions: 2}), Name(t, "commit")
	for _, want := range []map[int32]int64{{0: 5, 1: 7}, {0: 2, 1: 0}} {
		CommitOffsets(t, brokers, group, map[string]map[int32]int64{topic: want})
		resp, err := Admin(t).ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		for p, off := range want {
			if got := resp.GetBlock(topic, p); got == nil || got.Offset != off {
				t.Errorf("partition %d: committed %+v, want %d", p, got, off)
			}
		}
	}
}
