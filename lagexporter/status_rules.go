package lagexporter

import "time"

// Sample is one cycle's view of a group-partition, kept in the partition's sliding window (oldest first).
type Sample struct {
	Committed int64 // meaningful with HasCommit
	HasCommit bool
	Lag       int64     // effective offset lag
	At        time.Time // observation time of the sample (the catch-up estimate reads it; the rules do not)
}

// StatusInput is what the status rules read for one group-partition: the window (oldest first, current last), the
// time of the last commit change, the current time lag, the replay state and whether the group has members.
type StatusInput struct {
	Window       []Sample
	Now          time.Time
	LastCommit   time.Time // when the current committed offset was committed (or first seen); zero if never
	TimeLag      time.Duration
	TimeLagKnown bool
	Replay       bool
	// LiveLag and LiveTimeLag are, while Replay is set, the backlog the group has never received: the records past
	// the replay boundary (End − max(start, boundary)) and the age of the first of them. The thresholds judge these
	// instead of the replay backlog, whose age is the age of data delivered before.
	LiveLag          int64
	LiveTimeLag      time.Duration
	LiveTimeLagKnown bool
	HasMembers       bool
	// AheadReads is the number of consecutive commit-first reads, up to this one, in which the committed offset was
	// past End (0 when it is not now).
	AheadReads int
	// Share marks a share group (KIP-932): the window's Committed is the share-partition start offset (SPSO) and
	// the share rules below replace the stop rule.
	Share bool
}

// EvaluateStatus applies the rules below to one group-partition and returns the most severe status that applies.
//
// The rules follow Burrow's evaluator (its "consumer lag evaluation rules"): lag 0 is OK; offsets that do not move
// with lag are STALL; no commit for longer than a threshold with lag is STOP; lag growing over a full window while the
// consumer commits is WARN, unless some sample in the window had lag 0 (Burrow rule 1). Tidemark adds thresholds on
// time and offset lag (WARN/ERR), AHEAD for a commit past End that persists over status.ahead_reads reads, and REWIND
// while a replay (case C30) is under way and no other rule applies. A replay does not silence the rules: STOP, STALL
// and WARN are judged as always, and the thresholds judge the live backlog past the replay boundary instead of the
// replay backlog (a reset to earliest makes a week-old time lag that is not a delay).
//
// A share group (KIP-932) has no commits: its position is the SPSO, which moves only while members acknowledge (or
// the broker archives) records, and its members are the only consumers it can have. Its rules, by severity as above:
//
//	rule            share-group condition                                                        status
//	lag 0           current lag 0                                                                OK
//	threshold       time or offset lag at a configured threshold                                 WARN / ERR
//	stalled         members, a full window, the SPSO unchanged and lag > 0 in every sample      STALL
//	stopped         no members, lag > 0, and the lag grew over a full window or the SPSO has     STOP
//	                not moved for longer than status.stop_after
//	falling behind  a full window in which the SPSO advanced but the lag never fell and ended    WARN
//	                higher (Burrow rule 1, as for consumer groups)
//	replay          the SPSO moved backwards (offsets reset) and has not passed the old one, and  REWIND
//	                no other rule applies
//
// So a share group with members is never STOP (its consumers are alive: not acknowledging is STALL), and one without
// members is never STALL. Consumer-protocol (KIP-848) and streams groups commit offsets and follow the consumer-group
// rules unchanged.
func EvaluateStatus(in StatusInput, cfg StatusConfig) Status {
	st := StatusOK
	if ruleAhead(in, cfg) {
		st = StatusAhead
	}
	stopped := ruleStopped
	if in.Share {
		stopped = ruleShareStopped
	}
	if cur, ok := currentLag(in.Window); ok && cur > 0 {
		for _, r := range []Status{
			ruleThreshold(in, cur, cfg),
			stopped(in, cfg),
			ruleStalled(in, cfg),
			ruleFallingBehind(in, cfg),
		} {
			st = max(st, r)
		}
	}
	if ruleReplay(in) {
		st = max(st, StatusRewind)
	}
	return st
}

func currentLag(w []Sample) (int64, bool) {
	if len(w) == 0 {
		return 0, false
	}
	return w[len(w)-1].Lag, true
}

// ruleReplay: a committed offset below its pre-rewind boundary is a replay.
func ruleReplay(in StatusInput) bool { return in.Replay }

