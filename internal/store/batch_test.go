package store

import (
	"slices"
	"testing"
)

// TestLatencyBatchSlice cuts a batch of uneven segments (one empty) at every pair of bounds: the rows of each cut
// are exactly rows [from, to) of the whole, in order, without copying.
func TestLatencyBatchSlice(t *testing.T) {
	var flat []LatencyRow
	var rs latencyBatch
	for _, n := range []int{3, 0, 1, 5, 2} {
		seg := make([]LatencyRow, n)
		for i := range seg {
			seg[i].Offset = int64(len(flat))
			flat = append(flat, seg[i])
		}
		rs = append(rs, seg)
	}
	if rs.len() != len(flat) || !slices.Equal(rs.flat(), flat) {
		t.Fatalf("len %d, flat %v; want %d rows 0..%d", rs.len(), rs.flat(), len(flat), len(flat)-1)
	}
	for from := 0; from <= len(flat); from++ {
		for to := from; to <= len(flat); to++ {
			got := rs.slice(from, to)
			if got.len() != to-from || !slices.Equal(got.flat(), flat[from:to]) {
				t.Fatalf("slice(%d, %d) = %v, want %v", from, to, got.flat(), flat[from:to])
			}
			for _, seg := range got {
				if len(seg) == 0 {
					t.Fatalf("slice(%d, %d) holds an empty segment", from, to)
				}
			}
		}
	}
	rs.slice(1, 2)[0][0].Offset = 99 // shares the rows
	if rs[0][1].Offset != 99 {
		t.Fatal("slice copied the rows")
	}
}
