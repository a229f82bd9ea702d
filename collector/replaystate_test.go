package collector

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// stateTopic is a fake compacted topic: what publish sent, in order, failing while fail is set.
type stateTopic struct {
	recs []kafka.Record
	fail bool
}

func (s *stateTopic) send(_ context.Context, ms []kafka.Message) error {
	if s.fail {
		return errors.New("broker down")
	}
	for _, m := range ms {
		s.recs = append(s.recs, kafka.Record{Topic: m.Topic, Offset: int64(len(s.recs)), Key: m.Key, Value: m.Value})
	}
	return nil
}

// TestReplayClassesSurviveRestart: the receipts path of a first process handles a group's first
// pass over source offsets 0..9 and the start of its replay (reset to earliest), then dies; a second process
// restores the trackers and handles what the group re-delivers from the receipts commit on.
//
// Receipts topic rc, partition 0, one receipt per record: the first pass at records 100..109, the replay of source
// offsets 0..9 at 110..119. Batch 1 (100..109) is stored, and its offset (110) is released for commit only once its
// checkpoint is published; the group's commit of 10 and its rewind to 0 are observed next. Batch 2 (110..112) is
// stored, but the checkpoint publish fails (the broker refuses it), so 113 waits, and is released by the retry.
// Batch 3 (113..114) is stored but dies with the process before its checkpoint goes out. The second process
// resumes at 113 from the checkpoint taken at 113: 113 and 114 are classified again by a tracker in exactly the
// state the first one had, so they make the same rows (replays, the same keys), and so does the rest of the replay.
func TestReplayClassesSurviveRestart(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rec := func(pos int64, source int64, processed time.Time) kafka.Record {
		return receiptRecord(t, pos, instrument.Receipt{Group: "app", Topic: "orders", Partition: 0, Offset: source,
			ProcessedNs: processed.UnixNano(), Host: "c1"})
	}
	batch := func(from, to int64, firstSource int64, processed time.Time) kafka.Batch {
		b := kafka.Batch{Topic: "rc", Partition: 0, Generation: 1}
		for pos := from; pos < to; pos++ {
			b.Records = append(b.Records, rec(pos, firstSource+pos-from, processed))
		}
		return b
	}
	topic := &stateTopic{}
	process := func() (*Receipts, *fakeSink, *replayCheckpoints) {
		deps, sink, _ := newTestDeps(t, now)
		ck := newReplayCheckpoints("state", slog.New(slog.NewTextHandler(io.Discard, nil)))
		ck.setSender(topic.send)
		deps.checkpoints = ck
		return &Receipts{pathDeps: deps}, sink, ck
	}
	ctx := context.Background()
	var committed int64 = 100 // the receipts group's committed offset
	commit := func(n int64) { committed = n }

	// The first process.
	p1, sink1, ck1 := process()
	path := p1.engine.Path("app", "orders", 0)
	if err := p1.HandleBatch(ctx, batch(100, 110, 0, now), commit); err != nil {
		t.Fatal(err)
	}
	path.ObserveCommit(10, now.Add(time.Second))  // the group committed its first pass
	path.ObserveCommit(0, now.Add(2*time.Second)) // and was reset to earliest: a rewind
	sink1.acks[0](nil)
	if committed != 100 {
		t.Fatalf("receipts offset %d released before its checkpoint was published", committed)
	}
	if err := ck1.publish(ctx); err != nil {
		t.Fatal(err)
	}
	if committed != 110 {
		t.Fatalf("after the publish the receipts offset is %d, want 110", committed)
	}
	// The replay's first 5 receipts, in two batches: the first (110..112) stored and published, but the broker
	// refuses the checkpoint publish, so 113 is not released; the second (113..114) stored, never marked.
	replayAt := now.Add(3 * time.Second)
	if err := p1.HandleBatch(ctx, batch(110, 113, 0, replayAt), commit); err != nil {
		t.Fatal(err)
	}
	if err := p1.HandleBatch(ctx, batch(113, 115, 3, replayAt), commit); err != nil {
		t.Fatal(err)
	}
	sink1.acks[1](nil)
	topic.fail = true
	if err := ck1.publish(ctx); err == nil || committed != 110 {
		t.Fatalf("a failed publish: err %v, committed %d; want an error and 110 kept", err, committed)
	}
	topic.fail = false
	if err := ck1.publish(ctx); err != nil || committed != 113 {
		t.Fatalf("publish retried: err %v, committed %d; want 113", err, committed)
	}
	sink1.acks[2](nil) // stored, but the process dies before its checkpoint is published
	first := map[store.ReplayClass]int{}
	for _, rs := range sink1.rows {
		for _, r := range rs.Latency {
			first[r.Class]++
		}
	}
	if first[store.ClassLive] != 10 || first[store.ClassReplay] != 5 {
		t.Fatalf("first process classes %v, want 10 live, 5 replays", first)
	}

	// The second process: restores, then the group re-delivers from 113, and the replay goes on to 119.
	p2, sink2, ck2 := process()
	if n := ck2.restore(topic.recs, p2.engine, "rc", map[int32]int64{0: 120}); n != 1 {
		t.Fatalf("restored %d paths, want 1", n)
	}
	if err := p2.HandleBatch(ctx, batch(committed, 120, committed-110, replayAt), commit); err != nil {
		t.Fatal(err)
	}
	var got []store.ReplayClass
	for _, r := range sink2.rows[0].Latency {
		got = append(got, r.Class)
	}
	// Receipts 113..119 (source offsets 3..9): 113 and 114 were stored by the first process but not counted by the
	// checkpoint at 113, so they go through the restored tracker again and make the same rows (same key: replay);
	// every one is a replay, none live.
	want := slices.Repeat([]store.ReplayClass{store.ClassReplay}, 7)
	if !slices.Equal(got, want) {
		t.Fatalf("after the restart: classes %v, want %v", got, want)
	}
	// Without the checkpoint the same re-delivery makes live rows, overwriting the first pass's (same key).
	p3, sink3, _ := process()
	p3.checkpoints = nil
	if err := p3.HandleBatch(ctx, batch(113, 120, 3, replayAt), func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if c := sink3.rows[0].Latency[0].Class; c != store.ClassLive {
		t.Fatalf("without checkpoints the first re-read receipt is %v; the test would prove nothing", c)
	}
}

// TestReplayCheckpointSkipsStoredReceipts: a checkpoint published for a position beyond the receipts commit (the
// process died after the publish, before the group committed) counts receipts whose rows are stored: after a
// restart they are skipped, not classified a second time; a position on another receipts topic, or beyond its
// partition's end (the topic was re-created), skips nothing.
func TestReplayCheckpointSkipsStoredReceipts(t *testing.T) {
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cp := eng.Path("app", "orders", 0).Checkpoint()
	k := pathKey{"app", "orders", 0}
	mk := func(k pathKey, pos position) kafka.Record {
		return kafka.Record{Key: encodePathKey("", k), Value: encodeCheckpoint(checkpoint{state: cp, pos: pos})}
	}
	recs := []kafka.Record{
		mk(k, position{"rc", 0, 50}),
		mk(pathKey{"app", "orders", 1}, position{"old-rc", 0, 50}),
		mk(pathKey{"app", "orders", 2}, position{"rc", 1, 500}),
		{Key: []byte("garbage"), Value: []byte{9}},
	}
	ck := newReplayCheckpoints("state", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if n := ck.restore(recs, eng, "rc", map[int32]int64{0: 60, 1: 100}); n != 3 {
		t.Fatalf("restored %d, want 3 (the garbage record skipped)", n)
	}
	for _, c := range []struct {
		k      pathKey
		src    source
		offset int64
		want   bool
	}{
		{k, source{"rc", 0}, 49, true},                            // counted by the checkpoint
		{k, source{"rc", 1}, 10, false},                           // another receipts partition
		{pathKey{"app", "orders", 1}, source{"rc", 0}, 10, false}, // its position was on another topic
		{pathKey{"app", "orders", 2}, source{"rc", 1}, 10, false}, // beyond the partition's end
		{k, source{"rc", 0}, 50, false},                           // past the position
		{k, source{"rc", 0}, 49, false},                           // and the entry is gone after that
	} {
		if got := ck.done(c.k, c.src, c.offset); got != c.want {
			t.Errorf("done(%v, %v, %d) = %v, want %v", c.k, c.src, c.offset, got, c.want)
		}
	}
	if ck.hasRestored.Load() {
		t.Error("every restored position passed, but the fast path is still off")
	}
}

// TestReplayCommitsSurviveRestart: a group's commits are durable even when no receipt of the path follows them. The
// first process stores and publishes the group's first pass (source offsets 0..9, receipts 100..109); the group
// commits 10 and is reset to earliest; the process dies before any replayed receipt is handled. The second process
// restores and handles the replay (receipts 110..119): every record is a replay, boundary 10. Without the commits in
// the checkpoint the restored tracker knows the records were processed but not that they were committed, and takes
// the whole replay for a redelivery.
func TestReplayCommitsSurviveRestart(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	batch := func(from, to int64, firstSource int64, processed time.Time) kafka.Batch {
		b := kafka.Batch{Topic: "rc", Partition: 0, Generation: 1}
		for pos := from; pos < to; pos++ {
			b.Records = append(b.Records, receiptRecord(t, pos, instrument.Receipt{Group: "app", Topic: "orders",
				Partition: 0, Offset: firstSource + pos - from, ProcessedNs: processed.UnixNano(), Host: "c1"}))
		}
		return b
	}
	k := pathKey{"app", "orders", 0}
	for _, durable := range []bool{true, false} {
		topic := &stateTopic{}
		process := func() (*Receipts, *fakeSink, *replayCheckpoints) {
			deps, sink, _ := newTestDeps(t, now)
			ck := newReplayCheckpoints("state", slog.New(slog.NewTextHandler(io.Discard, nil)))
			ck.setSender(topic.send)
			deps.checkpoints = ck
			return &Receipts{pathDeps: deps}, sink, ck
		}
		ctx := context.Background()
		p1, sink1, ck1 := process()
		if err := p1.HandleBatch(ctx, batch(100, 110, 0, now), func(int64) {}); err != nil {
			t.Fatal(err)
		}
		sink1.acks[0](nil)
		if err := ck1.publish(ctx); err != nil {
			t.Fatal(err)
		}
		path := p1.engine.Path(k.group, k.topic, k.partition)
		for i, c := range []int64{10, 10, 0} { // the first pass committed (seen twice), then a reset to earliest
			at := now.Add(time.Duration(i+1) * time.Second)
			path.ObserveCommit(c, at)
			if durable {
				ck1.committed([]commitObservation{{k, c, at}, {pathKey{"other", "orders", 0}, 5, at}})
			}
		}
		before := ck1.Published.Load()
		if err := ck1.publish(ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := ck1.Published.Load()-before, map[bool]uint64{true: 1, false: 0}[durable]; got != want {
			t.Fatalf("durable=%v: %d checkpoints published for the commits, want %d (only the followed path)", durable, got, want)
		}

		p2, sink2, ck2 := process()
		if n := ck2.restore(topic.recs, p2.engine, "rc", map[int32]int64{0: 120}); n != 1 {
			t.Fatalf("restored %d paths, want 1", n)
		}
		p2.engine.Path(k.group, k.topic, k.partition).ObserveCommit(0, now.Add(5*time.Second)) // the restarted exporter's first read
		if err := p2.HandleBatch(ctx, batch(110, 120, 0, now.Add(6*time.Second)), func(int64) {}); err != nil {
			t.Fatal(err)
		}
		want := store.ClassReplay
		if !durable {
			want = store.ClassRedelivery
		}
		for _, r := range sink2.rows[0].Latency {
			if r.Class != want {
				t.Fatalf("durable=%v: source offset %d after the restart is %v, want %v", durable, r.Offset, r.Class, want)
			}
		}
		if st := p2.engine.Path(k.group, k.topic, k.partition).Replay(); durable && (!st.Replaying || st.BoundaryOffset != 10) {
			t.Fatalf("restored replay state %+v, want replaying to boundary 10", st)
		}
	}
}

// TestReplayStateMovesWithThePartition: replica A holds receipts partitions rc/0 and rc/1 and handles
// a group's first pass on both (paths app/orders/0 and /1, source offsets 0..9); the group commits 10 and is reset
// to earliest. Then a rebalance hands rc/0 to replica B. A drops the path of rc/0 (engine state and checkpoints:
// it must neither publish nor follow commits on it), B restores it from the state topic, and B's rows for the
// replay on rc/0 equal, field for field, what one replica holding both partitions throughout makes of the same
// receipts: every one a replay, with the same rewind. A deployment of another owner loads none of these checkpoints.
func TestReplayStateMovesWithThePartition(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	batch := func(part int32, from, to int64, firstSource int64, processed time.Time) kafka.Batch {
		b := kafka.Batch{Topic: "rc", Partition: part, Generation: 1}
		for pos := from; pos < to; pos++ {
			b.Records = append(b.Records, receiptRecord(t, pos, instrument.Receipt{Group: "app", Topic: "orders",
				Partition: part, Offset: firstSource + pos - from, ProcessedNs: processed.Add(time.Duration(pos) * time.Millisecond).UnixNano(), Host: "c1"}))
		}
		return b
	}
	topic := &stateTopic{}
	read := func(context.Context) ([]kafka.Record, map[int32]int64, error) {
		return slices.Clone(topic.recs), map[int32]int64{0: 120, 1: 120}, nil
	}
	ctx := context.Background()
	process := func(owner string) (*Receipts, *fakeSink, *replayCheckpoints) {
		deps, sink, _ := newTestDeps(t, now)
		ck := newReplayCheckpoints("state", slog.New(slog.NewTextHandler(io.Discard, nil)))
		ck.setOwner("tidemark-receipts", owner)
		ck.setSender(topic.send)
		deps.checkpoints = ck
		return &Receipts{pathDeps: deps}, sink, ck
	}
	store1 := func(p *Receipts, sink *fakeSink, ck *replayCheckpoints, b kafka.Batch) {
		t.Helper()
		if err := p.HandleBatch(ctx, b, func(int64) {}); err != nil {
			t.Fatal(err)
		}
		sink.acks[len(sink.acks)-1](nil)
		if err := ck.publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rewind := func(p *Receipts, ck *replayCheckpoints, parts ...int32) {
		for _, part := range parts {
			k := pathKey{"app", "orders", part}
			for i, c := range []int64{10, 0} {
				at := now.Add(time.Duration(i+1) * time.Second)
				p.engine.Path(k.group, k.topic, k.partition).ObserveCommit(c, at)
				ck.committed([]commitObservation{{k, c, at}})
			}
		}
		if err := ck.publish(ctx); err != nil {
			t.Fatal(err)
		}
	}
	replayAt := now.Add(5 * time.Second)

	// One replica alone: the figures the moved path must keep.
	one, oneSink, oneCk := process("cluster-x")
	topic = &stateTopic{}
	if _, _, err := oneCk.reassigned(ctx, "rc", []int32{0, 1}, one.engine, read); err != nil {
		t.Fatal(err)
	}
	store1(one, oneSink, oneCk, batch(0, 100, 110, 0, now))
	store1(one, oneSink, oneCk, batch(1, 100, 110, 0, now))
	rewind(one, oneCk, 0, 1)
	store1(one, oneSink, oneCk, batch(0, 110, 120, 0, replayAt))
	want := oneSink.rows[len(oneSink.rows)-1].Latency

	// Two replicas: A holds both partitions, B none; then rc/0 moves to B.
	a, aSink, aCk := process("cluster-x")
	b, bSink, bCk := process("cluster-x")
	if _, _, err := aCk.reassigned(ctx, "rc", []int32{0, 1}, a.engine, read); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bCk.reassigned(ctx, "rc", nil, b.engine, read); err != nil {
		t.Fatal(err)
	}
	store1(a, aSink, aCk, batch(0, 100, 110, 0, now))
	store1(a, aSink, aCk, batch(1, 100, 110, 0, now))
	rewind(a, aCk, 0, 1)
	b.engine.Path("app", "orders", 0).ObserveCommit(0, now.Add(2*time.Second)) // B's own lag exporter sees the commits too
	if _, lost, err := aCk.reassigned(ctx, "rc", []int32{1}, a.engine, read); err != nil || lost != 1 {
		t.Fatalf("A on losing rc/0: dropped %d paths (err %v), want 1", lost, err)
	}
	if a.engine.Has("app", "orders", 0) || !a.engine.Has("app", "orders", 1) {
		t.Fatal("A kept the path of the partition it lost, or dropped the one it kept")
	}
	published := aCk.Published.Load()
	aCk.committed([]commitObservation{{pathKey{"app", "orders", 0}, 3, now.Add(3 * time.Second)}})
	if err := aCk.publish(ctx); err != nil || aCk.Published.Load() != published {
		t.Fatalf("A published a checkpoint of a path it no longer holds (err %v)", err)
	}
	if gained, _, err := bCk.reassigned(ctx, "rc", []int32{0}, b.engine, read); err != nil || gained != 1 {
		t.Fatalf("B on gaining rc/0: restored %d paths (err %v), want 1", gained, err)
	}
	store1(b, bSink, bCk, batch(0, 110, 120, 0, replayAt))
	got := bSink.rows[len(bSink.rows)-1].Latency
	if len(got) != 10 || !reflect.DeepEqual(got, want) {
		t.Fatalf("B's rows for the moved path differ from one replica's:\n got %+v\nwant %+v", got, want)
	}
	for _, r := range got {
		if r.Class != store.ClassReplay {
			t.Fatalf("source offset %d after the move is %v, want replay", r.Offset, r.Class)
		}
	}
	// Without the move of state B would have taken the replay for first processing.
	c, cSink, cCk := process("cluster-x")
	cCk.held, cCk.heldKnown = map[source]bool{{"rc", 0}: true}, true
	store1(c, cSink, cCk, batch(0, 110, 120, 0, replayAt))
	if cl := cSink.rows[0].Latency[0].Class; cl != store.ClassLive {
		t.Fatalf("without the restore the first re-read receipt is %v; the test would prove nothing", cl)
	}

	// Another deployment (another cluster id) sharing the state topic loads nothing of this one's.
	o, _, oCk := process("cluster-y")
	if n := oCk.restore(topic.recs, o.engine, "rc", map[int32]int64{0: 120, 1: 120}); n != 0 {
		t.Fatalf("a deployment of another cluster restored %d paths, want 0", n)
	}
}

// TestReplayCheckpointsTrimEvicted: a path the engine evicted has its published checkpoint forgotten, so a commit
// observed later is not applied to (and published from) a state no tracker has any more.
func TestReplayCheckpointsTrimEvicted(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	topic := &stateTopic{}
	deps, sink, _ := newTestDeps(t, now)
	ck := newReplayCheckpoints("state", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ck.setSender(topic.send)
	deps.checkpoints = ck
	p := &Receipts{pathDeps: deps}
	ctx := context.Background()
	b := kafka.Batch{Topic: "rc", Partition: 0, Generation: 1, Records: []kafka.Record{receiptRecord(t, 0,
		instrument.Receipt{Group: "app", Topic: "orders", Offset: 0, ProcessedNs: now.UnixNano(), Host: "c1"})}}
	if err := p.HandleBatch(ctx, b, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	sink.acks[0](nil)
	if err := ck.publish(ctx); err != nil {
		t.Fatal(err)
	}
	if n := ck.trim(p.engine.Has); n != 0 {
		t.Fatalf("trimmed %d checkpoints of a live path", n)
	}
	p.engine.RemovePath("app", "orders", 0)
	if n := ck.trim(p.engine.Has); n != 1 || len(ck.published) != 0 {
		t.Fatalf("trimmed %d, %d left; want 1 and none", n, len(ck.published))
	}
	before := ck.Published.Load()
	ck.committed([]commitObservation{{pathKey{"app", "orders", 0}, 1, now}})
	if err := ck.publish(ctx); err != nil || ck.Published.Load() != before {
		t.Fatalf("a commit on an evicted path published a checkpoint (err %v)", err)
	}
}
