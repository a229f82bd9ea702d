package timeline

import (
	"context"
	"maps"
	"path/filepath"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// playCase replays testdata/<name> with Play and returns every poll, failed ones included, with the loop's health.
func playCase(t *testing.T, name string) []Poll {
	t.Helper()
	tl, err := ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var polls []Poll
	if err := Play(context.Background(), tl, caseConfig(t, tl), func(p Poll) error { polls = append(polls, p); return nil }); err != nil {
		t.Fatal(err)
	}
	return polls
}

// TestCommittedAhead: the magnitude of a commit past End is its own number, the lag stays 0, and
// AHEAD turns on at the second consecutive commit-first read that is ahead and clears at the first that is not.
func TestCommittedAhead(t *testing.T) {
	snaps := evalCase(t, "i04_committed_ahead.jsonl")
	for i, want := range []struct {
		lag, ahead int64
		status     Status
	}{{0, 50, StatusOK}, {0, 40, StatusAhead}, {0, 40, StatusAhead}, {10, 0, StatusOK}} {
		g := mustGroup(t, snaps[i], "mm2")
		p := mustPart(t, g, "mm", 0)
		if p.Lag != want.lag || p.AheadOffsets() != want.ahead || g.Status != want.status || p.Flags.Has(FlagAheadOfEnd) != (want.ahead > 0) {
			t.Errorf("12:%02d: lag %d ahead %d status %s flags %s, want %d %d %s", i, p.Lag, p.AheadOffsets(), g.Status, p.Flags,
				want.lag, want.ahead, want.status)
		}
		if p.Flags.Has(FlagReplay) {
			t.Errorf("12:%02d: a commit moving from past the end back to it is not a rewind", i)
		}
	}
}

// TestOpenTransactionsAndCompaction: HW − LSO per partition; raw − effective lag split into
// transaction markers and compaction, and only compaction makes the time lag a lower bound.
func TestOpenTransactionsAndCompaction(t *testing.T) {
	s := evalCase(t, "i05_open_transactions_and_compaction.jsonl")[0]
	// rc (read_committed) cannot read past the LSO: lag 0, 20 offsets waiting for the transaction; ru can: lag 20.
	rc := wantPart(t, mustGroup(t, s, "rc"), "tx", 0, 0, 0, 0)
	ru := wantPart(t, mustGroup(t, s, "ru"), "tx", 0, 20, 20, 0)
	if rc.OpenTransactionOffsets() != 20 || ru.OpenTransactionOffsets() != 20 {
		t.Errorf("open transaction offsets rc %d ru %d, want 20 20", rc.OpenTransactionOffsets(), ru.OpenTransactionOffsets())
	}
	g := mustGroup(t, s, "g")
	// c/0: 100, 101 compacted, 102 a marker, 103 first: raw 10, effective 7; record 103 at 11:59:00 is 60 s old, a
	// lower bound because compacted records came before it
	p0 := wantPart(t, g, "c", 0, 7, 10, FlagControlRecords|FlagCompacted|FlagLowerBound)
	if p0.ControlOffsets() != 1 || p0.CompactedOffsets() != 2 || p0.TimeLag != time.Minute {
		t.Errorf("c/0: control %d compacted %d time lag %v, want 1 2 1m", p0.ControlOffsets(), p0.CompactedOffsets(), p0.TimeLag)
	}
	// c/1: two markers, then record 102 at 11:59:30: exact, not a lower bound
	p1 := wantPart(t, g, "c", 1, 8, 10, FlagControlRecords)
	if p1.ControlOffsets() != 2 || p1.CompactedOffsets() != 0 || p1.TimeLag != 30*time.Second {
		t.Errorf("c/1: control %d compacted %d time lag %v, want 2 0 30s", p1.ControlOffsets(), p1.CompactedOffsets(), p1.TimeLag)
	}
}

// TestInvalidTimestampsCounted: every invalid stamp the exporter meets is counted by reason, once
// per record read (a cached answer is not counted again); valid stamps after them still give the time lag.
func TestInvalidTimestampsCounted(t *testing.T) {
	polls := playCase(t, "i07_invalid_timestamps.jsonl")
	want := map[TimestampProblem]uint64{TimestampMissing: 1, TimestampWrongUnit: 1, TimestampFuture: 1}
	for i, p := range polls {
		if p.Err != nil {
			t.Fatal(p.Err)
		}
		if !maps.Equal(p.Health.InvalidTimestamps, want) {
			t.Errorf("poll %d: invalid timestamps %v, want %v", i+1, p.Health.InvalidTimestamps, want)
		}
	}
	g := mustGroup(t, polls[0].Snapshot, "g")
	// ts/0: record 12 (11:59:58) gives the time lag, 2 s, a lower bound (the first unconsumed record had none)
	if p := wantPart(t, g, "ts", 0, 3, 3, FlagLowerBound); p.TimeLag != 2*time.Second {
		t.Errorf("ts/0 time lag %v, want 2s (never 56 years)", p.TimeLag)
	}
	// ts/1: year 9999: unknown time lag, flagged
	if p := wantPart(t, g, "ts", 1, 1, 1, FlagFutureTimestamp); p.TimeLagKnown {
		t.Errorf("ts/1 time lag %v known, want unknown", p.TimeLag)
	}
}

// TestStalePartitionsAndErrorCounters: a partition whose read failed shows its last values,
// flagged stale with their age, and leaves the sums (counted unknown, not complete); errors are counted per partition
// and code while the partition fails, and the series goes with the first good read.
func TestStalePartitionsAndErrorCounters(t *testing.T) {
	polls := playCase(t, "i08_stale_partitions.jsonl")
	type pe = PartitionErrorKey
	for i, want := range []struct {
		lag            int64
		unknown        int
		stale0, stale1 time.Duration // 0: not stale
		errs           map[pe]uint64
	}{
		{20, 0, 0, 0, map[pe]uint64{}},
		// t/0 unreadable: its last values (100 − 90 = 10) shown, 60 s old, not in the sum: 60 − 40 = 20 from t/1
		{20, 1, time.Minute, 0, map[pe]uint64{{Topic: "t", Partition: 0, Code: "LEADER_NOT_AVAILABLE"}: 1}},
		// both unreadable: nothing left to add
		{0, 2, 2 * time.Minute, time.Minute, map[pe]uint64{{Topic: "t", Partition: 0, Code: "LEADER_NOT_AVAILABLE"}: 2, {Topic: "t", Partition: 1, Code: "NOT_LEADER_OR_FOLLOWER"}: 1}},
		// read again: 130 − 90 + 80 − 40, and the error series are gone
		{80, 0, 0, 0, map[pe]uint64{}},
	} {
		g := mustGroup(t, polls[i].Snapshot, "g")
		if g.Total.Lag != want.lag || g.Total.Unknown != want.unknown || g.Total.Complete != (want.unknown == 0) {
			t.Errorf("12:%02d: lag %d unknown %d complete %v, want %d %d %v", i, g.Total.Lag, g.Total.Unknown, g.Total.Complete,
				want.lag, want.unknown, want.unknown == 0)
		}
		for p, age := range []time.Duration{want.stale0, want.stale1} {
			pl := mustPart(t, g, "t", int32(p))
			if pl.Flags.Has(FlagStale) != (age > 0) || pl.StaleFor() != age || !pl.Known {
				t.Errorf("12:%02d t/%d: flags %s stale for %v known %v, want stale %v for %v", i, p, pl.Flags, pl.StaleFor(), pl.Known, age > 0, age)
			}
		}
		if !maps.Equal(polls[i].Health.PartitionErrors, want.errs) {
			t.Errorf("12:%02d: partition errors %v, want %v", i, polls[i].Health.PartitionErrors, want.errs)
		}
	}
	if p := mustPart(t, mustGroup(t, polls[2].Snapshot, "g"), "t", 0); p.Lag != 10 || p.End != 100 {
		t.Errorf("stale t/0 shows lag %d end %d, want the last values read, 10 and 100", p.Lag, p.End)
	}
	h := polls[3].Health.Errors
	if h[ErrKindUnavailable] != 2 || h[ErrKindListOffsets] != 1 {
		t.Errorf("errors by kind %v, want unavailable 2, list_offsets 1", h)
	}
}

// TestRetentionMargins: time and bytes left before retention may delete the first unconsumed
// record, and the records deleted unread once the log start passes the commit.
func TestRetentionMargins(t *testing.T) {
	snaps := evalCase(t, "i11_retention.jsonl")
	for i, want := range []struct {
		margin  RetentionMargin
		deleted int64
		expired int64
	}{
		// record 1600 is 59 m old: 60 s left; 400 of 1000 records unconsumed, 800,000 of 2,000,000 bytes: 200,000 left
		{RetentionMargin{Time: 60 * time.Second, TimeKnown: true, Bytes: 200_000, BytesKnown: true}, 0, 0},
		// log start 1700 > commit 1600: 100 records lost unread; 1700 is 58 m 20 s old (100 s left), 300 records,
		// 600,000 bytes unconsumed (400,000 left)
		{RetentionMargin{Time: 100 * time.Second, TimeKnown: true, Bytes: 400_000, BytesKnown: true}, 100, 100},
		{RetentionMargin{Time: 140 * time.Second, TimeKnown: true, Bytes: 600_000, BytesKnown: true}, 200, 200},
	} {
		g := mustGroup(t, snaps[i], "g")
		p := mustPart(t, g, "r", 0)
		tr := g.Topic("r")
		if p.Retention != want.margin || tr.MinRetention != want.margin || tr.UnreadRecordsDeleted != want.deleted || p.ExpiredOffsets != want.expired {
			t.Errorf("12:%02d r: margin %+v (topic %+v) deleted %d expired %d, want %+v %d %d", i, p.Retention, tr.MinRetention,
				tr.UnreadRecordsDeleted, p.ExpiredOffsets, want.margin, want.deleted, want.expired)
		}
		for _, topic := range []string{"cmp", "u"} { // compaction never deletes by age; unknown settings give no margin
			if p := mustPart(t, g, topic, 0); p.Retention != (RetentionMargin{}) || p.Lag != 400 {
				t.Errorf("12:%02d %s: margin %+v lag %d, want none and 400", i, topic, p.Retention, p.Lag)
			}
		}
		if g.Total.UnreadRecordsDeleted != want.deleted {
			t.Errorf("12:%02d: group unread deleted %d, want %d", i, g.Total.UnreadRecordsDeleted, want.deleted)
		}
	}
}

// TestCatchUpEstimate: a group that drains 2 records/s net catches up in lag / 2 seconds; one that
// falls behind never does (+Inf).
func TestCatchUpEstimate(t *testing.T) {
	snaps := evalCase(t, "i12_catch_up.jsonl")
	if c := mustGroup(t, snaps[0], "drain").CatchUp; c.State != CatchUpUnknown {
		t.Errorf("first poll: %+v, want unknown (one sample)", c)
	}
	for i := 1; i < len(snaps); i++ {
		d := mustGroup(t, snaps[i], "drain")
		lag := int64(1200 - 120*i)
		eta := time.Duration(lag/2) * time.Second
		if d.Total.Lag != lag || d.CatchUp.State != CatchUpDraining || d.CatchUp.ETA != eta || d.CatchUp.DrainRate != 2 || d.CatchUp.RateError != 0 {
			t.Errorf("12:%02d drain: lag %d catch-up %+v, want %d draining in %v at exactly 2/s", i, d.Total.Lag, d.CatchUp, lag, eta)
		}
		b := mustGroup(t, snaps[i], "behind")
		if b.CatchUp.State != CatchUpNotDraining || b.CatchUp.DrainRate != -0.5 {
			t.Errorf("12:%02d behind: %+v, want not draining at −0.5/s", i, b.CatchUp)
		}
	}
}
