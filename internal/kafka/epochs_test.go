package kafka

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestEpochHistory: how a partition's epochs are placed from what ListOffsets and OffsetForLeaderEpoch answer, one
// step of a lookup's life per row, and which broker each offset is then attributed to.
func TestEpochHistory(t *testing.T) {
	var h epochHistory
	h.placed = -1
	// First round: epoch 5 led by broker 2, log end 100; OffsetForLeaderEpoch(4) says epoch 4 ended at 40, so epoch 5
	// began at 40. Offsets before 40 belong to epochs whose leaders were never seen.
	h.add(epochSpan{epoch: 5, leader: 2, start: -1})
	if e, ok := h.unknownStart(); !ok || e != 5 {
		t.Fatalf("unknown start %d %v, want epoch 5", e, ok)
	}
	h.setStart(5, 4, 40)
	if !h.complete() {
		t.Fatal("one epoch with a start is complete")
	}
	h.placed = 100
	for _, c := range []struct {
		offset int64
		want   int32
	}{{39, -1}, {40, 2}, {99, 2}} {
		if got := h.leaderOf(c.offset); got != c.want {
			t.Errorf("offset %d: leader %d, want %d", c.offset, got, c.want)
		}
	}
	// A failover and back between two rounds: the next round sees epoch 7 led by broker 2 again, log end 180.
	// OffsetForLeaderEpoch(6) answers (6, 150): epoch 7 began at 150, and an epoch 6 we never saw ended there; it is
	// added with an unknown leader and OffsetForLeaderEpoch(5) answers (5, 120): epoch 6 began at 120.
	h.add(epochSpan{epoch: 7, leader: 2, start: -1})
	if h.complete() {
		t.Fatal("epoch 7 without a start is not complete")
	}
	e, _ := h.unknownStart()
	h.setStart(e, 6, 150)
	e, ok := h.unknownStart()
	if !ok || e != 6 {
		t.Fatalf("after epoch 7: unknown start %d %v, want the missed epoch 6", e, ok)
	}
	h.setStart(6, 5, 120)
	if _, ok := h.unknownStart(); ok || !h.complete() {
		t.Fatalf("spans %+v: want every start known", h.spans)
	}
	h.placed = 180
	for _, c := range []struct {
		offset int64
		want   int32
	}{{119, 2}, {120, -1}, {149, -1}, {150, 2}, {179, 2}} {
		if got := h.leaderOf(c.offset); got != c.want {
			t.Errorf("offset %d: leader %d, want %d (spans %+v)", c.offset, got, c.want, h.spans)
		}
	}
	// The same epoch seen again changes nothing; a first epoch with no predecessor began at 0.
	h.add(epochSpan{epoch: 7, leader: 3, start: -1})
	if h.spans[len(h.spans)-1].leader != 2 {
		t.Errorf("epoch 7 re-seen with another leader changed it: %+v", h.spans)
	}
	var first epochHistory
	first.add(epochSpan{epoch: 0, leader: 1, start: -1})
	first.setStart(0, -1, -1)
	if first.spans[0].start != 0 || first.leaderOf(0) != 1 {
		t.Errorf("first epoch: %+v, want start 0 led by 1", first.spans)
	}
}

// fakeEpochs answers AppendLeaders' RPCs from a table: a partition without an end fails ListOffsets. entered, if
// set, is signalled when listEnds begins and listEnds then waits for release.
type fakeEpochs struct {
	mu      sync.Mutex
	ends    map[topicPartition]logEnd
	entered chan struct{}
	release chan struct{}
}

func (f *fakeEpochs) set(k topicPartition, e *logEnd) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e == nil {
		delete(f.ends, k)
		return
	}
	f.ends[k] = *e
}

