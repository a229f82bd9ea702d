package lagexporter

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Evaluator turns a sequence of Observations into Snapshots. It holds the state that spans cycles: each
// group-partition's status window, commit-change time, replay and ahead state, each partition's last known offsets
// (for stale values when a read fails) and high-watermark history (for the interpolation fallback), and the
// counters of end-offset decreases (per topic) and of unread records deleted (per group and topic). State of groups,
// partitions and topic incarnations that disappear from an observation is dropped in that same cycle, so their series
// disappear (case C15).
//
// An Evaluator is not safe for concurrent use; the Loop owns one.
type Evaluator struct {
	cfg    *Config
	topics map[tpKey]*tpState
	groups map[string]*groupState // each group's last good read and its partitions' states
	// endDecreases counts, per topic name, the partitions whose end offset was read lower than the time before.
	endDecreases map[string]uint64
	// unreadDeleted counts, per group and topic, the records retention or DeleteRecords deleted below the group's
	// committed offset while the evaluator watched (log start moving past an unconsumed position).
	unreadDeleted map[gtKey]int64
	seq           uint64
	window        []Sample          // scratch, reused
	offs          []CommittedOffset // scratch, reused
	lastOffs      []CommittedOffset // scratch, reused: a stale group's kept commits
	names         []string          // scratch, reused
	runs          []topicRun        // scratch, reused: the topics of a group's states as they are handed out
	// lags is the unused rest of the current chunk the groups' PartitionLag slices are cut from (Apply's, dropped
	// when it returns: the snapshot holds what was cut).
	lags []PartitionLag
}

// lagChunk is how many PartitionLags are allocated at once for the groups of a snapshot (about 360 KB): cut from
// one allocation, a group's 20 partitions take 20 × 176 B, not a 4,096-B size class. A chunk's tail that a group
// does not fit in is left unused (less than one group's partitions per chunk).
const lagChunk = 2048

// partitionLags returns a slice of length 0 and capacity n for a group's partitions, cut from e.lags.
func (e *Evaluator) partitionLags(n int) []PartitionLag {
	if n == 0 {
		return []PartitionLag{} // not nil: JSON "partitions": [], as make gave
	}
	if len(e.lags) < n {
		e.lags = make([]PartitionLag, max(n, lagChunk))
	}
	out := e.lags[:0:n]
	e.lags = e.lags[n:]
	return out
}

type gtKey struct{ group, topic string }

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

