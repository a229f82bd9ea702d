package latency

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"
)

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
// Observations arrive in processing order on the receipts path (one emitter per consumer, in order per partition).
// A source that delivers them out of order (the spans path: an agent's batches, split by trace id over the spans
// topic's partitions) turns on [ReplayTracker.AcceptLate]: each offset skipped when ProcessedNext jumps is kept as
// an open gap (at most maxLateGaps intervals, the lowest dropped first), and a record that fills a gap is a first
// processing arriving late: live (or backfill), not a redelivery.
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
	acceptLate    bool
	gaps          []offsetGap // acceptLate: offsets below processedNext not processed yet, sorted, disjoint
}

// offsetGap is the offsets [lo, hi) skipped when ProcessedNext jumped, none of them processed since.
type offsetGap struct{ lo, hi int64 }

// maxLateGaps bounds the open gaps a path keeps for late arrivals (16 bytes each).
const maxLateGaps = 1024

// AcceptLate makes t classify records that arrive after higher offsets of their partition as first processings
// when they fill an offset skipped before (see the type's comment).
func (t *ReplayTracker) AcceptLate() { t.acceptLate = true }

// advance moves ProcessedNext to offset+1 for a record at or beyond it, keeping the skipped offsets as a gap when
// late arrivals are accepted.
//
// The first record's gap starts at the committed offset when one was observed, else at 0: records of the same
// first pass may arrive after it.
func (t *ReplayTracker) advance(offset int64) {
	if t.acceptLate {
		lo := t.processedNext
		if lo < 0 {
			lo = max(t.committed, 0)
		}
		if offset > lo {
			if len(t.gaps) == maxLateGaps {
				t.gaps = append(t.gaps[:0], t.gaps[1:]...)
			}
			t.gaps = append(t.gaps, offsetGap{lo, offset})
		}
	}
	t.processedNext = offset + 1
}

// fillGap reports whether offset lies in an open gap, and removes it from the gap.
func (t *ReplayTracker) fillGap(offset int64) bool {
	i, _ := slices.BinarySearchFunc(t.gaps, offset, func(g offsetGap, o int64) int { return cmp.Compare(g.hi, o+1) })
	if i == len(t.gaps) || t.gaps[i].lo > offset {
		return false
	}
	g := t.gaps[i]
	switch {
	case g.lo == offset && g.hi == offset+1:
		t.gaps = slices.Delete(t.gaps, i, i+1)
	case g.lo == offset:
		t.gaps[i].lo++
	case g.hi == offset+1:
		t.gaps[i].hi--
	default:
		t.gaps[i].hi = offset
		t.gaps = slices.Insert(t.gaps, i+1, offsetGap{offset + 1, g.hi})
		if len(t.gaps) > maxLateGaps {
			t.gaps = slices.Delete(t.gaps, 0, 1)
		}
	}
	return true
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
	if t.processedNext < 0 || offset >= t.processedNext || (len(t.gaps) > 0 && t.fillGap(offset)) {
		if t.processedNext < 0 || offset >= t.processedNext {
			t.advance(offset)
		}
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

// ReplayCheckpoint is everything a [ReplayTracker] knows, so that its classification survives a restart of the
// process: a tracker restored from the checkpoint classifies every later record (and commit) exactly as the
// tracker it was taken from would have. Encode it with MarshalBinary.
type ReplayCheckpoint struct {
	ProcessedNext, Committed, HighCommit, Boundary int64
	RewindAtMs, BornMs                             float64
	RewindKnown, Replaying, SeenCommit, NewGroup   bool
}

// Checkpoint returns the tracker's state.
func (t *ReplayTracker) Checkpoint() ReplayCheckpoint {
	return ReplayCheckpoint{ProcessedNext: t.processedNext, Committed: t.committed, HighCommit: t.highCommit,
		Boundary: t.boundary, RewindAtMs: t.rewindAtMs, BornMs: t.bornMs, RewindKnown: t.rewindKnown,
		Replaying: t.replaying, SeenCommit: t.seenCommit, NewGroup: t.newGroup}
}

// Restore replaces the tracker's state with c.
func (t *ReplayTracker) Restore(c ReplayCheckpoint) {
	*t = ReplayTracker{processedNext: c.ProcessedNext, committed: c.Committed, highCommit: c.HighCommit,
		boundary: c.Boundary, rewindAtMs: c.RewindAtMs, bornMs: c.BornMs, rewindKnown: c.RewindKnown,
		replaying: c.Replaying, seenCommit: c.SeenCommit, newGroup: c.NewGroup}
}

// WithCommit returns c with a commit observation applied (offset, read at reference time at), as
// [ReplayTracker.ObserveCommit] would apply it to the tracker c was taken from. Applying the same observation twice
// changes nothing.
func (c ReplayCheckpoint) WithCommit(offset int64, at time.Time) ReplayCheckpoint {
	var t ReplayTracker
	t.Restore(c)
	t.ObserveCommit(offset, timeToMs(at))
	return t.Checkpoint()
}

// replayCheckpointLen is MarshalBinary's length: a version byte, four int64s, two float64s and a flags byte.
const replayCheckpointLen = 1 + 4*8 + 2*8 + 1

// MarshalBinary encodes c in 50 bytes (version 1, big-endian).
func (c ReplayCheckpoint) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, replayCheckpointLen)
	b = append(b, 1)
	for _, v := range []int64{c.ProcessedNext, c.Committed, c.HighCommit, c.Boundary} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.RewindAtMs))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.BornMs))
	var f byte
	for i, on := range []bool{c.RewindKnown, c.Replaying, c.SeenCommit, c.NewGroup} {
		if on {
			f |= 1 << i
		}
	}
	return append(b, f), nil
}

// UnmarshalBinary decodes what MarshalBinary wrote; any other length or version is an error (ErrBadCheckpoint).
func (c *ReplayCheckpoint) UnmarshalBinary(b []byte) error {
	if len(b) != replayCheckpointLen || b[0] != 1 {
		return fmt.Errorf("replay checkpoint of %d bytes (version %v): %w", len(b), b[:min(1, len(b))], ErrBadCheckpoint)
	}
	u := func(i int) uint64 { return binary.BigEndian.Uint64(b[1+8*i:]) }
	c.ProcessedNext, c.Committed, c.HighCommit, c.Boundary = int64(u(0)), int64(u(1)), int64(u(2)), int64(u(3))
	c.RewindAtMs, c.BornMs = math.Float64frombits(u(4)), math.Float64frombits(u(5))
	f := b[replayCheckpointLen-1]
	c.RewindKnown, c.Replaying, c.SeenCommit, c.NewGroup = f&1 != 0, f&2 != 0, f&4 != 0, f&8 != 0
	return nil
}
