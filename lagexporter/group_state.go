package lagexporter

import "time"

// groupState is what the evaluator keeps of one group between cycles: its last successfully read observation (for
// stale values), and its partitions' states sorted by (topic, partition), the order evalGroup visits them in, so
// that each is found by a merge walk rather than a map lookup. At 500,000 group-partitions that is no per-partition
// key, map slot or pointer, and no map probe per partition and cycle (docs/performance.md).
type groupState struct {
	// obs is the last successful read. Its commits are kept compactly in kept (obs.Offsets nil) unless one of them
	// carries a commit time or a share lag, which classic and consumer groups' OffsetFetch never fills.
	obs  GroupObservation
	kept []keptCommit
	// keptTopics names the topic of kept's commits: a run of commits of one topic per entry (id unused)
	keptTopics []topicRun
	read       bool      // obs holds a successful read
	readAt     time.Time // observation time of the read
	parts      []gpState
	// topics names the topic (and incarnation) of every state in parts: parts are in (topic, partition) order, so
	// a topic's states are one run, and its name and id are kept once per group-topic instead of once per state.
	topics []topicRun
	seen   uint64 // seq of the last cycle that saw the group
	// times is the ring of the group's last cfg.Status.Window sample times (Unix nanoseconds): the observation times
	// of the cycles that evaluated the group from fresh commits (not stale). A partition that added a sample in every
	// such cycle since its state was made (aligned: gpState.own == nil) takes its samples' times from here, so the
	// time is stored once per group cycle, not once per partition (docs/performance.md).
	times     []int64
	timesNext int32
}

// push records t as the group's newest sample time.
func (gs *groupState) push(t int64, window int) {
	if gs.times == nil {
		gs.times = make([]int64, window)
	}
	gs.times[gs.timesNext] = t
	gs.timesNext = (gs.timesNext + 1) % int32(len(gs.times))
}

// timeAt returns the group's sample time age cycles back (0: the newest); the group has pushed more than age times.
func (gs *groupState) timeAt(age int) int64 {
	n := len(gs.times)
	return gs.times[(int(gs.timesNext)-1-age+2*n)%n]
}

// topicRun is the topic of a run of a group's partition states: those below end, from the previous run's end.
type topicRun struct {
	name, id string
	end      int32
}

// runCursor finds the run of the states of a group, asked in increasing index order.
type runCursor struct {
	runs []topicRun
	r    int
}

func (c *runCursor) at(i int) *topicRun {
	for int(c.runs[c.r].end) <= i {
		c.r++
	}
	return &c.runs[c.r]
}

// gpState is one group-partition's state. Its fields are ordered so that the struct has no padding (112 bytes):
// there is one per group-partition. Its topic is its group's (groupState.topics).
type gpState struct {
	ring []ringSample // fixed capacity cfg.Status.Window; oldest at next when full
	// own holds the samples' times, indexed like ring, once the partition missed a sample its group took (its
	// offsets were unknown or stale in a cycle that read the group's commits); nil while the times are the group's
	// (groupState.times). Rare: one allocation per such partition, until its state is dropped.
	own        *[]int64
	commitTime time.Time
	committed  int64
	// replayFrom is the committed offset as far as it exists in the log: min(committed, high watermark). A later
	// commit below it is a rewind; offsets above a high watermark that fell (truncation) were never delivered from
	// the log as it is now, so they are no replay boundary.
	replayFrom int64
	replay     ReplayState
	// deletedThrough is the log start of the last read: unread records below it are already counted.
	deletedThrough int64
	partition      int32
	aheadReads     int32 // consecutive reads with the commit past End
	next           int32
	full           bool
	hasCommit      bool
	lastStatus     Status // status of the last cycle that added a sample (a stale partition keeps it)
	deletedSeen    bool
}

// samples returns how many samples the ring holds.
func (st *gpState) samples() int {
	if st.full {
		return len(st.ring)
	}
	return int(st.next)
}