// ruleAhead: the committed offset past End in cfg.AheadReads consecutive commit-first reads. One read is not enough:
// the end offset of a lagging broker, or a commit racing a truncation, can be behind for one cycle.
func ruleAhead(in StatusInput, cfg StatusConfig) bool {
	return in.AheadReads > 0 && in.AheadReads >= max(cfg.AheadReads, 1)
}

// ruleThreshold: configured time or offset lag thresholds (0 disables each), on the live backlog while replaying.
func ruleThreshold(in StatusInput, lag int64, cfg StatusConfig) Status {
	tl, known := in.TimeLag, in.TimeLagKnown
	if in.Replay {
		lag, tl, known = in.LiveLag, in.LiveTimeLag, in.LiveTimeLagKnown && in.LiveLag > 0
	}
	switch {
	case cfg.ErrOffsetLag > 0 && lag >= cfg.ErrOffsetLag,
		cfg.ErrTimeLag > 0 && known && tl >= cfg.ErrTimeLag:
		return StatusErr
	case cfg.WarnOffsetLag > 0 && lag >= cfg.WarnOffsetLag,
		cfg.WarnTimeLag > 0 && known && tl >= cfg.WarnTimeLag:
		return StatusWarn
	}
	return StatusOK
}

// ruleStopped: with lag, no commit change for longer than StopAfter means the consumer stopped (Burrow: now − last
// commit time exceeds the window; here a configurable duration so that the rule does not depend on the poll rate).
func ruleStopped(in StatusInput, cfg StatusConfig) Status {
	if in.LastCommit.IsZero() {
		// never committed: there is nothing to have stopped; a no-commit backlog is reported by lag and flags
		return StatusOK
	}
	if in.Now.Sub(in.LastCommit) > cfg.StopAfter {
		return StatusStop
	}
	return StatusOK
}

// ruleShareStopped: a share group without members has nobody to deliver its backlog to. It is STOP when the backlog
// grows over a full window (records keep arriving for nobody) or when its SPSO has not moved for longer than
// StopAfter. With members it is never STOP: ruleStalled covers members that do not acknowledge.
func ruleShareStopped(in StatusInput, cfg StatusConfig) Status {
	if in.HasMembers {
		return StatusOK
	}
	if w := in.Window; len(w) >= cfg.Window && w[len(w)-1].Lag > w[0].Lag {
		return StatusStop
	}
	if !in.LastCommit.IsZero() && in.Now.Sub(in.LastCommit) > cfg.StopAfter {
		return StatusStop
	}
	return StatusOK
}

// ruleStalled: a full window in which the committed offset never moved although the partition has lag in every
// sample, while the group still has members (they are alive, but not progressing): Burrow's STALL.
func ruleStalled(in StatusInput, cfg StatusConfig) Status {
	w := in.Window
	if len(w) < cfg.Window || !in.HasMembers {
		return StatusOK
	}
	for _, s := range w {
		if !s.HasCommit || s.Committed != w[0].Committed || s.Lag == 0 {
			return StatusOK
		}
	}
	return StatusStall
}

// ruleFallingBehind: over a full window the committed offset advanced but the lag never decreased and ended higher
// than it started; any zero-lag sample in the window means the consumer catches up from time to time (Burrow rule 1).
func ruleFallingBehind(in StatusInput, cfg StatusConfig) Status {
	w := in.Window
	if len(w) < cfg.Window {
		return StatusOK
	}
	for i, s := range w {
		if s.Lag == 0 || !s.HasCommit {
			return StatusOK
		}
		if i > 0 && s.Lag < w[i-1].Lag {
			return StatusOK
		}
	}
	first, last := w[0], w[len(w)-1]
	if last.Committed > first.Committed && last.Lag > first.Lag {
		return StatusWarn
	}
	return StatusOK
}

// ReplayState is the replay (rewind) state of one group-partition across cycles (case C30).
type ReplayState struct {
	Active   bool
	Boundary int64 // the highest committed offset before the rewind; replay ends when committed >= Boundary
}

// NextReplay advances the replay state with one cycle's committed offset: a decrease of the committed offset starts
// (or extends) a replay whose boundary is the pre-rewind offset; reaching the boundary ends it. prev is the last
// committed offset seen for the same partition incarnation, havePrev false when there is none (first sight, no
// commit before, or a new topic incarnation).
func NextReplay(st ReplayState, prev int64, havePrev bool, committed int64) ReplayState {
	if havePrev && committed < prev {
		b := prev
		if st.Active && st.Boundary > b {
			b = st.Boundary
		}
		return ReplayState{Active: true, Boundary: b}
	}
	if st.Active && committed >= st.Boundary {
		return ReplayState{}
	}
	return st
}
