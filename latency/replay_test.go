package latency

import (
	"math"
	"slices"
	"testing"
)

// TestReplayTrackerLateArrivals: with AcceptLate, a record arriving after higher offsets of its partition is live
// when its offset was skipped and never processed; processing it twice is still a redelivery, and below a commit a
// replay. Without AcceptLate the same order reads as redeliveries. At most maxLateGaps gaps are kept, the lowest
// dropped first.
func TestReplayTrackerLateArrivals(t *testing.T) {
	classify := func(tr *ReplayTracker, offsets ...int64) []Class {
		var out []Class
		for _, o := range offsets {
			c, _ := tr.Classify(o, math.NaN(), 1)
			out = append(out, c)
		}
		return out
	}
	L, R, D := ClassLive, ClassReplay, ClassRedelivery
	late := NewReplayTracker()
	late.AcceptLate()
	if got, want := classify(late, 2, 0, 3, 1, 5, 2, 4, 3, 6), []Class{L, L, L, L, L, D, L, D, L}; !slices.Equal(got, want) {
		t.Fatalf("accepting late arrivals: %v, want %v", got, want)
	}
	if len(late.gaps) != 0 {
		t.Fatalf("gaps %v left after every skipped offset arrived", late.gaps)
	}
	committed := NewReplayTracker() // the first record's gap starts at the commit
	committed.AcceptLate()
	committed.ObserveCommit(10, 1)
	if got, want := classify(committed, 12, 11, 10, 9), []Class{L, L, L, R}; !slices.Equal(got, want) {
		t.Fatalf("first records after a commit: %v, want %v", got, want)
	}
	late.ObserveCommit(7, 2)
	if got, want := classify(late, 9, 8, 5), []Class{L, L, R}; !slices.Equal(got, want) {
		t.Fatalf("after a commit: %v, want %v", got, want)
	}
	ordered := NewReplayTracker()
	if got, want := classify(ordered, 0, 3, 1, 2), []Class{L, L, D, D}; !slices.Equal(got, want) {
		t.Fatalf("without AcceptLate: %v, want %v", got, want)
	}

	capped := NewReplayTracker()
	capped.AcceptLate()
	for o := int64(0); o <= 2*(maxLateGaps+2); o += 2 { // offsets 0, 2, 4, …: a gap at every odd offset
		classify(capped, o)
	}
	if len(capped.gaps) != maxLateGaps {
		t.Fatalf("%d gaps kept, want %d", len(capped.gaps), maxLateGaps)
	}
	if got, want := classify(capped, 1, 2*(maxLateGaps+2)-1), []Class{D, L}; !slices.Equal(got, want) {
		t.Fatalf("lowest gap dropped, highest kept: %v, want %v", got, want)
	}
}
