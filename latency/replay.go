package latency

import "math"

// Class is what a processed record means for latency: only ClassLive feeds live end-to-end percentiles.
type Class uint8

// Record classes.
const (
	ClassLive       Class = iota // first processing of an offset at or beyond everything processed before
	ClassReplay                  // reprocessing below an offset the group had committed: a rewind / reset (C30)
	ClassRedelivery              // reprocessing of an uncommitted tail: at-least-once redelivery after a rebalance
	ClassBackfill                // a new group's first pass over records appended before the group existed
	NumClasses
)

var classNames = [...]string{"live", "replay", "redelivery", "backfill"}

// String returns the class name (a metric label value).
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "invalid"
}

// ReplayTracker classifies the records of one (group, topic, partition) as they are processed, from what the group
// processed before and what it committed. Offsets are Kafka's: a commit is the next offset to read, so a group that
// processed record 99 commits 100 (C19).
//
// Rules (each a row of the table test):
//   - a record at or beyond ProcessedNext (max processed offset + 1) is new: live, or backfill when the group was
//     first seen without any commit (a new group) and the record was appended before that moment;
//   - a record below ProcessedNext was processed before. Below the highest offset the group ever committed it can
//     only come back through a rewind (seek, reset): replay. At or above it, it belongs to the uncommitted tail
//     that at-least-once delivery hands to the next owner after a rebalance: redelivery;
//   - a committed offset lower than the previous one is a rewind: Replaying turns on, with boundary
//     max(previous highest commit, ProcessedNext) and the rewind time; it clears once a commit reaches the boundary
//     (C30, including a small backward commit from a stale member).
//
// Not safe for concurrent use; [Path] serialises it.
type ReplayTracker struct {
	processedNext int64 // max processed offset + 1, -1 before the first record
	committed     int64 // last observed commit, -1 none
	highCommit    int64 // highest commit observed, -1 none
	boundary      int64 // rewind boundary (exclusive), -1 none
	rewindAtMs    float64
	rewindKnown   bool // rewindAtMs came from a commit decrease (else it is the first replayed record's time)
	replaying     bool
	seenCommit    bool
	newGroup      bool
	bornMs        float64
}

// NewReplayTracker returns a tracker that has seen nothing.
func NewReplayTracker() *ReplayTracker {
	return &ReplayTracker{processedNext: -1, committed: -1, highCommit: -1, boundary: -1, rewindAtMs: math.NaN()}
}

// ObserveCommit records the group's committed offset for this partition as read at atMs (reference ms). offset < 0
// means "no commit" (Kafka's -1); the first observation being that marks the group as new, born at atMs.
func (t *ReplayTracker) ObserveCommit(offset int64, atMs float64) {
	if !t.seenCommit {
		t.seenCommit = true
		if offset < 0 {
			t.newGroup, t.bornMs = true, atMs
		}
	}
	if offset < 0 {
		return
	}
	if t.committed >= 0 && offset < t.committed {
		t.boundary = max(t.highCommit, t.processedNext, t.boundary)
		t.rewindAtMs, t.rewindKnown, t.replaying = atMs, true, true
	}
	t.committed = offset
	t.highCommit = max(t.highCommit, offset)
	if t.replaying && offset >= t.boundary {
		t.replaying = false
	}
}

// Classify records that offset was processed; appendMs is its corrected append time (reference ms, NaN when not
// known) and atMs when the processing was observed (reference ms). It returns the class and, for replays, the
// rewind time in reference ms (the commit decrease, or this record's time when the decrease was not observed).
func (t *ReplayTracker) Classify(offset int64, appendMs, atMs float64) (Class, float64) {
	if t.processedNext < 0 || offset >= t.processedNext {
		t.processedNext = offset + 1
		if t.newGroup && appendMs < t.bornMs {
			return ClassBackfill, math.NaN()
		}
		return ClassLive, math.NaN()
	}
	if offset < t.highCommit || (t.replaying && offset < t.boundary) {
		if !t.replaying || math.IsNaN(t.rewindAtMs) {
			// A rewind we did not see as a commit decrease (commits are polled): start the episode here.
			t.replaying, t.rewindKnown, t.rewindAtMs = true, false, atMs
			t.boundary = max(t.highCommit, t.processedNext)
		}
		return ClassReplay, t.rewindAtMs
	}
	return ClassRedelivery, math.NaN()
}

// ReplayState is what the lag side exports for a partition (C30: replay=1, replay_boundary_offset).
type ReplayState struct {
	Replaying      bool
	BoundaryOffset int64   // exclusive; records below it are replays while Replaying; -1 if none
	RewindAtMs     float64 // reference ms of the rewind, NaN if none
	RewindObserved bool    // the rewind time is a commit decrease, not inferred from the first replayed record
	ProcessedNext  int64   // max processed offset + 1 (C19: lag from telemetry is HW − ProcessedNext), -1 if none
	Committed      int64   // last observed commit, -1 if none
	NewGroup       bool
}

// State returns the tracker's exported state.
func (t *ReplayTracker) State() ReplayState {
	return ReplayState{
		Replaying: t.replaying, BoundaryOffset: t.boundary, RewindAtMs: t.rewindAtMs, RewindObserved: t.rewindKnown,
		ProcessedNext: t.processedNext, Committed: t.committed, NewGroup: t.newGroup,
	}
}