type tpKey struct {
	topic     string
	partition int32
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

type tpState struct {
	topicID  string
	last     PartitionObservation // last known offsets
	lastRead time.Time            // when last was read
	history  []hwPoint            // ascending time, HW strictly increasing
	seen     uint64
}

type hwPoint struct {
	t  time.Time
	hw int64
}

// NewEvaluator returns an Evaluator for cfg, which must have passed Validate.
func NewEvaluator(cfg *Config) *Evaluator {
	return &Evaluator{cfg: cfg, topics: map[tpKey]*tpState{},
		groups: map[string]*groupState{}, endDecreases: map[string]uint64{}, unreadDeleted: map[gtKey]int64{}}
}

type topicView struct {
	obs    *TopicObservation
	sorted []*partView // by partition, each once
}

type partView struct {
	p            PartitionObservation // this cycle's or, when stale, the last known values
	stale        bool
	endDecreased bool // the end offset read this cycle is lower than the last one
	st           *tpState
	probes       map[probeAt]*RecordProbe // this cycle's record reads of the partition
}

// probeAt is what a record read answers for, within one partition: the offset it was read at and whether for
// read_committed.
type probeAt struct {
	offset        int64
	readCommitted bool
}

type probeKey struct {
	topic     string
	partition int32
	offset    int64
	iso       Isolation
}

// Apply evaluates one observation and returns its snapshot. obs is not modified and not retained.
func (e *Evaluator) Apply(obs *Observation) *Snapshot {
	e.seq++
	seq, now := e.seq, obs.Time
	snap := &Snapshot{Cluster: e.cfg.Cluster, Time: now, Seq: seq, Errors: slices.Clone(obs.Errors)}

	topics := make(map[string]*topicView, len(obs.Topics))
	for i := range obs.Topics {
		t := &obs.Topics[i]
		if !e.cfg.TopicAllowed(t.Topic) {
			continue
		}
		tv := &topicView{obs: t, sorted: make([]*partView, 0, len(t.Partitions))}
		snapTopic := TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType, Retention: t.Retention,
			Partitions: make([]PartitionObservation, 0, len(t.Partitions))}
		for _, p := range t.Partitions {
			k := tpKey{t.Topic, p.Partition}
			st := e.topics[k]
			if st == nil || st.topicID != t.ID {
				st = &tpState{topicID: t.ID} // new partition or new incarnation: forget the old one
				e.topics[k] = st
			}
			st.seen = seq
			pv := &partView{p: p, st: st}
			if p.Known() {
				if len(st.history) > 0 && (p.HighWatermark < st.last.HighWatermark || p.LastStable < st.last.LastStable) {
					// truncation or stale offsets, not a consumer seeking back: counted and flagged
					pv.endDecreased = true
					e.endDecreases[t.Topic]++
				}
				st.last, st.lastRead = p, now
				e.recordHW(st, now, p.HighWatermark)
			} else if len(st.history) > 0 { // read before in this incarnation: the last values, flagged stale
				pv.p, pv.stale = st.last, true
				pv.p.Leader, pv.p.Error, pv.p.ErrorCode = p.Leader, "", ""
			}
			tv.sorted = append(tv.sorted, pv)
			// partition offsets are published as read this cycle: an unreadable partition has no offset series
			snapTopic.Partitions = append(snapTopic.Partitions, p)
		}
		slices.SortStableFunc(tv.sorted, func(a, b *partView) int { return cmp.Compare(a.p.Partition, b.p.Partition) })
		tv.sorted = lastPerPartition(tv.sorted) // a partition listed twice counts once (the last), as a map had it
		topics[t.Topic] = tv
		snap.Topics = append(snap.Topics, snapTopic)
	}
	slices.SortFunc(snap.Topics, func(a, b TopicObservation) int { return cmp.Compare(a.Topic, b.Topic) })
	for name := range e.endDecreases {
		if topics[name] == nil {
			delete(e.endDecreases, name)
		}
	}
	snap.EndOffsetDecreases = make(map[string]uint64, len(topics))
	for name := range topics {
		snap.EndOffsetDecreases[name] = e.endDecreases[name]
	}

	// Each record read goes to its partition's view, keyed by offset and isolation: a small map per partition with
	// an integer key, not one map of (topic, partition, offset, isolation) probed once per group-partition.
	for i := range obs.Records {
		r := &obs.Records[i]
		tv := topics[r.Topic]
		if tv == nil {
			continue
		}
		j, ok := slices.BinarySearchFunc(tv.sorted, r.Partition, func(pv *partView, p int32) int { return cmp.Compare(pv.p.Partition, p) })
		if !ok {
			continue
		}
		pv := tv.sorted[j]
		if pv.probes == nil {
			pv.probes = map[probeAt]*RecordProbe{}
		}
		pv.probes[probeAt{r.Offset, r.Isolation.OrDefault() == ReadCommitted}] = r
	}

	seenGT := map[gtKey]bool{}
	if len(obs.Groups) > 0 { // sized once, not grown by append (up to 25 % unused); none stays nil, as before
		snap.Groups = make([]GroupLag, 0, len(obs.Groups))
	}
	for i := range obs.Groups {
		g := &obs.Groups[i]
		if !e.cfg.GroupAllowed(g.Group) {
			continue
		}
		gl := e.evalGroup(g, topics, now, seq)
		for _, t := range gl.Topics {
			seenGT[gtKey{gl.Group, t.Topic}] = true
		}
		snap.Groups = append(snap.Groups, gl)
	}
	e.lags = nil // the rest of the last chunk: the next snapshot's groups take a new one
	slices.SortFunc(snap.Groups, func(a, b GroupLag) int { return cmp.Compare(a.Group, b.Group) })

	// Forget what this observation no longer has: deleted groups, revoked or deleted partitions, old incarnations.
	for name, gs := range e.groups { // deleted groups; a group's revoked or deleted partitions went in evalGroup
		if gs.seen != seq {
			delete(e.groups, name)
		}
	}
	for k, st := range e.topics {
		if st.seen != seq {
			delete(e.topics, k)
		}
	}
	for k := range e.unreadDeleted {
		if !seenGT[k] {
			delete(e.unreadDeleted, k)
		}
	}
	return snap
}

