package election

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/testenv"
)

// leaseEvents records a member's OnChange calls and its log lines.
type leaseEvents struct {
	mu      sync.Mutex
	changes []bool
	logs    strings.Builder
	changed chan bool
}

func newLeaseEvents() *leaseEvents { return &leaseEvents{changed: make(chan bool, 16)} }

func (e *leaseEvents) onChange(held bool) {
	e.mu.Lock()
	e.changes = append(e.changes, held)
	e.mu.Unlock()
	e.changed <- held
}

func (e *leaseEvents) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.logs.Write(p)
}

func (e *leaseEvents) snapshot() ([]bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]bool(nil), e.changes...), e.logs.String()
}

// waitLog waits until the member has logged a line containing s, failing the test after timeout.
func (e *leaseEvents) waitLog(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		_, logs := e.snapshot()
		if strings.Contains(logs, s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within %v:\n%s", s, timeout, logs)
		}
	}
}

// wait returns the next OnChange value, failing the test after timeout.
func (e *leaseEvents) wait(t *testing.T, what string, timeout time.Duration) bool {
	t.Helper()
	select {
	case v := <-e.changed:
		return v
	case <-time.After(timeout):
		t.Fatalf("%s: no OnChange within %v", what, timeout)
		return false
	}
}

// TestLeaseKeptAcrossRebalance: a second member joining makes the group rebalance; the sticky assignor hands the
// lease back to its holder, which must not let go in between (a holder that turned standby for the rebalance would
// take its lag series off /metrics meanwhile). When the holder leaves, the other member takes the lease.
func TestLeaseKeptAcrossRebalance(t *testing.T) {
	brokers := testenv.Kafka(t)
	topic, group := testenv.Name(t, "lease"), testenv.Name(t, "elect")
	start := func(ctx context.Context, ev *leaseEvents) chan error {
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, Config{Kafka: kafkaconfig.Config{Brokers: brokers, ClientID: "tidemark-test"}, Group: group,
				Topic: topic, SessionTimeout: 6 * time.Second, OnChange: ev.onChange, Logger: slog.New(slog.NewTextHandler(ev, nil))})
		}()
		return done
	}
	a, b := newLeaseEvents(), newLeaseEvents()
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	aDone := start(actx, a)
	if !a.wait(t, "first member", 60*time.Second) {
		t.Fatal("first member: OnChange(false) before it held the lease")
	}
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	bDone := start(bctx, b)
	// The holder's next session after the rebalance logs that it kept the lease.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, logs := a.snapshot()
		if strings.Contains(logs, "lease kept across a rebalance") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no rebalance seen by the holder in 60 s:\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if changes, _ := a.snapshot(); len(changes) != 1 || !changes[0] {
		t.Fatalf("holder's OnChange calls across the rebalance: %v, want [true]", changes)
	}
	if changes, _ := b.snapshot(); len(changes) != 0 {
		t.Fatalf("joining member's OnChange calls: %v, want none", changes)
	}

	stopA() // leaves the group: the other member takes the lease
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if changes, _ := a.snapshot(); len(changes) != 2 || changes[1] {
		t.Fatalf("holder's OnChange calls after it stopped: %v, want [true false]", changes)
	}
	if !b.wait(t, "second member after the holder left", 60*time.Second) {
		t.Fatal("second member: OnChange(false) before it held the lease")
	}
	stopB()
	if err := <-bDone; err != nil {
		t.Fatal(err)
	}
}

// TestStandbyWhileKafkaBlockUnresolved: while a file the kafka: block names cannot be read, Run retries resolving it
// and holds nothing; once the file is there it goes on to reach Kafka (here an address nothing listens on, so it
// retries that too), and it returns nil when ctx ends. Needs no server.
func TestStandbyWhileKafkaBlockUnresolved(t *testing.T) {
	pwFile := filepath.Join(t.TempDir(), "password")
	kc := kafkaconfig.Config{Brokers: []string{testenv.FreeAddr(t)},
		SASL: kafkaconfig.SASL{Mechanism: kafkaconfig.MechanismPlain, User: "tidemark", PasswordFile: pwFile}}
	ev := newLeaseEvents()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Kafka: kc, Group: "g", Topic: "lease", SessionTimeout: 6 * time.Second,
			OnChange: ev.onChange, Logger: slog.New(slog.NewTextHandler(ev, nil))})
	}()
	ev.waitLog(t, "lag exporter election cannot resolve the kafka block; retrying", 10*time.Second)
	if err := os.WriteFile(pwFile, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	ev.waitLog(t, "lag exporter election cannot reach Kafka; retrying", 30*time.Second)
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after ctx ended: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of ctx ending")
	}
	if changes, logs := ev.snapshot(); len(changes) != 0 {
		t.Fatalf("OnChange calls: %v, want none:\n%s", changes, logs)
	}
}

// fakeSession is the part of a sarama session the lease handler reads.
type fakeSession struct {
	sarama.ConsumerGroupSession
	claims map[string][]int32
}

func (s fakeSession) Claims() map[string][]int32 { return s.claims }
func (s fakeSession) MemberID() string           { return "m" }
func (s fakeSession) GenerationID() int32        { return 1 }

// TestLeaseReleasedWithoutNextSession: a held lease whose session ended is let go after the grace period unless a
// session that holds it again comes first, and is let go at once when a session gives it to another member.
func TestLeaseReleasedWithoutNextSession(t *testing.T) {
	holds := fakeSession{claims: map[string][]int32{"lease": {0}}}
	none := fakeSession{claims: map[string][]int32{}}
	newHandler := func(grace time.Duration) (*handler, *leaseEvents) {
		ev := newLeaseEvents()
		return &handler{cfg: Config{Topic: "lease", OnChange: ev.onChange, Logger: slog.New(slog.NewTextHandler(ev, nil))},
			grace: grace}, ev
	}

	// No session follows: released after grace.
	h, ev := newHandler(time.Millisecond)
	_ = h.Setup(holds)
	_ = h.Cleanup(holds)
	if !ev.wait(t, "acquire", time.Second) || ev.wait(t, "release after grace", 10*time.Second) {
		t.Fatal("want OnChange(true) then OnChange(false)")
	}

	// The next session holds it again before the grace ends: nothing changes, and the old timer stays disarmed.
	h, ev = newHandler(time.Hour)
	_ = h.Setup(holds)
	_ = h.Cleanup(holds)
	_ = h.Setup(holds)
	if changes, _ := ev.snapshot(); len(changes) != 1 || !changes[0] {
		t.Fatalf("OnChange calls: %v, want [true]", changes)
	}

	// The next session gives it to another member: released at its Setup.
	_ = h.Cleanup(holds)
	_ = h.Setup(none)
	if changes, _ := ev.snapshot(); len(changes) != 2 || changes[1] {
		t.Fatalf("OnChange calls: %v, want [true false]", changes)
	}
	h.release() // nothing held: no further call
	if changes, _ := ev.snapshot(); len(changes) != 2 {
		t.Fatalf("OnChange calls after release: %v, want [true false]", changes)
	}
}
