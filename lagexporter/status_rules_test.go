package lagexporter

import (
	"testing"
	"time"
)

// win builds a window from (committed, lag) pairs, all with a commit.
func win(pairs ...int64) []Sample {
	var w []Sample
	for i := 0; i+1 < len(pairs); i += 2 {
		w = append(w, Sample{Committed: pairs[i], HasCommit: true, Lag: pairs[i+1]})
	}
	return w
}

// TestEvaluateStatus is the correctness table of the status rules (window 4, stop after 5m).
func TestEvaluateStatus(t *testing.T) {
	cfg := StatusConfig{Window: 4, StopAfter: 5 * time.Minute, AheadReads: 2}
	errTime := &StatusConfig{Window: 4, StopAfter: 5 * time.Minute, ErrTimeLag: time.Minute, AheadReads: 2}
	now := time.Date(2026, 11, 29, 10, 20, 0, 0, time.UTC)
	recent := now.Add(-30 * time.Second)
	tests := []struct {
		name string
		in   StatusInput
		cfg  *StatusConfig
		want Status
	}{
		{"caught up", StatusInput{Window: win(100, 0), Now: now, LastCommit: recent}, nil, StatusOK},
		// Burrow rule 1: a zero anywhere in the window means the consumer catches up; no WARN for a growing tail.
		{"zero in window suppresses WARN", StatusInput{Window: win(10, 0, 20, 5, 30, 6, 40, 7), Now: now, LastCommit: recent}, nil, StatusOK},
		// commits advance, lag never decreases and ends higher: falling behind.
		{"falling behind", StatusInput{Window: win(10, 5, 20, 6, 30, 6, 40, 9), Now: now, LastCommit: recent}, nil, StatusWarn},
		// lag dipped once: the consumer is not steadily losing ground.
		{"lag dipped", StatusInput{Window: win(10, 5, 20, 4, 30, 6, 40, 9), Now: now, LastCommit: recent}, nil, StatusOK},
		// a window that is not yet full never warns (Burrow waits for a full window).
		{"window not full", StatusInput{Window: win(10, 5, 20, 6, 30, 9), Now: now, LastCommit: recent}, nil, StatusOK},
		// members alive, offset frozen, lag in every sample, last commit recent (commits keep arriving): STALL.
		{"stalled", StatusInput{Window: win(10, 5, 10, 6, 10, 7, 10, 8), Now: now, LastCommit: recent, HasMembers: true}, nil, StatusStall},
		// the same frozen window without members is not STALL (nobody is there to stall); not yet STOP either.
		{"frozen, no members, recent", StatusInput{Window: win(10, 5, 10, 6, 10, 7, 10, 8), Now: now, LastCommit: recent}, nil, StatusOK},
		// C12: last commit 20 minutes ago with lag 70131: STOP.
		{"C12 stopped", StatusInput{Window: win(12490085, 70131), Now: now, LastCommit: now.Add(-20 * time.Minute)}, nil, StatusStop},
		// STOP needs lag: an idle group caught up long ago is OK (C21 A).
		{"idle caught up", StatusInput{Window: win(5000, 0), Now: now, LastCommit: now.Add(-time.Hour)}, nil, StatusOK},
		// never committed (no_commit backlog): nothing has stopped.
		{"no commit", StatusInput{Window: []Sample{{Lag: 3083}}, Now: now}, nil, StatusOK},
		// C30: the replay backlog's 7-day time lag is not a delay: the ERR threshold judges the live backlog past the
		// boundary, which is empty here, so the partition is REWIND.
		{"replay", StatusInput{Window: win(1000000, 604800), Now: now, LastCommit: now, Replay: true, TimeLag: 604800 * time.Second, TimeLagKnown: true},
			errTime, StatusRewind},
		// a replay beside the health status. Records past the boundary have waited 30 s: under the 1 m ERR
		// threshold, still REWIND.
		{"replay, live backlog fresh", StatusInput{Window: win(1000000, 604830), Now: now, LastCommit: now, Replay: true,
			TimeLag: 604800 * time.Second, TimeLagKnown: true, LiveLag: 30, LiveTimeLag: 30 * time.Second, LiveTimeLagKnown: true},
			errTime, StatusRewind},
		// ... and the live backlog's first record has waited 2 m: ERR while replaying (the replay really delays it).
		{"replay, live backlog over ERR", StatusInput{Window: win(1000000, 604920), Now: now, LastCommit: now, Replay: true,
			TimeLag: 604800 * time.Second, TimeLagKnown: true, LiveLag: 120, LiveTimeLag: 2 * time.Minute, LiveTimeLagKnown: true},
			errTime, StatusErr},
		// the group rewound and then stopped committing: 20 minutes without a commit is STOP, replay or not.
		{"replay, then stopped", StatusInput{Window: win(1000000, 604800), Now: now, LastCommit: now.Add(-20 * time.Minute), Replay: true,
			TimeLag: 604800 * time.Second, TimeLagKnown: true}, errTime, StatusStop},
		// rewound, members still there, offset frozen over the whole window: STALL, replay or not.
		{"replay, then stalled", StatusInput{Window: win(1000000, 604800, 1000000, 604830, 1000000, 604860, 1000000, 604890), Now: now,
			LastCommit: recent, Replay: true, HasMembers: true}, nil, StatusStall},
		// one read with the commit past End is not enough (a lagging broker's end offset) ...
		{"ahead once", StatusInput{Window: win(50250, 0), Now: now, LastCommit: recent, AheadReads: 1}, nil, StatusOK},
		// ... two consecutive commit-first reads are AHEAD, with lag 0.
		{"ahead twice", StatusInput{Window: win(50250, 0), Now: now, LastCommit: recent, AheadReads: 2}, nil, StatusAhead},
		// a stricter configuration waits for three.
		{"ahead twice, 3 required", StatusInput{Window: win(50250, 0), Now: now, LastCommit: recent, AheadReads: 2},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, AheadReads: 3}, StatusOK},
		{"time lag over WARN", StatusInput{Window: win(10, 1), Now: now, LastCommit: recent, TimeLag: 2 * time.Minute, TimeLagKnown: true},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, WarnTimeLag: time.Minute, ErrTimeLag: 10 * time.Minute}, StatusWarn},
		{"time lag over ERR", StatusInput{Window: win(10, 1), Now: now, LastCommit: recent, TimeLag: 11 * time.Minute, TimeLagKnown: true},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, WarnTimeLag: time.Minute, ErrTimeLag: 10 * time.Minute}, StatusErr},
		// an unknown time lag never trips a time threshold.
		{"time lag unknown", StatusInput{Window: win(10, 1), Now: now, LastCommit: recent},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, ErrTimeLag: time.Second}, StatusOK},
		{"offset lag over ERR", StatusInput{Window: win(10, 1000), Now: now, LastCommit: recent},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, ErrOffsetLag: 1000}, StatusErr},
		// the most severe applicable rule wins: stopped (STOP) and over WARN threshold → STOP.
		{"most severe wins", StatusInput{Window: win(10, 100), Now: now, LastCommit: now.Add(-time.Hour)},
			&StatusConfig{Window: 4, StopAfter: 5 * time.Minute, WarnOffsetLag: 50}, StatusStop},

		// Share groups (KIP-932): the window holds the share-partition start offset (SPSO), not a commit.
		// members acknowledge nothing: SPSO frozen with lag in every sample of a full window is STALL, as for commits.
		{"share: stuck SPSO with members", StatusInput{Window: win(40, 20, 40, 20, 40, 25, 40, 25), Now: now, LastCommit: recent,
			HasMembers: true, Share: true}, nil, StatusStall},
		// the same group stuck for an hour is still STALL, never STOP: its consumers are alive (a poison record being
		// redelivered until the delivery limit archives it looks like this).
		{"share: stuck for long with members", StatusInput{Window: win(40, 20, 40, 20, 40, 25, 40, 25), Now: now,
			LastCommit: now.Add(-time.Hour), HasMembers: true, Share: true}, nil, StatusStall},
		// no members and records keep arriving: the backlog grows for nobody, STOP without waiting for stop_after.
		{"share: no members, lag growing", StatusInput{Window: win(40, 20, 40, 22, 40, 25, 40, 30), Now: now, LastCommit: recent,
			Share: true}, nil, StatusStop},
		// no members, constant backlog, SPSO still for longer than stop_after: STOP.
		{"share: no members, SPSO still past stop_after", StatusInput{Window: win(40, 20, 40, 20, 40, 20, 40, 20), Now: now,
			LastCommit: now.Add(-6 * time.Minute), Share: true}, nil, StatusStop},
		// no members, constant backlog, SPSO moved recently (the consumer just left): not yet STOP, and never STALL.
		{"share: no members, just left", StatusInput{Window: win(10, 30, 20, 20, 40, 20, 40, 20), Now: now, LastCommit: recent,
			Share: true}, nil, StatusOK},
		// growth over a window that is not full yet does not count: a first sample is not a trend.
		{"share: no members, window not full", StatusInput{Window: win(40, 20, 40, 30), Now: now, LastCommit: recent,
			Share: true}, nil, StatusOK},
		// consumers acknowledging but losing ground: the SPSO advances, lag never falls and ends higher (Burrow rule 1).
		{"share: falling behind", StatusInput{Window: win(10, 5, 20, 6, 30, 6, 40, 9), Now: now, LastCommit: recent,
			HasMembers: true, Share: true}, nil, StatusWarn},
		{"share: caught up", StatusInput{Window: win(40, 20, 40, 0), Now: now, LastCommit: now.Add(-time.Hour), Share: true}, nil, StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				c = *tc.cfg
			}
			if got := EvaluateStatus(tc.in, c); got != tc.want {
				t.Errorf("EvaluateStatus = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestNextReplay is the table of the replay flag (case C30).
func TestNextReplay(t *testing.T) {
	tests := []struct {
		name      string
		st        ReplayState
		prev      int64
		havePrev  bool
		committed int64
		want      ReplayState
	}{
		{"first sight is not a rewind", ReplayState{}, 0, false, 1000000, ReplayState{}},
		{"forward is not a rewind", ReplayState{}, 100, true, 200, ReplayState{}},
		// C30: reset to earliest from 1604800 to 1000000: boundary is the pre-rewind offset.
		{"reset to earliest", ReplayState{}, 1604800, true, 1000000, ReplayState{true, 1604800}},
		{"replaying below boundary", ReplayState{true, 1604800}, 1000000, true, 1500000, ReplayState{true, 1604800}},
		// replay=1 clears once committed >= boundary.
		{"reaches boundary", ReplayState{true, 1604800}, 1500000, true, 1604800, ReplayState{}},
		// C30: a small backward commit from a stale member is also a rewind.
		{"small backward commit", ReplayState{}, 5000, true, 4998, ReplayState{true, 5000}},
		// a second rewind during a replay keeps the higher boundary.
		{"rewind during replay", ReplayState{true, 1604800}, 1200000, true, 1000000, ReplayState{true, 1604800}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextReplay(tc.st, tc.prev, tc.havePrev, tc.committed); got != tc.want {
				t.Errorf("NextReplay = %+v, want %+v", got, tc.want)
			}
		})
	}
}
