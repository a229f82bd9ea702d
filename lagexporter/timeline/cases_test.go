package timeline

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// evalCase replays testdata/<name> through Eval (the live loop's code path) and returns one snapshot per line.
func evalCase(t *testing.T, name string) []*Snapshot {
	t.Helper()
	tl, err := ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := caseConfig(t, tl)
	var out []*Snapshot
	if err := Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error {
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(tl.Lines) {
		t.Fatalf("%d snapshots for %d lines", len(out), len(tl.Lines))
	}
	return out
}

func caseConfig(t *testing.T, tl *Timeline) *Config {
	t.Helper()
	cfg := &Config{Cluster: "test"}
	if tl.Config != nil {
		if err := tl.Config.Apply(cfg); err != nil {
			t.Fatal(err)
		}
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func mustGroup(t *testing.T, s *Snapshot, g string) *GroupLag {
	t.Helper()
	gl := s.Group(g)
	if gl == nil {
		t.Fatalf("snapshot %d has no group %s", s.Seq, g)
	}
	return gl
}

func mustPart(t *testing.T, g *GroupLag, topic string, p int32) *PartitionLag {
	t.Helper()
	pl := g.Partition(topic, p)
	if pl == nil {
		t.Fatalf("group %s has no partition %s/%d", g.Group, topic, p)
	}
	return pl
}

// wantPart checks a partition's effective lag, raw lag and flags.
func wantPart(t *testing.T, g *GroupLag, topic string, p int32, lag, raw int64, flags Flags) *PartitionLag {
	t.Helper()
	pl := mustPart(t, g, topic, p)
	got := pl.Flags
	if !flags.Has(FlagEstimated) && got.Has(FlagEstimated) {
		got &^= FlagEstimated | FlagLowerBound // timelines without records: the interpolated time lag is tested elsewhere
	}
	if pl.Lag != lag || pl.RawLag != raw || got != flags {
		t.Errorf("%s %s/%d: lag %d raw %d flags %q, want lag %d raw %d flags %q", g.Group, topic, p,
			pl.Lag, pl.RawLag, pl.Flags, lag, raw, flags)
	}
	return pl
}

func TestCaseC01TransactionMarkers(t *testing.T) {
	s := evalCase(t, "c01_transactions.jsonl")[0]
	g1 := mustGroup(t, s, "g1")
	// Raw HW − committed = 6 − 5 = 1 (Kafka-defined); the only offset in [5,6) is a COMMIT marker: effective 0, OK.
	p := wantPart(t, g1, "tx-orders", 0, 0, 1, FlagControlRecords)
	if p.TimeLag != 0 || !p.TimeLagKnown || g1.Status != StatusOK || g1.Total.Lag != 0 {
		t.Errorf("g1: time lag %v known %v status %s sum %d, want 0 true OK 0", p.TimeLag, p.TimeLagKnown, g1.Status, g1.Total.Lag)
	}
	// Druid variant, committed 2: raw 3, effective 1 (only offset 4 is consumable); its time lag is record 4's age.
	p = wantPart(t, mustGroup(t, s, "druid-2"), "tx-druid", 0, 1, 3, FlagControlRecords)
	if p.TimeLag != 30*time.Second {
		t.Errorf("druid-2 time lag %v, want 30s (record 4 at 11:59:30)", p.TimeLag)
	}
	// committed 5 = HW: raw 0, effective 0.
	wantPart(t, mustGroup(t, s, "druid-5"), "tx-druid", 0, 0, 0, 0)
}

func TestCaseC03ReadOrder(t *testing.T) {
	s := evalCase(t, "c03_read_order.jsonl")[0]
	// committed read first, then HW: 50300 − 50000 = 300.
	p := wantPart(t, mustGroup(t, s, "g-fixed"), "fixed", 0, 300, 300, 0)
	// record 50000 was written at 11:59:10 + 50000 × 1 ms = 12:00:00.000, observed at 12:00:00.300.
	if !p.TimeLagKnown || p.TimeLag != 300*time.Millisecond {
		t.Errorf("g-fixed time lag %v, want 300ms", p.TimeLag)
	}
	// naive order: commit 50250 past a stale HW 50000: 0, never −250, flagged.
	g := mustGroup(t, s, "g-naive")
	wantPart(t, g, "naive", 0, 0, 0, FlagAheadOfEnd)
	if g.Total.Lag != 0 {
		t.Errorf("g-naive sum %d, want 0", g.Total.Lag)
	}
}

func TestCaseC05LogStartPastCommit(t *testing.T) {
	g := mustGroup(t, evalCase(t, "c05_log_start.jsonl")[0], "g")
	for _, c := range []struct {
		p            int32
		lag, expired int64
		flags        Flags
	}{{0, 0, 7750000, FlagExpired}, {1, 200, 3800, FlagExpired}, {2, 100, 0, 0}} {
		p := wantPart(t, g, "t", c.p, c.lag, c.lag, c.flags)
		if p.ExpiredOffsets != c.expired {
			t.Errorf("p%d expired %d, want %d", c.p, p.ExpiredOffsets, c.expired)
		}
	}
	if g.Total.Lag != 300 || g.Total.Expired != 7753800 {
		t.Errorf("sum %d expired %d, want 300 and 7753800", g.Total.Lag, g.Total.Expired)
	}
}

func TestCaseC06NoCommit(t *testing.T) {
	s := evalCase(t, "c06_no_commit.jsonl")[0]
	g := mustGroup(t, s, "g")
	p0 := wantPart(t, g, "a", 0, 3083, 3083, FlagNoCommit)
	wantPart(t, g, "a", 1, 0, 0, FlagNoCommit)
	wantPart(t, g, "a", 2, 0, 0, 0)
	if p0.HasCommit || p0.Committed != 0 {
		t.Errorf("p0 has_commit %v committed %d, want false 0 (no -1)", p0.HasCommit, p0.Committed)
	}
	// the first unconsumed record is the log start, offset 0, at 11:00:00: an hour old.
	if p0.TimeLag != time.Hour {
		t.Errorf("p0 time lag %v, want 1h", p0.TimeLag)
	}
	if g.Total.Lag != 3083 || g.Total.CommittedSum != 4388 {
		t.Errorf("sum %d committed_sum %d, want 3083 and 4388 (not 4386)", g.Total.Lag, g.Total.CommittedSum)
	}
	// reset=latest: p0 lag 0, still flagged no_commit.
	gl := mustGroup(t, s, "g-latest")
	wantPart(t, gl, "a", 0, 0, 0, FlagNoCommit)
	if gl.Total.Lag != 0 {
		t.Errorf("g-latest sum %d, want 0", gl.Total.Lag)
	}
}

func TestCaseC07Aggregates(t *testing.T) {
	g := mustGroup(t, evalCase(t, "c07_aggregates.jsonl")[0], "g")
	want := []int64{1, 1, 0, 0, 5, 42, 0, 0}
	for i, w := range want {
		if p := mustPart(t, g, "t", int32(i)); p.Lag != w || !p.Known {
			t.Errorf("t/%d lag %d known %v, want %d true", i, p.Lag, p.Known, w)
		}
	}
	tt := g.Topic("t")
	if tt == nil || tt.Lag != 49 || tt.MaxLag != 42 || tt.Unknown != 0 {
		t.Fatalf("topic t aggregate %+v, want sum 49 max 42", tt)
	}
	wantPart(t, g, "u", 0, 358, 358, FlagNoCommit)
	if g.Total.Lag != 407 {
		t.Errorf("group sum %d, want 407", g.Total.Lag)
	}
}

func TestCaseC10AddedPartitions(t *testing.T) {
	snaps := evalCase(t, "c10_added_partitions.jsonl")
	if n := len(mustGroup(t, snaps[0], "g").Partitions); n != 2 {
		t.Fatalf("before growth %d partitions, want 2", n)
	}
	g := mustGroup(t, snaps[1], "g")
	wantPart(t, g, "t", 0, 0, 0, 0)
	wantPart(t, g, "t", 1, 20, 20, 0)
	wantPart(t, g, "t", 2, 120, 120, FlagNoCommit)
	wantPart(t, g, "t", 3, 0, 0, FlagNoCommit)
	if g.Total.Lag != 140 {
		t.Errorf("sum %d, want 140", g.Total.Lag)
	}
}

func TestCaseC11EmptyGroup(t *testing.T) {
	snaps := evalCase(t, "c11_empty_group.jsonl")
	for i, want := range []struct {
		per, sum int64
		status   Status
	}{{0, 0, StatusOK}, {600, 1800, StatusOK}, {6000, 18000, StatusStop}} {
		g := mustGroup(t, snaps[i], "billing")
		for p := int32(0); p < 3; p++ {
			wantPart(t, g, "invoices", p, want.per, want.per, 0)
		}
		if g.Total.Lag != want.sum || g.Status != want.status {
			t.Errorf("line %d: sum %d status %s, want %d %s", i+1, g.Total.Lag, g.Status, want.sum, want.status)
		}
		if i > 0 && (g.State != "Empty" || len(g.Members) != 0) {
			t.Errorf("line %d: state %q members %d, want Empty 0", i+1, g.State, len(g.Members))
		}
	}
}

func TestCaseC12StoppedConsumer(t *testing.T) {
	snaps := evalCase(t, "c12_stopped_consumer.jsonl")
	g := mustGroup(t, snaps[2], "burrow-58")
	// computed from the current HW and the latest commit, not from a value cached at commit time.
	wantPart(t, g, "events", 0, 70131, 70131, 0)
	if g.Status != StatusStop {
		t.Errorf("status %s, want STOP", g.Status)
	}
	if s0 := mustGroup(t, snaps[0], "burrow-58"); s0.Status != StatusOK || s0.Total.Lag != 0 {
		t.Errorf("10:00 status %s lag %d, want OK 0", s0.Status, s0.Total.Lag)
	}
}

func TestCaseC14SimpleConsumer(t *testing.T) {
	for i, s := range evalCase(t, "c14_simple_consumer.jsonl") {
		g := mustGroup(t, s, "flink-job")
		if len(g.Partitions) != 7 {
			t.Fatalf("line %d: %d partitions, want 7", i+1, len(g.Partitions))
		}
		for p := int32(0); p < 6; p++ {
			wantPart(t, g, "canal", p, 10, 10, 0)
		}
		wantPart(t, g, "canal", 6, 120, 120, 0)
		if g.Total.Lag != 180 || !g.SimpleConsumer || g.Status != StatusOK || len(g.Members) != 0 {
			t.Errorf("line %d: sum %d simple %v status %s members %d, want 180 true OK 0", i+1, g.Total.Lag,
				g.SimpleConsumer, g.Status, len(g.Members))
		}
	}
}

func TestCaseC15DeletedGroup(t *testing.T) {
	snaps := evalCase(t, "c15_deleted_group.jsonl")
	wantPart(t, mustGroup(t, snaps[0], "tmp-1"), "tmp", 0, 500, 500, 0)
	if snaps[1].Group("tmp-1") != nil {
		t.Fatal("deleted group tmp-1 still in the snapshot at T+30s")
	}
	wantPart(t, mustGroup(t, snaps[1], "keep"), "tmp", 0, 100, 100, 0)
}

func TestCaseC18ClientHWM(t *testing.T) {
	g := mustGroup(t, evalCase(t, "c18_client_hwm.jsonl")[0], "svc")
	wantPart(t, g, "s", 0, 7, 7, 0) // from ListOffsets, at startup
	wantPart(t, g, "s", 1, 0, 0, 0) // empty partition known to be caught up
}

func TestCaseC19OffByOne(t *testing.T) {
	g := mustGroup(t, evalCase(t, "c19_off_by_one.jsonl")[0], "g")
	wantPart(t, g, "t", 7, 0, 0, 0)
}

func TestCaseC21IdleAndLowVolume(t *testing.T) {
	snaps := evalCase(t, "c21a_idle_topic.jsonl")
	if len(snaps) != 120 {
		t.Fatalf("%d polls, want 120 (12:00:30 .. 13:00:00)", len(snaps))
	}
	for _, s := range snaps {
		p := mustPart(t, mustGroup(t, s, "g"), "idle", 0)
		if p.Lag != 0 || p.TimeLag != 0 || !p.TimeLagKnown || mustGroup(t, s, "g").Status != StatusOK {
			t.Fatalf("%s: lag %d time lag %v known %v, want 0 0 true OK", s.Time, p.Lag, p.TimeLag, p.TimeLagKnown)
		}
	}
	b := evalCase(t, "c21b_low_volume.jsonl")
	want := []time.Duration{0, 100 * time.Millisecond, 0}
	for i, s := range b {
		p := mustPart(t, mustGroup(t, s, "g"), "slow", 0)
		if p.TimeLag != want[i] || !p.TimeLagKnown {
			t.Errorf("%s: time lag %v, want %v", s.Time, p.TimeLag, want[i])
		}
	}
}

func TestCaseC23OldCommit(t *testing.T) {
	snaps := evalCase(t, "c23_old_commit.jsonl")
	for i, want := range []struct {
		lag int64
		tl  time.Duration
	}{{72000, 7200 * time.Second}, {90000, 9000 * time.Second}} {
		p := wantPart(t, mustGroup(t, snaps[i], "stopped"), "steady", 0, want.lag, want.lag, 0)
		if p.TimeLag != want.tl {
			t.Errorf("%s: time lag %v, want %v", snaps[i].Time, p.TimeLag, want.tl)
		}
	}
}

func TestCaseC30Replay(t *testing.T) {
	snaps := evalCase(t, "c30_replay.jsonl")
	g := mustGroup(t, snaps[2], "g")
	p := wantPart(t, g, "orders", 0, 604800, 604800, FlagReplay)
	if p.TimeLag != 604800*time.Second || p.ReplayBoundary() != 1604800 || g.Status != StatusRewind {
		t.Errorf("after reset: time lag %v boundary %d status %s, want 604800s 1604800 REWIND", p.TimeLag, p.ReplayBoundary(), g.Status)
	}
	if p := mustPart(t, mustGroup(t, snaps[3], "g"), "orders", 0); !p.Flags.Has(FlagReplay) {
		t.Errorf("mid-replay: replay flag cleared at committed %d", p.Committed)
	}
	g = mustGroup(t, snaps[4], "g")
	p = wantPart(t, g, "orders", 0, 301, 301, 0)
	if g.Status == StatusRewind || p.TimeLag != 301400*time.Millisecond {
		t.Errorf("past boundary: status %s time lag %v, want not REWIND and 301.4s", g.Status, p.TimeLag)
	}
}

func TestCaseC27MissingTimestamp(t *testing.T) {
	g := mustGroup(t, evalCase(t, "c27_missing_timestamp.jsonl")[0], "g")
	// record 10 has timestamp -1: the time lag comes from record 11 (2.0 s) and is a lower bound; offset lag 2.
	p := wantPart(t, g, "legacy", 0, 2, 2, FlagLowerBound)
	if p.TimeLag != 2*time.Second || !p.TimeLagKnown {
		t.Fatalf("time lag %v, want 2s", p.TimeLag)
	}
}

// TestCaseC14SimpleConsumerWindow: flink-job has no members; with its last commit 12 s old it is a simple consumer
// (simple_consumer=1, C14). When the checkpoints stop, the flag holds while the commit is younger than the 60 s
// window and drops to 0 from 60 s on (the window is exclusive); the group and its lag series stay, since the commits
// still exist (C11), and its status is still judged by the rules (STOP only after status.stop_after, 5 m).
func TestCaseC14SimpleConsumerWindow(t *testing.T) {
	tl, err := ReadFile(filepath.Join("testdata", "c14_simple_consumer.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	last := tl.Lines[len(tl.Lines)-1] // 12:00:30, commits at 12:00:18: age 12 s
	commit := last.Groups[0].Offsets[0].CommitTime
	if age := last.Time.Sub(commit); age != 12*time.Second {
		t.Fatalf("fixture commit age %v, want 12s", age)
	}
	ages := []time.Duration{12 * time.Second, 59 * time.Second, 60 * time.Second, 61 * time.Second, 4 * time.Minute, 6 * time.Minute}
	tl.Lines = tl.Lines[:len(tl.Lines)-1]
	tl.lineNo = tl.lineNo[:len(tl.lineNo)-1]
	for i, age := range ages {
		o := last // same offsets and commits: the job stopped checkpointing at 12:00:18, producers too
		o.Time = commit.Add(age)
		tl.Lines = append(tl.Lines, o)
		tl.lineNo = append(tl.lineNo, 100+i)
	}
	want := []struct {
		simple bool
		status Status
	}{
		{true, StatusOK},    // 12 s: the case's scrape
		{true, StatusOK},    // 59 s: still inside the window
		{false, StatusOK},   // 60 s: the window is [0, 60 s)
		{false, StatusOK},   // 61 s: no longer a simple consumer, lag unchanged, not yet stopped
		{false, StatusOK},   // 4 m: still below stop_after
		{false, StatusStop}, // 6 m: lag with a commit older than stop_after (5 m)
	}
	cfg := caseConfig(t, tl)
	var snaps []*Snapshot
	if err := Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error { snaps = append(snaps, s); return nil }); err != nil {
		t.Fatal(err)
	}
	snaps = snaps[len(snaps)-len(ages):]
	for i, w := range want {
		g := mustGroup(t, snaps[i], "flink-job")
		if g.SimpleConsumer != w.simple || g.Status != w.status || g.Total.Lag != 180 || len(g.Partitions) != 7 {
			t.Errorf("commit age %v: simple %v status %s lag %d partitions %d, want %v %s 180 7", ages[i], g.SimpleConsumer,
				g.Status, g.Total.Lag, len(g.Partitions), w.simple, w.status)
		}
	}
}

// TestGroupTypesTimeline: Kafka 4's group types through the live loop's code (g01_group_types.jsonl, window 3).
// workers is a share group: its position is the share-partition start offset (SPSO) 100 and its lag the broker's
// KIP-1226 share lag (10 records after the SPSO already acknowledged: raw 40, lag 30); jobs/1 has no share state yet
// and counts from the log start because the group's share.auto.offset.reset is earliest. Its SPSO stays at 100 while
// a member is there: STALL once the window is full; the member leaves and the backlog keeps growing: STOP.
// legacy-share comes from a broker without KIP-1226 lag: End − SPSO, flagged lag_upper_bound. orders-848 (KIP-848)
// and app (streams) are measured like consumer groups; app's topics carry their subtopology and internal marking.
func TestGroupTypesTimeline(t *testing.T) {
	snaps := evalCase(t, "g01_group_types.jsonl")
	w := mustGroup(t, snaps[0], "workers")
	if w.GroupType != GroupShare || w.Epoch != 4 || w.SimpleConsumer {
		t.Fatalf("workers = type %q epoch %d simple %v, want share 4 false", w.GroupType, w.Epoch, w.SimpleConsumer)
	}
	if p := mustPart(t, w, "jobs", 0); p.Committed != 100 || p.Lag != 30 || p.RawLag != 40 || p.Flags != FlagEstimated|FlagLowerBound {
		t.Fatalf("workers jobs/0 = %+v, want SPSO 100, lag 30 (broker), raw 40", *p)
	}
	if p := mustPart(t, w, "jobs", 1); p.HasCommit || p.Lag != 20 || !p.Flags.Has(FlagNoCommit) {
		t.Fatalf("workers jobs/1 = %+v, want no start offset, lag 20 from the log start", *p)
	}
	for i, want := range []Status{StatusOK, StatusOK, StatusStall, StatusStop} {
		g := mustGroup(t, snaps[i], "workers")
		if g.Status != want {
			t.Errorf("poll %d: workers %s (members %d, lag %d), want %s", i+1, g.Status, len(g.Members), g.Total.Lag, want)
		}
	}
	if g := mustGroup(t, snaps[3], "workers"); g.Total.Lag != 60+20 || len(g.Members) != 0 {
		t.Fatalf("poll 4: workers lag %d with %d members, want 80 and none", g.Total.Lag, len(g.Members))
	}
	l := mustGroup(t, snaps[0], "legacy-share")
	if p := mustPart(t, l, "jobs", 0); p.Lag != 20 || !p.Flags.Has(FlagLagUpperBound) {
		t.Fatalf("legacy-share jobs/0 = %+v, want lag 20 = End − SPSO, lag_upper_bound", *p)
	}
	if o := mustGroup(t, snaps[0], "orders-848"); o.GroupType != GroupConsumer || o.Total.Lag != 2 || len(o.Members) != 1 || o.Status != StatusOK {
		t.Fatalf("orders-848 = %+v, want a consumer-type group with lag 2", o)
	}
	a := mustGroup(t, snaps[0], "app")
	rp := mustPart(t, a, "app-count-repartition", 0)
	if a.GroupType != GroupStreams || rp.Lag != 2 || rp.Subtopology() != "1" || !rp.Internal() {
		t.Fatalf("app repartition = %+v (type %q), want lag 2 in subtopology 1, internal", *rp, a.GroupType)
	}
	if tl := a.Topic("clicks"); tl == nil || tl.Subtopology != "0" || tl.Internal || tl.Lag != 0 {
		t.Fatalf("app clicks = %+v, want subtopology 0, a user topic, caught up", tl)
	}
}