func (e *Evaluator) recordHW(st *tpState, now time.Time, hw int64) {
	h := st.history
	if n := len(h); n > 0 && hw <= h[n-1].hw {
		if hw < h[n-1].hw { // truncation: the history no longer describes this log
			st.history = append(h[:0], hwPoint{now, hw})
		}
		return
	}
	if len(h) >= e.cfg.HistorySize {
		copy(h, h[1:])
		h = h[:len(h)-1]
	}
	st.history = append(h, hwPoint{now, hw})
}

// estimateAppendTime returns the earliest history time at which the high watermark already covered offset, i.e. a
// time at or after the record at offset was appended, so now − that time is at most one poll interval short of the
// true time lag. bracketed is false when the first history point already covered the offset (the record is older
// than the history: the estimate is only a lower bound). ok is false when the history never covered it.
func estimateAppendTime(h []hwPoint, offset int64) (t time.Time, bracketed, ok bool) {
	i, _ := slices.BinarySearchFunc(h, offset+1, func(p hwPoint, target int64) int { return cmp.Compare(p.hw, target) })
	if i == len(h) {
		return time.Time{}, false, false
	}
	return h[i].t, i > 0, true
}

func (e *Evaluator) evalGroup(g *GroupObservation, topics map[string]*topicView, now time.Time, seq uint64) GroupLag {
	iso, reset := e.cfg.GroupSettingsOf(g)
	out := GroupLag{Group: g.Group, GroupType: g.Type(), State: g.State, Isolation: iso, Members: g.Members,
		Epoch: g.Epoch, AssignmentEpoch: g.AssignmentEpoch, Error: g.Error}
	gs := e.groups[g.Group]
	if gs == nil {
		gs = &groupState{}
		e.groups[g.Group] = gs
	}
	gs.seen = seq
	src, stale, readAt := g, false, now
	if g.Error != "" {
		if !gs.read {
			out.Partitions, out.Topics = []PartitionLag{}, []TopicLag{}
			gs.parts, gs.topics = nil, nil
			return out
		}
		var last GroupObservation
		last, e.lastOffs = gs.last(e.lastOffs)
		src, stale, readAt = &last, true, gs.readAt
		if out.State == "" {
			out.State, out.Members = gs.obs.State, gs.obs.Members
		}
	} else {
		gs.keep(g)
		gs.read, gs.readAt = true, now
	}

	// Committed offsets in (topic, partition) order (the Kafka reader sorts them; a timeline may not), the last one
	// winning for a partition listed twice; the scope is their topics and the members' assigned topics.
	offs := src.Offsets
	if !slices.IsSortedFunc(offs, cmpOffset) {
		e.offs = append(e.offs[:0], offs...)
		slices.SortStableFunc(e.offs, cmpOffset)
		offs = e.offs
	}
	names := e.names[:0]
	for i := range offs {
		if t := offs[i].Topic; (len(names) == 0 || names[len(names)-1] != t) && topics[t] != nil {
			names = append(names, t)
		}
	}
	// a member's target assignment (KIP-848, streams) puts a partition in scope before its first commit
	for i := range out.Members {
		for t := range memberTopics(&out.Members[i]) {
			if topics[t] != nil { // deleted or denied topics are out of scope
				names = append(names, t)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	e.names = names

	gc := groupCtx{group: g.Group, iso: iso, reset: reset, hasMembers: len(out.Members) > 0, stale: stale,
		readAt: readAt, assignment: stableAssignment(out.State, out.Members), share: g.Type() == GroupShare, gs: gs}
	if !stale {
		gs.push(now.UnixNano(), e.cfg.Status.Window) // the time of every sample this cycle adds
	}
	var lastCommit time.Time
	n := 0
	for _, topic := range names {
		n += len(topics[topic].sorted)
	}
	out.Partitions, out.Topics = e.partitionLags(n), make([]TopicLag, 0, len(names))
	walk := newStateWalk(gs, e.cfg.Status.Window, n, e.runs)
	oi := 0 // next unread committed offset
	for _, topic := range names {
		tv := topics[topic]
		tl := TopicLag{Topic: topic}
		var streams *StreamsTopic // one per group-topic, shared by its partitions
		if sm, ok := src.Streams[topic]; ok {
			tl.Subtopology, tl.Internal = sm.Subtopology, sm.Internal
			streams = &sm
		}
		for _, pv := range tv.sorted {
			pn := pv.p.Partition
			var c CommittedOffset
			has := false
			for oi < len(offs) && cmpTP(offs[oi].Topic, offs[oi].Partition, topic, pn) <= 0 {
				if offs[oi].Topic == topic && offs[oi].Partition == pn {
					c, has = offs[oi], true
				}
				oi++
			}
			st := walk.state(topic, pn, tv.obs.ID)
			pl := e.evalPartition(&gc, st, tv.obs, pv, c, has, now)
			pl.streams = streams
			if pl.HasCommit && pl.CommitTime.After(lastCommit) {
				lastCommit = pl.CommitTime
			}
			if !pl.Flags.Has(FlagUnassigned) {
				out.Status = max(out.Status, pl.Status)
				out.Replaying = out.Replaying || pl.Flags.Has(FlagReplay)
			}
			tl.Add(&pl)
			out.Total.Add(&pl)
			out.Partitions = append(out.Partitions, pl)
		}
		tl.UnreadRecordsDeleted = e.unreadDeleted[gtKey{g.Group, topic}]
		out.Total.UnreadRecordsDeleted += tl.UnreadRecordsDeleted
		tl.Complete = tl.Unknown == 0
		out.Topics = append(out.Topics, tl)
	}
	e.runs = walk.done(gs)
	out.Total.Complete = out.Total.Unknown == 0
	out.CatchUp = groupCatchUp(out.Partitions)
	// only commits can come from clients outside the group; a share group's start offset moves only with members
	out.SimpleConsumer = !gc.share && !gc.hasMembers && !lastCommit.IsZero() && now.Sub(lastCommit) < e.cfg.Status.SimpleConsumerWindow
	return out
}

func cmpTP(t1 string, p1 int32, t2 string, p2 int32) int {
	if c := cmp.Compare(t1, t2); c != 0 {
		return c
	}
	return cmp.Compare(p1, p2)
}

func cmpOffset(a, b CommittedOffset) int { return cmpTP(a.Topic, a.Partition, b.Topic, b.Partition) }

// lastPerPartition keeps, of partitions sorted (stably) by number, the last of each run with the same number.
func lastPerPartition(ps []*partView) []*partView {
	out := ps[:0]
	for i, pv := range ps {
		if i+1 < len(ps) && ps[i+1].p.Partition == pv.p.Partition {
			continue
		}
		out = append(out, pv)
	}
	return out
}

// stateWalk hands out a group's partition states in (topic, partition) order from last cycle's, sorted the same
// way. While the group's partitions are those of last cycle, states are used in place; from the first difference on
// the walk builds a new slice, carrying over by merge the states that still exist (and dropping the others: revoked
// or deleted partitions). A new state's ring comes from one allocation for the rest of the group.
type stateWalk struct {
	old        []gpState
	oldK, oldJ runCursor  // the topics of old, at k and at j
	runs       []topicRun // the topics of the states handed out
	k          int        // states handed out
	j          int        // next old state to consider once rebuilding
	rebuilt    []gpState  // nil while in place
	slab       []ringSample
	window     int
	n          int // partitions this cycle
}

// newStateWalk walks gs's states for n partitions this cycle; scratch is reused for the topics handed out.
func newStateWalk(gs *groupState, window, n int, scratch []topicRun) stateWalk {
	return stateWalk{old: gs.parts, oldK: runCursor{runs: gs.topics}, oldJ: runCursor{runs: gs.topics},
		runs: scratch[:0], window: window, n: n}
}

func (w *stateWalk) state(topic string, p int32, topicID string) *gpState {
	if n := len(w.runs); n == 0 || w.runs[n-1].name != topic {
		w.runs = append(w.runs, topicRun{name: topic, id: topicID})
	}
	w.runs[len(w.runs)-1].end = int32(w.k + 1)
	if w.rebuilt == nil && w.k < len(w.old) && w.old[w.k].partition == p {
		if t := w.oldK.at(w.k); t.name == topic {
			st := &w.old[w.k]
			w.k++
			w.fresh(st, t.id, topicID)
			return st
		}
	}
	if w.rebuilt == nil {
		w.rebuilt = make([]gpState, w.k, max(w.n, w.k+1))
		copy(w.rebuilt, w.old[:w.k])
		w.j = w.k
	}
	for w.j < len(w.old) && cmpTP(w.oldJ.at(w.j).name, w.old[w.j].partition, topic, p) < 0 {
		w.j++
	}
	var st gpState
	var oldID string
	if w.j < len(w.old) && w.old[w.j].partition == p && w.oldJ.at(w.j).name == topic {
		st, oldID = w.old[w.j], w.oldJ.at(w.j).id
		w.j++
	} else {
		st = gpState{partition: p}
	}
	w.rebuilt = append(w.rebuilt, st)
	w.k++
	ps := &w.rebuilt[len(w.rebuilt)-1]
	w.fresh(ps, oldID, topicID)
	return ps
}

// fresh gives st (last of topic incarnation oldID) a ring, and resets it for a new topic incarnation (as a new
// partition).
func (w *stateWalk) fresh(st *gpState, oldID, topicID string) {
	if st.ring != nil && oldID == topicID {
		return
	}
	*st = gpState{partition: st.partition}
	if len(w.slab) < w.window {
		w.slab = make([]ringSample, w.window*max(w.n-w.k+1, 1))
	}
	st.ring, w.slab = w.slab[:w.window:w.window], w.slab[w.window:]
}

// done leaves the group's states and their topics in gs for the next cycle, and returns the walk's scratch.
func (w *stateWalk) done(gs *groupState) []topicRun {
	if w.rebuilt != nil {
		gs.parts = w.rebuilt
	} else {
		clear(w.old[w.k:]) // partitions gone from the end
		gs.parts = w.old[:w.k]
	}
	if !slices.Equal(w.runs, gs.topics) {
		gs.topics = slices.Clone(w.runs)
	}
	return w.runs[:0]
}

// groupCtx is what every partition of one group is evaluated with.
type groupCtx struct {
	group      string
	iso        Isolation
	reset      Reset
	hasMembers bool
	stale      bool      // the group's commits could not be read this cycle: the last ones are used
	readAt     time.Time // when the commits used were read
	assignment *assignment
	share      bool // a share group (KIP-932): positions are share-partition start offsets
	gs         *groupState
}

// missed is called when st adds no sample this cycle: if its group took one (the commits were read), st's samples
// no longer have the group's newest times, and it keeps its own from now on.
func (gc *groupCtx) missed(st *gpState) {
	if !gc.stale && st.own == nil && st.samples() > 0 {
		st.detach(gc.gs, 1) // the group's newest time is this cycle's, which st has no sample of
	}
}

// assignment is a Stable group's current assignment, when its members' assignments are known.
type assignment struct {
	parts  map[tpKey]bool
	topics map[string]bool
}

// stableAssignment returns the union of the members' assignments of a Stable group, or nil when the group is not
// Stable (a rebalance is under way) or no member's assignment is known (a protocol whose assignment is not decoded).
func stableAssignment(state string, members []Member) *assignment {
	if state != "Stable" {
		return nil
	}
	a := &assignment{parts: map[tpKey]bool{}, topics: map[string]bool{}}
	for _, m := range members {
		for t, ps := range m.Assignment {
			for _, p := range ps {
				a.parts[tpKey{t, p}] = true
				a.topics[t] = true
			}
		}
	}
	if len(a.parts) == 0 {
		return nil
	}
	return a
}

// unassigned reports whether a Stable group will never consume topic/partition: no member is assigned it, and either
// it has a commit nobody renewed within the simple-consumer window (stale commits, Burrow #854), or it has no commit
// and the group consumes no partition of its topic (a topic the group stopped subscribing to). A partition without a
// commit on a subscribed topic is waiting for its assignment (new partitions, case C10) and stays counted.
func (gc *groupCtx) unassigned(topic string, partition int32, has bool, commitTime, now time.Time, window time.Duration) bool {
	a := gc.assignment
	if a == nil || a.parts[tpKey{topic, partition}] {
		return false
	}
	if has {
		return now.Sub(commitTime) >= window
	}
	return !a.topics[topic]
}

// groupCatchUp folds the partitions' estimates: not draining if any lagging partition is not, unknown if any is
// unknown, else the largest ETA (the group is caught up when its last partition is). Unassigned, stale and unknown
// partitions do not count.
func groupCatchUp(parts []PartitionLag) CatchUp {
	out := CatchUp{State: CatchUpCaughtUp}
	var varSum float32
	for i := range parts {
		p := &parts[i]
		if !p.Known || p.Flags.Has(FlagUnassigned) || p.Flags.Has(FlagStale) {
			continue
		}
		c := p.CatchUp
		out.DrainRate += c.DrainRate
		varSum += c.RateError * c.RateError
		switch {
		case c.State == CatchUpNotDraining || out.State == CatchUpNotDraining:
			out.State = CatchUpNotDraining
		case c.State == CatchUpUnknown || out.State == CatchUpUnknown:
			out.State = CatchUpUnknown
		case c.State == CatchUpDraining:
			out.State, out.ETA = CatchUpDraining, max(out.ETA, c.ETA)
		}
	}
	out.RateError = float32(math.Sqrt(float64(varSum)))
	if out.State != CatchUpDraining {
		out.ETA = 0
	}
	return out
}

func (e *Evaluator) evalPartition(gc *groupCtx, st *gpState, t *TopicObservation, pv *partView, c CommittedOffset,
	has bool, now time.Time) PartitionLag {
	known := pv.p.Known()
	st.observeCommit(pv, known, c, has, now)
	in := PartitionInput{HasCommit: has, Committed: c.Offset, OffsetsKnown: known, LogStart: pv.p.LogStart,
		HighWatermark: pv.p.HighWatermark, LastStable: pv.p.LastStable, Isolation: gc.iso, Reset: gc.reset, Now: now,
		Share: gc.share, ShareLag: c.ShareLag}
	if in.OffsetsKnown {
		in.Probe = pv.probes[probeAt{in.Start(), gc.iso == ReadCommitted}]
	}
	pl := ComputeLag(in)
	pl.Topic, pl.Partition = t.Topic, pv.p.Partition
	if has {
		pl.CommitTime = st.commitTime
	}
	stale := e.flagPartition(gc, st, pv, in, &pl, has, now)
	if !pl.Known {
		gc.missed(st)
		return pl // unknown lag: no sample, status from nothing
	}
	pl.Retention = ComputeRetentionMargin(t.Retention, pv.p.LogStart, pv.p.HighWatermark, in.Start(), pv.p.SizeBytes,
		pl.Lag, pl.TimeLag, pl.TimeLagKnown)
	if stale {
		gc.missed(st)
		pl.Status = st.lastStatus // the last values are shown; nothing new is learnt about the group's progress
		return pl
	}

	if pl.Flags.Has(FlagAheadOfEnd) {
		st.aheadReads++
	} else {
		st.aheadReads = 0
	}
	e.countUnreadDeleted(st, gtKey{gc.group, t.Topic}, has, c.Offset, pv.p.LogStart)
	st.pushSample(pl.Lag, c.Offset, has, now)
	w := e.statusWindow(gc, st)
	si := StatusInput{Window: w, Now: now, LastCommit: st.commitTime, TimeLag: pl.TimeLag, TimeLagKnown: pl.TimeLagKnown,
		Replay: st.replay.Active, HasMembers: gc.hasMembers, AheadReads: int(st.aheadReads), Share: gc.share}
	if st.replay.Active {
		// the backlog the group never received: past the pre-rewind offset, aged from the end-offset history
		liveStart := max(in.Start(), st.replay.Boundary)
		si.LiveLag = max(0, in.End()-liveStart)
		if si.LiveLag > 0 {
			if t, _, ok := estimateAppendTime(pv.st.history, liveStart); ok {
				si.LiveTimeLag, si.LiveTimeLagKnown = max(0, now.Sub(t)), true
			}
		}
	}
	pl.Status = EvaluateStatus(si, e.cfg.Status)
	st.lastStatus = pl.Status
	pl.CatchUp = EstimateCatchUp(w)
	return pl
}

// observeCommit keeps the commit bookkeeping of one cycle: the replay state (C30, NextReplay) and the time of the
// last commit change (Burrow's STOP rule reads it). has is false when the group has no commit on the partition.
func (st *gpState) observeCommit(pv *partView, known bool, c CommittedOffset, has bool, now time.Time) {
	if !has {
		st.hasCommit, st.replay, st.commitTime = false, ReplayState{}, time.Time{}
		return
	}
	prev := st.replayFrom
	if known {
		// offsets past an end offset that fell no longer exist: a commit falling with the end (a consumer reset
		// after a truncation) is not a rewind, and a replay cannot wait for offsets above the new end
		prev = min(prev, pv.p.HighWatermark)
		if st.replay.Active {
			st.replay.Boundary = min(st.replay.Boundary, pv.p.HighWatermark)
		}
	}
	st.replay = NextReplay(st.replay, prev, st.hasCommit, c.Offset)
	st.replayFrom = c.Offset
	if known {
		st.replayFrom = min(c.Offset, pv.p.HighWatermark)
	}
	switch {
	case !c.CommitTime.IsZero():
		st.commitTime = c.CommitTime
	case !st.hasCommit || st.committed != c.Offset:
		st.commitTime = now
	}
	st.committed, st.hasCommit = c.Offset, true
}

// flagPartition sets pl's flags that come from the cycle rather than the offsets (stale, end offset decreased,
// replay, unassigned) and, for a backlog whose first unconsumed record could not be read, an estimated time lag
// from the end-offset history. It reports whether the partition's reads are stale.
func (e *Evaluator) flagPartition(gc *groupCtx, st *gpState, pv *partView, in PartitionInput, pl *PartitionLag, has bool,
	now time.Time) bool {
	stale := pv.stale || gc.stale
	if stale {
		pl.Flags |= FlagStale
		readAt := gc.readAt
		if pv.stale && pv.st.lastRead.Before(readAt) {
			readAt = pv.st.lastRead
		}
		if r := pl.rareFor(int64(now.Sub(readAt))); r != nil {
			r.staleFor = now.Sub(readAt)
		}
	}
	if pv.endDecreased {
		pl.Flags |= FlagEndOffsetDecreased
	}
	if pl.Known && pl.Lag > 0 && !pl.TimeLagKnown {
		// With a future record timestamp only a positive estimate is kept: a lower bound of 0 for a partition with
		// backlog would read as "caught up" (the 0 the future_timestamp flag exists to avoid).
		if t, bracketed, ok := estimateAppendTime(pv.st.history, in.Start()); ok && (t.Before(now) || !pl.Flags.Has(FlagFutureTimestamp)) {
			pl.TimeLag, pl.TimeLagKnown = max(0, now.Sub(t)), true
			pl.Flags |= FlagEstimated
			if !bracketed {
				pl.Flags |= FlagLowerBound // appended before the history starts: only "at least this old"
			}
		}
	}
	if st.replay.Active {
		pl.Flags |= FlagReplay
		if r := pl.rareFor(st.replay.Boundary); r != nil {
			r.replayBoundary = st.replay.Boundary
		}
	}
	if gc.unassigned(pl.Topic, pv.p.Partition, has, st.commitTime, now, e.cfg.Status.SimpleConsumerWindow) {
		pl.Flags |= FlagUnassigned
	}
	return stale
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

// statusWindow returns the partition's samples oldest first, in the evaluator's reused buffer (valid until the next
// call), timed by the ring's own clock or the group's cycle times.
func (e *Evaluator) statusWindow(gc *groupCtx, st *gpState) []Sample {
	w := e.window[:0]
	size := len(st.ring)
	for age := st.samples() - 1; age >= 0; age-- { // oldest first
		i := (int(st.next) - 1 - age + 2*size) % size
		r := st.ring[i]
		at := int64(0)
		if st.own != nil {
			at = (*st.own)[i]
		} else {
			at = gc.gs.timeAt(age)
		}
		w = append(w, Sample{Committed: max(r.committed, 0), HasCommit: r.committed >= 0, Lag: r.lag, At: time.Unix(0, at)})
	}
	e.window = w
	return w
}

// countUnreadDeleted adds to the group-topic's counter the records deleted below the group's committed offset since
// the last read: [committed, log start) minus what an earlier read already counted. The first read of a partition
// counts nothing (those deletions happened before the evaluator watched; the expired gauge shows them).
func (e *Evaluator) countUnreadDeleted(st *gpState, k gtKey, has bool, committed, logStart int64) {
	if has && st.deletedSeen && committed < logStart {
		if n := logStart - max(committed, st.deletedThrough); n > 0 {
			e.unreadDeleted[k] += n
		}
	}
	st.deletedThrough = max(st.deletedThrough, logStart)
	st.deletedSeen = true
}
