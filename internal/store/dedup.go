package store

import (
	"encoding/binary"
	"hash/maphash"
)

// dedupWindow remembers the hashes of the last n row keys the writer accepted, so a row re-delivered while its
// first copy is still remembered is dropped before it reaches ClickHouse (and the rollups, which cannot tell
// duplicates apart). With every key it keeps the sequence number of the batch that holds the key's copy, so the
// writer can tell a copy ClickHouse has stored from one still on its way (Writer.admitLocked). Not safe for
// concurrent use: the Writer's mutex guards it.
//
// Keys are 64-bit maphash values; two different keys collide with probability about n/2^64 per lookup, which would
// drop a row that is not a duplicate (≈ 1.4e-14 at n = 262144). The set is an open-addressing table with linear
// probing at most half full (Knuth, TAOCP vol. 3, 6.4, algorithm L; deletion by backward shift, algorithm R): one
// admit costs about one probe of the table plus one of the eviction, where a Go map of 262144 uint64 keys cost
// three map operations, ~0.3 µs per row in the writer's profile.
type dedupWindow struct {
	seed  maphash.Seed
	ring  []uint64 // insertion order, oldest at next once full
	next  int
	full  bool
	slots []uint64 // the set: 0 is an empty slot, keys are stored as slotKey(h)
	batch []uint64 // batch[i] is the sequence number of the batch holding slots[i]'s copy
	mask  uint64   // len(slots) − 1, len(slots) a power of two ≥ 2n
}

func newDedupWindow(n int) *dedupWindow {
	if n <= 0 {
		return nil
	}
	size := 2
	for size < 2*n {
		size <<= 1
	}
	return &dedupWindow{seed: maphash.MakeSeed(), ring: make([]uint64, n), slots: make([]uint64, size),
		batch: make([]uint64, size), mask: uint64(size - 1)}
}

// slotKey maps a hash to a non-zero key (0 marks an empty slot); folding 0 into 1 adds a 2^-64 collision.
func slotKey(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

// find returns the slot holding k, or the empty slot ending k's probe sequence.
func (d *dedupWindow) find(k uint64) (i uint64, found bool) {
	for i = k & d.mask; ; i = (i + 1) & d.mask {
		switch d.slots[i] {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

// remove deletes k if present, shifting later entries of its cluster back so every probe sequence stays unbroken.
func (d *dedupWindow) remove(k uint64) {
	i, ok := d.find(k)
	if !ok {
		return
	}
	for j := i; ; {
		d.slots[i] = 0
		for {
			j = (j + 1) & d.mask
			if d.slots[j] == 0 {
				return
			}
			// The entry at j may stay when its home slot h lies cyclically in (i, j]; else it moves to the hole at i.
			h := d.slots[j] & d.mask
			if (i < j && i < h && h <= j) || (i > j && (i < h || h <= j)) {
				continue
			}
			d.slots[i], d.batch[i] = d.slots[j], d.batch[j]
			i = j
			break
		}
	}
}

// admit reports whether h is new, and remembers it if so as held by batch seq (evicting the oldest key once the
// window is full). When h is not new, held is the sequence number of the batch its remembered copy is in.
func (d *dedupWindow) admit(h, seq uint64) (isNew bool, held uint64) {
	if d == nil {
		return true, 0
	}
	k := slotKey(h)
	i, ok := d.find(k)
	if ok {
		return false, d.batch[i]
	}
	if d.full {
		d.remove(d.ring[d.next])
		i, _ = d.find(k) // the eviction may have shifted k's cluster
	}
	d.slots[i], d.batch[i] = k, seq
	d.ring[d.next] = k
	d.next++
	if d.next == len(d.ring) {
		d.next, d.full = 0, true
	}
	return true, 0
}

// forget removes h, so that a row whose insert failed for good can be written again when re-delivered. Its ring
// slot stays; evicting it later deletes nothing or, if h was admitted again meanwhile, ends that copy's memory early.
func (d *dedupWindow) forget(h uint64) {
	if d != nil {
		d.remove(slotKey(h))
	}
}

// keyHasher builds row-key hashes; each kind starts with its own tag and strings are length-prefixed, so keys of
// different kinds or with shifted string boundaries never hash the same input.
type keyHasher struct {
	h maphash.Hash
	// last is the (cluster, topic, group) of the latency key hashed last, with its hash: the latency rows of a
	// Write nearly always share them, and a row's key then costs one short hash instead of a stream of writes.
	last latencyPrefix
}

// latencyPrefix is the string part of a latency key and its hash under seed (valid: computed).
type latencyPrefix struct {
	cluster, topic, group string
	seed                  maphash.Seed
	sum                   uint64
	valid                 bool
}

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

// latency hashes the key in two steps: the strings (tag 'L', each length-prefixed), then that hash with the
// numbers (tag 'l'). Equal keys hash equal whatever was hashed before; two keys whose strings differ collide only
// if their string hashes do (2^-64, as any two keys).
func (k *keyHasher) latency(seed maphash.Seed, r *LatencyRow) uint64 {
	if p := &k.last; !p.valid || p.seed != seed || p.cluster != r.Cluster || p.topic != r.Topic || p.group != r.Group {
		k.start(seed, 'L')
		k.str(r.Cluster)
		k.str(r.Topic)
		k.str(r.Group)
		*p = latencyPrefix{cluster: r.Cluster, topic: r.Topic, group: r.Group, seed: seed, sum: k.h.Sum64(), valid: true}
	}
	var b [1 + 8 + 4 + 8 + 1]byte
	b[0] = 'l'
	binary.LittleEndian.PutUint64(b[1:], k.last.sum)
	binary.LittleEndian.PutUint32(b[9:], uint32(r.Partition))
	binary.LittleEndian.PutUint64(b[13:], uint64(r.Offset))
	b[21] = byte(r.Class)
	return maphash.Bytes(seed, b[:])
}

func (k *keyHasher) probe(seed maphash.Seed, r *ProbeRow) uint64 {
	k.start(seed, 'P')
	k.str(r.Cluster)
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
	k.str(r.Cluster)
	k.str(r.Host)
	k.int(int64(r.Kind))
	k.int(r.At.UnixMilli())
	return k.h.Sum64()
}