func (f *fakeEpochs) listEnds(_ context.Context, keys []topicPartition, fail func(string, error)) map[topicPartition]logEnd {
	if f.entered != nil {
		f.entered <- struct{}{}
		<-f.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[topicPartition]logEnd{}
	for _, k := range keys {
		if e, ok := f.ends[k]; ok {
			out[k] = e
		} else {
			fail("list offsets", errors.New("NOT_LEADER_OR_FOLLOWER"))
		}
	}
	return out
}

// epochEnd: every partition's epoch 0 is its first (no earlier epoch).
func (f *fakeEpochs) epochEnd(context.Context, topicPartition, int32) (int32, int64, error) {
	return -1, -1, nil
}

// TestAppendLeaderNeverStalls: a record of a healthy partition costs one round begun after the call; a partition
// whose leader cannot be read answers -1 at once, for every further record, instead of holding each one up by
// MaxWait (which is an hour here: a call that waited for it would trip the hang guard). The test runs the rounds
// itself (no Run goroutine), so every wait is on an event it makes happen.
func TestAppendLeaderNeverStalls(t *testing.T) {
	healthy, failing := topicPartition{"t", 0}, topicPartition{"t", 1}
	f := &fakeEpochs{ends: map[topicPartition]logEnd{healthy: {leader: 2, epoch: 0, end: 10}}}
	a := newAppendLeaders(f, nil, time.Hour, time.Hour, nil)
	ctx := context.Background()
	call := func(k topicPartition, offset int64) <-chan int32 {
		ch := make(chan int32, 1)
		go func() { ch <- a.AppendLeader(ctx, k.topic, k.partition, offset) }()
		return ch
	}
	got := func(ch <-chan int32) int32 {
		t.Helper()
		select {
		case l := <-ch:
			return l
		case <-time.After(time.Minute): // hang guard: correct code answers as soon as the round it waits for ends
			t.Fatal("AppendLeader still waiting a minute after the round it needed")
			return 0
		}
	}
	kicked := func() {
		t.Helper()
		select {
		case <-a.kick:
		case <-time.After(time.Minute):
			t.Fatal("AppendLeader did not ask for a round")
		}
	}

	// A healthy partition: the call asks for a round, and the round places offsets below the log end (10).
	ch := call(healthy, 5)
	kicked()
	a.refresh(ctx)
	if l := got(ch); l != 2 {
		t.Fatalf("healthy partition: leader %d, want 2", l)
	}
	// A failing one: the round that was asked for cannot read it, so the call answers -1 when it ends; the next
	// records answer -1 at once, with no round run meanwhile.
	ch = call(failing, 5)
	kicked()
	a.refresh(ctx)
	if l := got(ch); l != -1 {
		t.Fatalf("failing partition: leader %d, want -1", l)
	}
	for off := int64(6); off < 9; off++ {
		if l := got(call(failing, off)); l != -1 {
			t.Fatalf("failing partition, offset %d: leader %d, want -1", off, l)
		}
	}
	// It recovers: the next round places it, and its records are attributed again.
	f.set(failing, &logEnd{leader: 3, epoch: 0, end: 20})
	a.refresh(ctx)
	if l := got(call(failing, 7)); l != 3 {
		t.Fatalf("recovered partition: leader %d, want 3", l)
	}

	// A round already under way when a new partition is asked about did not include it: the caller waits for the
	// next round (it asks for one again after the first ends) rather than answering -1.
	late := topicPartition{"t", 2}
	f.set(late, &logEnd{leader: 1, epoch: 0, end: 5})
	f.entered, f.release = make(chan struct{}), make(chan struct{})
	roundDone := make(chan struct{})
	go func() { a.refresh(ctx); close(roundDone) }()
	<-f.entered // the round is reading log ends, of the partitions it knew when it began
	ch = call(late, 0)
	kicked()
	f.release <- struct{}{}
	<-roundDone
	kicked() // woken by the round's end, the offset still unplaced: it asks for another round and waits
	f.entered = nil
	a.refresh(ctx)
	if l := got(ch); l != 1 {
		t.Fatalf("partition asked about during a round: leader %d, want 1", l)
	}
}

// TestAwaitNeverBlocks: Await answers at once, with nil when Placed can answer now (placed, or the partition is
// failing) and otherwise with a channel that closes only when a round begun after the call ends; a round already
// under way when it is called does not close it (it may have read the log end before the record). The test runs
// the rounds itself, so every channel state it checks follows from an event it made happen.
func TestAwaitNeverBlocks(t *testing.T) {
	healthy, failing := topicPartition{"t", 0}, topicPartition{"t", 1}
	f := &fakeEpochs{ends: map[topicPartition]logEnd{healthy: {leader: 2, epoch: 0, end: 10}}}
	a := newAppendLeaders(f, nil, time.Hour, time.Hour, nil)
	ctx := context.Background()
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	ch := a.Await(healthy.topic, healthy.partition, 5)
	if ch == nil || closed(ch) {
		t.Fatal("an offset no round placed: Await must return an open channel")
	}
	if l := a.Placed(healthy.topic, healthy.partition, 5); l != -1 {
		t.Fatalf("Placed before any round: %d, want -1", l)
	}
	a.refresh(ctx)
	if !closed(ch) {
		t.Fatal("the round after Await ended: its channel must be closed")
	}
	if l := a.Placed(healthy.topic, healthy.partition, 5); l != 2 {
		t.Fatalf("Placed after the round: %d, want 2", l)
	}
	if a.Await(healthy.topic, healthy.partition, 9) != nil {
		t.Fatal("a placed offset: Await must return nil")
	}

	// A partition the round cannot read: once it failed, Await answers nil at once and Placed -1.
	ch = a.Await(failing.topic, failing.partition, 3)
	a.refresh(ctx)
	if !closed(ch) {
		t.Fatal("the round after Await ended: its channel must be closed")
	}
	if a.Await(failing.topic, failing.partition, 4) != nil || a.Placed(failing.topic, failing.partition, 4) != -1 {
		t.Fatal("a failing partition: Await must return nil and Placed -1")
	}

	// Called during a round: the channel is the next round's.
	late := topicPartition{"t", 2}
	f.set(late, &logEnd{leader: 1, epoch: 0, end: 5})
	f.entered, f.release = make(chan struct{}), make(chan struct{})
	roundDone := make(chan struct{})
	go func() { a.refresh(ctx); close(roundDone) }()
	<-f.entered
	ch = a.Await(late.topic, late.partition, 0)
	f.release <- struct{}{}
	<-roundDone
	if ch == nil || closed(ch) {
		t.Fatal("Await during a round: its channel must stay open until the next round ends")
	}
	f.entered = nil
	a.refresh(ctx)
	if !closed(ch) || a.Placed(late.topic, late.partition, 0) != 1 {
		t.Fatal("the next round placed the offset: channel closed, Placed 1")
	}
}

// TestFailureWarningsAreThrottled: a lookup failing every round (10 a second by default) warns once per kind per
// failLogEvery, and the next warning says how many failures it stood for; every failure is still counted.
func TestFailureWarningsAreThrottled(t *testing.T) {
	var buf bytes.Buffer
	a := newAppendLeaders(&fakeEpochs{}, nil, time.Hour, time.Hour, slog.New(slog.NewTextHandler(&buf, nil)))
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a.now = func() time.Time { return clock }
	down := errors.New("connection refused")
	for i := 0; i < 600; i++ { // one minute of rounds, minus the last tenth of a second
		a.fail("list offsets", down)
		a.fail("list offsets of t", kerr.TopicAuthorizationFailed)
		clock = clock.Add(100 * time.Millisecond)
	}
	if got := strings.Count(buf.String(), "leader epoch lookup"); got != 2 {
		t.Fatalf("%d warnings in the first minute, want 2 (one per kind):\n%s", got, buf.String())
	}
	buf.Reset()
	a.fail("list offsets", down) // 60.0 s after the first warning
	out := buf.String()
	if !strings.Contains(out, "repeated_since_last_warning=599") || strings.Count(out, "leader epoch lookup") != 1 {
		t.Fatalf("warning after a minute: %q, want one with repeated_since_last_warning=599", out)
	}
	if got := a.Errors.Load(); got != 1201 {
		t.Fatalf("Errors = %d, want 1201: every failure is counted", got)
	}
	a.fail("list offsets", context.Canceled) // a stopping process is not a failure
	if got := a.Errors.Load(); got != 1201 {
		t.Fatalf("Errors = %d after a cancellation, want 1201", got)
	}
}
