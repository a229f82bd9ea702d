package lagread

import "sort"

// maxEpochsKept bounds a partition's leader-epoch history: a record older than that many leader changes is
// attributed to no broker (flagged), never to a guessed one.
const maxEpochsKept = 32

// leaderEpochs is, per partition, which broker led each leader epoch seen: fed by every Metadata and ListOffsets
// answer (both carry the partition's current leader epoch, KIP-320), read to tell whose clock stamped a
// LogAppendTime record from the partition leader epoch its batch carries (KIP-101). Not safe for concurrent use
// (ClusterReader.mu guards it).
type leaderEpochs struct {
	m map[tp][]epochLeader // ascending epoch
}

type epochLeader struct{ epoch, leader int32 }

// observe records that leader led k's epoch. An epoch has one leader; the first answer is kept.
func (h *leaderEpochs) observe(k tp, epoch, leader int32) {
	if epoch < 0 || leader < 0 {
		return
	}
	if h.m == nil {
		h.m = map[tp][]epochLeader{}
	}
	s := h.m[k]
	i := sort.Search(len(s), func(i int) bool { return s[i].epoch >= epoch })
	if i < len(s) && s[i].epoch == epoch {
		return
	}
	s = append(s, epochLeader{})
	copy(s[i+1:], s[i:])
	s[i] = epochLeader{epoch, leader}
	if len(s) > maxEpochsKept {
		s = s[len(s)-maxEpochsKept:]
	}
	h.m[k] = s
}

// leaderOf returns the broker that led k's epoch, -1 when that epoch was never seen.
func (h *leaderEpochs) leaderOf(k tp, epoch int32) int32 {
	s := h.m[k]
	i := sort.Search(len(s), func(i int) bool { return s[i].epoch >= epoch })
	if i < len(s) && s[i].epoch == epoch {
		return s[i].leader
	}
	return -1
}

// retain forgets the partitions keep rejects (deleted topics and partitions).
func (h *leaderEpochs) retain(keep func(tp) bool) {
	for k := range h.m {
		if !keep(k) {
			delete(h.m, k)
		}
	}
}
