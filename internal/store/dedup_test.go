package store

import (
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// refWindow is the dedup window's specification: a map (key → batch holding it) and a FIFO of the admitted keys.
type refWindow struct {
	n    int
	fifo []uint64
	set  map[uint64]uint64
}

func (r *refWindow) admit(h, seq uint64) (bool, uint64) {
	if held, ok := r.set[h]; ok {
		return false, held
	}
	if len(r.fifo) == r.n {
		delete(r.set, r.fifo[0])
		r.fifo = r.fifo[1:]
	}
	r.fifo = append(r.fifo, h)
	r.set[h] = seq
	return true, 0
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
			ref := &refWindow{n: tt.window, set: map[uint64]uint64{}}
			for step := range 20000 {
				h := rng.Uint64N(tt.pool) + 1 // keys 1..pool: 0 and 1 would be one key in the window
				if tt.lowBitsSet {
					h <<= 40
				}
				seq := uint64(step/7 + 1) // a batch every 7 keys: the held batch must move with its key
				got, gotHeld := d.admit(h, seq)
				want, wantHeld := ref.admit(h, seq)
				if got != want || gotHeld != wantHeld {
					t.Fatalf("step %d: admit(%#x) = %v, %d; want %v, %d", step, h, got, gotHeld, want, wantHeld)
				}
			}
			// Every key the reference holds is found, and no other.
			for h := uint64(1); h <= tt.pool; h++ {
				k := h
				if tt.lowBitsSet {
					k <<= 40
				}
				_, want := ref.set[k]
				if _, found := d.find(slotKey(k)); found != want {
					t.Fatalf("key %#x held = %v, reference %v", k, found, want)
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
	admit := func(k uint64) bool { ok, _ := d.admit(k, 1); return ok }
	for _, k := range keys {
		if !admit(k) {
			t.Fatalf("fresh key %#x refused", k)
		}
	}
	d.forget(5 << 40)
	for _, k := range []uint64{6 << 40, 7 << 40, 3} {
		if admit(k) {
			t.Errorf("key %#x admitted again after another key was forgotten", k)
		}
	}
	if !admit(5 << 40) {
		t.Error("forgotten key refused")
	}
	d.forget(1 << 50) // never admitted: a no-op
	if admit(5<<40) || admit(3) {
		t.Error("keys lost after forgetting an absent key")
	}
}

func BenchmarkDedupWindowAdmit(b *testing.B) {
	d := newDedupWindow(1 << 18)
	rng := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		d.admit(rng.Uint64(), 1)
	}
}

// A latency key's hash is the same whatever was hashed before it (keyHasher keeps the last key's string part), and
// differs when any part of the key differs, strings shifted between fields included.
func TestLatencyKeyHash(t *testing.T) {
	seed := maphash.MakeSeed()
	base := LatencyRow{Cluster: "c", Topic: "orders", Group: "g", Partition: 3, Offset: 7, Class: ClassLive}
	variants := []LatencyRow{base, base, base, base, base, base, base}
	variants[1].Cluster = "d"
	variants[2].Topic, variants[2].Group = "order", "sg" // the same bytes, split differently
	variants[3].Group = "h"
	variants[4].Partition = 4
	variants[5].Offset = 8
	variants[6].Class = ClassReplay
	var fresh keyHasher
	want := fresh.latency(seed, &base)
	var k keyHasher
	seen := map[uint64]int{}
	for i := range variants {
		h := k.latency(seed, &variants[i])
		var f keyHasher
		if fh := f.latency(seed, &variants[i]); fh != h {
			t.Errorf("variant %d: %x after other keys, %x fresh", i, h, fh)
		}
		if j, ok := seen[h]; ok {
			t.Errorf("variants %d and %d hash the same", j, i)
		}
		seen[h] = i
		if got := k.latency(seed, &base); got != want {
			t.Errorf("after variant %d the base key hashes %x, want %x", i, got, want)
		}
		seen[want] = 0
	}
}
