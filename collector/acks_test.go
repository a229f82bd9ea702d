package collector

import (
	"slices"
	"testing"
)

func TestMarkerMarksOnlyContiguousPrefix(t *testing.T) {
	var marks []int64
	m := &marker{mark: func(n int64) { marks = append(marks, n) }}
	a, b, c := m.add(10), m.add(20), m.add(30)
	m.ack(b) // batch 2 acknowledged first: batch 1 is not in ClickHouse yet, nothing may be committed
	if len(marks) != 0 {
		t.Fatalf("marked %v before the first batch was acknowledged", marks)
	}
	m.ack(a) // now 1 and 2 are durable: commit up to 20 in one mark
	m.ack(c)
	if !slices.Equal(marks, []int64{20, 30}) {
		t.Fatalf("marks %v, want [20 30]", marks)
	}
	if m.pending() != 0 {
		t.Fatalf("%d pending", m.pending())
	}
}

func TestMarkersScopedByGeneration(t *testing.T) {
	var ms markers
	var got1, got2 []int64
	m1 := ms.get("t", 0, 1, func(n int64) { got1 = append(got1, n) })
	s := m1.add(5)
	m2 := ms.get("t", 0, 2, func(n int64) { got2 = append(got2, n) })
	if m1 == m2 {
		t.Fatal("a new generation must get its own marker")
	}
	m1.ack(s) // a late ack of the old generation marks through the old session only
	if !slices.Equal(got1, []int64{5}) || len(got2) != 0 {
		t.Fatalf("old %v new %v", got1, got2)
	}
	if ms.get("t", 0, 2, nil) != m2 {
		t.Fatal("same generation must reuse its marker")
	}
}
