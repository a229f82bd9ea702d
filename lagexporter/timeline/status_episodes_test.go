package timeline

import (
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestRewindThenDied: a group reset to earliest that then loses its members and stops committing
// is REWIND only while nothing else is wrong. From 12:09 (its last commit change was at 12:03; status.stop_after is
// 5 m, exclusive) it is STOP, and still replaying: the replay is an episode beside the health status.
func TestRewindThenDied(t *testing.T) {
	snaps := evalCase(t, "i01_rewind_then_died.jsonl")
	if len(snaps) != 25 {
		t.Fatalf("%d polls, want 25", len(snaps))
	}
	for i, s := range snaps {
		g := mustGroup(t, s, "g")
		p := mustPart(t, g, "orders", 0)
		status, replaying := StatusStop, true
		switch {
		case i == 0:
			status, replaying = StatusOK, false
		case i < 9:
			status = StatusRewind
		}
		if g.Status != status || g.Replaying != replaying || p.Flags.Has(FlagReplay) != replaying {
			t.Errorf("12:%02d: status %s replaying %v flags %s, want %s %v", i, g.Status, g.Replaying, p.Flags, status, replaying)
		}
		if i >= 1 && p.ReplayBoundary() != 604800 {
			t.Errorf("12:%02d: replay boundary %d, want 604800 (the commit before the reset)", i, p.ReplayBoundary())
		}
	}
	// right after the reset: the whole log is backlog, record 0 (2026-11-22T12:00:00) a week and a minute old
	p := mustPart(t, mustGroup(t, snaps[1], "g"), "orders", 0)
	if p.Lag != 604860 || p.TimeLag != 604860*time.Second {
		t.Errorf("12:01: lag %d time lag %v, want 604860 and 604860s", p.Lag, p.TimeLag)
	}
	// at 12:24 the dead group sits at 120000 while 1 record/s keeps arriving: lag 606240 − 120000 = 486240, growing,
	// so the catch-up estimate is +Inf (not draining)
	g := mustGroup(t, snaps[24], "g")
	if g.Total.Lag != 486240 || g.CatchUp.State != CatchUpNotDraining || g.State != "Empty" || len(g.Members) != 0 {
		t.Errorf("12:24: lag %d catch-up %s state %s members %d, want 486240 not_draining Empty 0", g.Total.Lag,
			g.CatchUp.State, g.State, len(g.Members))
	}
}

// TestEndOffsetDecreased: a high watermark that falls in the same topic incarnation is flagged and
// counted, and a group whose commit falls with it is not rewinding; a group that seeks back below what it had read
// of the surviving log is.
func TestEndOffsetDecreased(t *testing.T) {
	snaps := evalCase(t, "i02_end_offset_decreased.jsonl")
	tests := []struct {
		line, group string
		at          int
		lag, ahead  int64
		flags       Flags
		status      Status
		boundary    int64
	}{
		{"12:00 caught up", "g", 0, 0, 0, 0, StatusOK, 0},
		// truncated to 900 under a commit of 1000: lag 0, 100 ahead, flagged; one ahead read is not AHEAD yet
		{"12:01 truncated", "g", 1, 0, 100, FlagAheadOfEnd | FlagEndOffsetDecreased, StatusOK, 0},
		{"12:01 truncated", "h", 1, 0, 100, FlagAheadOfEnd | FlagEndOffsetDecreased, StatusOK, 0},
		// g commits the new end (1000 → 900): no replay, 10 new records of lag
		{"12:02 reset to the new end", "g", 2, 10, 0, 0, StatusOK, 0},
		// h seeks back to 500: a rewind, boundary 900 (not 1000: offsets 900..999 were rewritten after the truncation)
		{"12:02 seek back", "h", 2, 410, 0, FlagReplay, StatusRewind, 900},
		{"12:03", "g", 3, 0, 0, 0, StatusOK, 0},
		// k's commit fell with the end in the cycle that read the truncation: not a rewind
		{"12:01 commit falls with the end", "k", 1, 0, 0, FlagEndOffsetDecreased, StatusOK, 0},
		{"12:02", "k", 2, 0, 0, 0, StatusOK, 0},
		{"12:03 replaying", "h", 3, 220, 0, FlagReplay, StatusRewind, 900},
	}
	for _, tc := range tests {
		p := mustPart(t, mustGroup(t, snaps[tc.at], tc.group), "t", 0)
		got := p.Flags &^ (FlagEstimated | FlagLowerBound)
		if p.Lag != tc.lag || p.AheadOffsets() != tc.ahead || got != tc.flags || p.Status != tc.status || p.ReplayBoundary() != tc.boundary {
			t.Errorf("%s %s: lag %d ahead %d flags %s status %s boundary %d, want %d %d %s %s %d", tc.line, tc.group, p.Lag,
				p.AheadOffsets(), p.Flags, p.Status, p.ReplayBoundary(), tc.lag, tc.ahead, tc.flags, tc.status, tc.boundary)
		}
	}
	for i, want := range []uint64{0, 1, 1, 1} {
		if got := snaps[i].EndOffsetDecreases["t"]; got != want {
			t.Errorf("poll %d: end offset decreases of t = %d, want %d", i+1, got, want)
		}
	}
}

// TestUnassignedCommits (Burrow #854): commits a Stable group's members no longer consume do not
// drive its lag sums or its status to STOP; they are counted apart. The same commits in an Empty group are lag, and
// STOP (today's behaviour, case C11); a partition someone still commits on is consumed, assigned or not.
func TestUnassignedCommits(t *testing.T) {
	snaps := evalCase(t, "i03_unassigned_commits.jsonl")
	for i, s := range snaps {
		legacyLag := int64(500 + 100*i) // HW 1000 + 100·i, commits at 500
		g := mustGroup(t, s, "g")
		// t/0 and t/1 are caught up; t/2 is new, not yet assigned and without a commit: 50, counted (case C10)
		if g.Total.Lag != 50 || g.Status != StatusOK || g.Total.UnassignedCommitted != 3 {
			t.Errorf("12:%02d g: lag %d status %s unassigned %d, want 50 OK 3", i, g.Total.Lag, g.Status, g.Total.UnassignedCommitted)
		}
		wantPart(t, g, "t", 2, 50, 50, FlagNoCommit)
		l := g.Topic("legacy")
		if l == nil || l.Lag != 0 || l.Partitions != 3 || l.UnassignedCommitted != 3 || !l.Complete {
			t.Fatalf("12:%02d g legacy: %+v, want lag 0 of 3 partitions, 3 unassigned", i, l)
		}
		for p := int32(0); p < 3; p++ {
			// the lag is still shown on the partition, flagged, for the user to clean up
			if pl := wantPart(t, g, "legacy", p, legacyLag, legacyLag, FlagUnassigned); pl.Status != StatusStop {
				t.Errorf("12:%02d g legacy/%d: status %s, want STOP (the partition's own; not the group's)", i, p, pl.Status)
			}
		}
		e := mustGroup(t, s, "e")
		if e.Total.Lag != 3*legacyLag || e.Status != StatusStop || e.Total.UnassignedCommitted != 0 {
			t.Errorf("12:%02d e (Empty): lag %d status %s unassigned %d, want %d STOP 0", i, e.Total.Lag, e.Status,
				e.Total.UnassignedCommitted, 3*legacyLag)
		}
		r := mustGroup(t, s, "r")
		// legacy/0 was committed 10 s ago: consumed (counted); legacy/1 and /2 have no commit on a topic r does not
		// subscribe to: not counted, and not "committed" either
		wantPart(t, r, "legacy", 0, legacyLag, legacyLag, 0)
		wantPart(t, r, "legacy", 1, 1000+100*int64(i), 1000+100*int64(i), FlagNoCommit|FlagUnassigned)
		if r.Total.Lag != 50+legacyLag || r.Total.UnassignedCommitted != 0 || r.Status != StatusOK {
			t.Errorf("12:%02d r: lag %d unassigned %d status %s, want %d 0 OK", i, r.Total.Lag, r.Total.UnassignedCommitted, r.Status, 50+legacyLag)
		}
	}
}
