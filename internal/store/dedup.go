package store

import (
	"encoding/binary"
	"hash/maphash"
)

// dedupWindow remembers the hashes of the last n row keys the writer accepted, so a row re-delivered while its
// first copy is still remembered is dropped before it reaches ClickHouse (and the rollups, which cannot tell
// duplicates apart). Not safe for concurrent use: the Writer's mutex guards it.
//
// Keys are 64-bit maphash values; two different keys collide with probability about n/2^64 per lookup, which would
// drop a row that is not a duplicate (≈ 1.4e-14 at n = 262144).
type dedupWindow struct {
	seed maphash.Seed
	ring []uint64 // insertion order, oldest at next once full
	next int
	full bool
	set  map[uint64]struct{}
}

func newDedupWindow(n int) *dedupWindow {
	if n <= 0 {
		return nil
	}
	return &dedupWindow{seed: maphash.MakeSeed(), ring: make([]uint64, n), set: make(map[uint64]struct{}, n)}
}

// admit reports whether h is new, and remembers it if so (evicting the oldest key once the window is full).
func (d *dedupWindow) admit(h uint64) bool {
	if d == nil {
		return true
	}
	if _, ok := d.set[h]; ok {
		return false
	}
	if d.full {
		delete(d.set, d.ring[d.next])
	}
	d.ring[d.next] = h
	d.set[h] = struct{}{}
	d.next++
	if d.next == len(d.ring) {
		d.next, d.full = 0, true
	}
	return true
}

// forget removes h, so that a row whose insert failed for good can be written again when re-delivered. Its ring
// slot stays; evicting it later deletes nothing or, if h was admitted again meanwhile, ends that copy's memory early.
func (d *dedupWindow) forget(h uint64) {
	if d != nil {
		delete(d.set, h)
	}
}

// keyHasher builds row-key hashes; each kind starts with its own tag and strings are length-prefixed, so keys of
// different kinds or with shifted string boundaries never hash the same input.
type keyHasher struct{ h maphash.Hash }

func (k *keyHasher) start(seed maphash.Seed, tag byte) {
	k.h.SetSeed(seed)
	_ = k.h.WriteByte(tag)
}

func (k *keyHasher) str(s string) {
	k.int(int64(len(s)))
	_, _ = k.h.WriteString(s)
}

func (k *keyHasher) int(v int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	_, _ = k.h.Write(b[:])
}

// The keys mirror the tables' ORDER BY (the ReplacingMergeTree identity).

func (k *keyHasher) latency(seed maphash.Seed, r *LatencyRow) uint64 {
	k.start(seed, 'L')
	k.str(r.Topic)
	k.str(r.Group)
	k.int(int64(r.Partition))
	k.int(r.Offset)
	k.int(int64(r.Class))
	return k.h.Sum64()
}

func (k *keyHasher) probe(seed maphash.Seed, r *ProbeRow) uint64 {
	k.start(seed, 'P')
	k.str(r.Topic)
	k.int(int64(r.Partition))
	k.int(int64(r.Seq))
	return k.h.Sum64()
}

func (k *keyHasher) lag(seed maphash.Seed, r *LagRow) uint64 {
	k.start(seed, 'G')
	k.str(r.Cluster)
	k.str(r.Group)
	k.str(r.Topic)
	k.int(int64(r.Partition))
	k.int(r.At.UnixMilli())
	return k.h.Sum64()
}

func (k *keyHasher) clock(seed maphash.Seed, r *ClockOffsetRow) uint64 {
	k.start(seed, 'C')
	k.str(r.Host)
	k.int(int64(r.Kind))
	k.int(r.At.UnixMilli())
	return k.h.Sum64()
}
