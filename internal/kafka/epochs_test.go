package kafka

import "testing"

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
