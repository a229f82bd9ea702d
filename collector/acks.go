package collector

import (
	"sync"
)

// marker turns out-of-order sink acknowledgements into in-order offset marks for one partition in one consumer-group
// generation: a batch's offsets are marked only when it and every batch read before it were acknowledged, so a
// commit never skips a row that is not yet in ClickHouse.
type marker struct {
	mark func(next int64)

	// mu guards queue: batches in read order, each with the offset after its last record and whether it is acked.
	mu    sync.Mutex
	queue []*segment
	// failed is set once a batch of this generation was not acknowledged: nothing of the generation is marked
	// any more (its session is ended and the partition re-read from the last commit).
	failed bool
}

type segment struct {
	next int64
	done bool
}

// add registers a batch read before any later add; it returns the segment to acknowledge.
func (m *marker) add(next int64) *segment {
	s := &segment{next: next}
	m.mu.Lock()
	m.queue = append(m.queue, s)
	m.mu.Unlock()
	return s
}

// ack marks s acknowledged and marks the highest offset whose batches are all acknowledged.
func (m *marker) ack(s *segment) {
	m.mu.Lock()
	if m.failed {
		m.mu.Unlock()
		return
	}
	s.done = true
	var next int64 = -1
	i := 0
	for ; i < len(m.queue) && m.queue[i].done; i++ {
		next = m.queue[i].next
	}
	m.queue = m.queue[i:]
	m.mu.Unlock()
	if next >= 0 {
		m.mark(next)
	}
}

// fail gives up on the generation: no later acknowledgement marks anything, and the marker counts as idle.
func (m *marker) fail() {
	m.mu.Lock()
	m.failed, m.queue = true, nil
	m.mu.Unlock()
}

// pending returns how many batches wait for acknowledgement.
func (m *marker) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

type markerKey struct {
	topic      string
	partition  int32
	generation int32
}

// markers holds one marker per (topic, partition, generation); markers of ended generations are dropped once
// empty.
type markers struct {
	mu sync.Mutex // guards m
	m  map[markerKey]*marker
}

func (ms *markers) get(topic string, partition, generation int32, mark func(int64)) *marker {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.m == nil {
		ms.m = map[markerKey]*marker{}
	}
	k := markerKey{topic, partition, generation}
	if m, ok := ms.m[k]; ok {
		return m
	}
	for old, m := range ms.m {
		if old.topic == topic && old.partition == partition && old.generation < generation && m.pending() == 0 {
			delete(ms.m, old)
		}
	}
	m := &marker{mark: mark}
	ms.m[k] = m
	return m
}
