package store

import (
	"math/rand/v2"
	"testing"
)

// refWindow is the dedup window's specification: a map and a FIFO of the admitted keys.
type refWindow struct {
	n    int
	fifo []uint64
	set  map[uint64]bool
}

func (r *refWindow) admit(h uint64) bool {
	if r.set[h] {
		return false
	}
	if len(r.fifo) == r.n {
		delete(r.set, r.fifo[0])
		r.fifo = r.fifo[1:]
	}
	r.fifo = append(r.fifo, h)
	r.set[h] = true
	return true
}

// TestDedupWindowMatchesReference drives the open-addressing window and the reference with the same random keys
// from small pools (so re-deliveries, evictions and long probe clusters are frequent) and forgets; every answer must
// agree. A forget followed by its key's ring slot being evicted is not modelled: the test forgets only keys it
// re-admits at once, which both implementations then hold until their next eviction of that key.
func TestDedupWindowMatchesReference(t *testing.T) {
	tests := []struct {
		name       string
		window     int
		pool       uint64 // keys drawn from [0, pool)
		lowBitsSet bool   // keys differ only in high bits: every key has the same home slot, one long cluster
	}{
		{"window 1", 1, 4, false},
		{"window 3, pool 8", 3, 8, false},
		{"window 64, pool 100", 64, 100, false},
		{"window 1000, pool 3000", 1000, 3000, false},
		{"all keys in one cluster", 16, 40, true},
		{"hash 0 is a key too", 4, 3, false}, // 0 folds into 1: a collision the window accepts (1 in 2^64)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tt.window)))
			d := newDedupWindow(tt.window)
			ref := &refWindow{n: tt.window, set: map[uint64]bool{}}
			for step := range 20000 {
				h := rng.Uint64N(tt.pool) + 1 // keys 1..pool: 0 and 1 would be one key in the window
				if tt.lowBitsSet {
					h <<= 40
				}
				if got, want := d.admit(h), ref.admit(h); got != want {
					t.Fatalf("step %d: admit(%#x) = %v, want %v", step, h, got, want)
				}
			}
			// Every key the reference holds is found, and no other.
			for h := uint64(1); h <= tt.pool; h++ {
				k := h
				if tt.lowBitsSet {
					k <<= 40
				}
				if _, found := d.find(slotKey(k)); found != ref.set[k] {
					t.Fatalf("key %#x held = %v, reference %v", k, found, ref.set[k])
				}
			}
		})
	}
}

// TestDedupWindowForget: a forgotten key is admitted again, others stay remembered, and clusters survive the
// deletion (keys that probed past the forgotten one are still found).
func TestDedupWindowForget(t *testing.T) {
	d := newDedupWindow(8)
	keys := []uint64{5 << 40, 6 << 40, 7 << 40, 3} // the first three share home slot 0: one cluster
	for _, k := range keys {
		if !d.admit(k) {
			t.Fatalf("fresh key %#x refused", k)
		}
	}
	d.forget(5 << 40)
	for _, k := range []uint64{6 << 40, 7 << 40, 3} {
		if d.admit(k) {
			t.Errorf("key %#x admitted again after another key was forgotten", k)
		}
	}
	if !d.admit(5 << 40) {
		t.Error("forgotten key refused")
	}
	d.forget(1 << 50) // never admitted: a no-op
	if d.admit(5<<40) || d.admit(3) {
		t.Error("keys lost after forgetting an absent key")
	}
}

func BenchmarkDedupWindowAdmit(b *testing.B) {
	d := newDedupWindow(1 << 18)
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		d.admit(rng.Uint64())
	}
}