// detach gives st its own sample times, copied from its group's (behind names the group's newest times that st has
// no sample of), before st misses a sample of its group.
func (st *gpState) detach(gs *groupState, behind int) {
	own := make([]int64, len(st.ring))
	n, w := st.samples(), len(st.ring)
	for age := 0; age < n; age++ { // age 0: the newest sample, at ring[next-1]
		own[(int(st.next)-1-age+2*w)%w] = gs.timeAt(age + behind)
	}
	st.own = &own
}

// pushSample appends this cycle's (committed offset, lag) to the partition's ring of samples; committed is stored as
// −1 when the group has no commit. A ring with its own clock records the sample's time beside it.
func (st *gpState) pushSample(lag, committed int64, has bool, now time.Time) {
	rs := ringSample{committed: -1, lag: lag}
	if has {
		rs.committed = committed
	}
	st.ring[st.next] = rs
	if st.own != nil {
		(*st.own)[st.next] = now.UnixNano()
	}
	st.next++
	if int(st.next) == len(st.ring) {
		st.next, st.full = 0, true
	}
}

// keptCommit is a CommittedOffset without CommitTime and ShareLag (32 bytes instead of 64): the commits a group's
// last successful read found, kept to show stale values when its next reads fail.
// keptCommit is a kept commit without its topic: the commits are kept in their read order, and the topic of each
// run of commits of one topic once (groupState.keptTopics), 16 B per commit instead of 32.
type keptCommit struct {
	offset    int64
	partition int32
}

// keep stores g, the group's successful read of this cycle.
func (gs *groupState) keep(g *GroupObservation) {
	gs.obs = *g
	for i := range g.Offsets {
		if c := &g.Offsets[i]; !c.CommitTime.IsZero() || c.ShareLag != nil {
			gs.kept, gs.keptTopics = nil, nil // kept whole: a share group's, or a timeline's with commit times
			return
		}
	}
	gs.kept = sizedExactly(gs.kept, len(g.Offsets))
	runs := 0
	for i := range g.Offsets {
		if i == 0 || g.Offsets[i].Topic != g.Offsets[i-1].Topic {
			runs++
		}
	}
	gs.keptTopics = sizedExactly(gs.keptTopics, runs)
	for i, c := range g.Offsets {
		if i == 0 || c.Topic != g.Offsets[i-1].Topic {
			gs.keptTopics = append(gs.keptTopics, topicRun{name: c.Topic})
		}
		gs.keptTopics[len(gs.keptTopics)-1].end = int32(i + 1)
		gs.kept = append(gs.kept, keptCommit{offset: c.Offset, partition: c.Partition})
	}
	gs.obs.Offsets = nil
}

// sizedExactly returns s emptied, with room for n: its own array unless that is too small or more than about twice
// too large (the capacity of a larger past), else a new one of exactly n, not grown by doubling.
func sizedExactly[T any](s []T, n int) []T {
	if cap(s) < n || cap(s) > 2*n+8 {
		return make([]T, 0, n)
	}
	return s[:0]
}

// last returns the group's last successful read, its commits in scratch when they are kept compactly.
func (gs *groupState) last(scratch []CommittedOffset) (GroupObservation, []CommittedOffset) {
	obs := gs.obs
	if obs.Offsets == nil && gs.kept != nil {
		scratch = scratch[:0]
		topics := runCursor{runs: gs.keptTopics}
		for i, c := range gs.kept {
			scratch = append(scratch, CommittedOffset{Topic: topics.at(i).name, Partition: c.partition, Offset: c.offset})
		}
		obs.Offsets = scratch
	}
	return obs, scratch
}

// ringSample is a Sample stored compactly (100,000 partitions × a 10-sample window): committed < 0 means no commit.
// Its time is the group's (groupState.times) or the partition's own (gpState.own). The representation is private to
// the ring; Sample, which the rules read, has an explicit HasCommit.
type ringSample struct{ committed, lag int64 }
