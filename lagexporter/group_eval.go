package lagexporter

import (
	"cmp"
	"math"
	"slices"
	"time"
)

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

// evalGroup evaluates group g against this cycle's topic views. Its steps: the commits to use (commitSource: this
// cycle's, or the last successful read's, flagged stale), those commits in (topic, partition) order
// (sortedOffsets), the topics in scope (scopeTopics), every partition of them with its state of the last cycle
// (evalScope), and the group's own aggregates.
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
	var last GroupObservation // the last successful read, when this cycle's failed
	src, stale, readAt, ok := e.commitSource(g, gs, &out, &last, now)
	if !ok {
		return out
	}
	offs := e.sortedOffsets(src.Offsets)
	names := e.scopeTopics(offs, out.Members, topics)
	gc := groupCtx{group: g.Group, iso: iso, reset: reset, hasMembers: len(out.Members) > 0, stale: stale,
		readAt: readAt, assignment: stableAssignment(out.State, out.Members), share: g.Type() == GroupShare, gs: gs}
	if !stale {
		gs.push(now.UnixNano(), e.cfg.Status.Window) // the time of every sample this cycle adds
	}
	lastCommit := e.evalScope(&gc, &out, src.Streams, offs, names, topics, now)
	out.Total.Complete = out.Total.Unknown == 0
	out.CatchUp = groupCatchUp(out.Partitions)
	// only commits can come from clients outside the group; a share group's start offset moves only with members
	out.SimpleConsumer = !gc.share && !gc.hasMembers && !lastCommit.IsZero() && now.Sub(lastCommit) < e.cfg.Status.SimpleConsumerWindow
	return out
}

// commitSource returns the observation whose commits group g is evaluated from. When g's commits were read, that is
// g, kept in gs for the cycles whose reads fail. When they failed, it is the last successful read, stale, with
// readAt its observation time, put into last; out then shows that read's state and members if g has no state. ok
// is false when g's commits were never read: out then has no partitions, and gs no partition states.
func (e *Evaluator) commitSource(g *GroupObservation, gs *groupState, out *GroupLag, last *GroupObservation,
	now time.Time) (src *GroupObservation, stale bool, readAt time.Time, ok bool) {
	if g.Error == "" {
		gs.keep(g)
		gs.read, gs.readAt = true, now
		return g, false, now, true
	}
	if !gs.read {
		out.Partitions, out.Topics = []PartitionLag{}, []TopicLag{}
		gs.parts, gs.topics = nil, nil
		return nil, false, time.Time{}, false
	}
	*last, e.lastOffs = gs.last(e.lastOffs)
	if out.State == "" {
		out.State, out.Members = gs.obs.State, gs.obs.Members
	}
	return last, true, gs.readAt, true
}

// sortedOffsets returns a group's committed offsets in (topic, partition) order: offs itself when it is (the Kafka
// reader sorts them; a timeline may not), else a stable sort in the evaluator's scratch, so that of a partition
// listed twice the last commit is the one the commit walk finds.
func (e *Evaluator) sortedOffsets(offs []CommittedOffset) []CommittedOffset {
	if slices.IsSortedFunc(offs, cmpOffset) {
		return offs
	}
	e.offs = append(e.offs[:0], offs...)
	slices.SortStableFunc(e.offs, cmpOffset)
	return e.offs
}

// scopeTopics returns, sorted and each once, the topics a group is evaluated on: the topics of its commits offs
// (sorted) and of its members' assignments and target assignments, as far as they are viewed this cycle (deleted
// or denied topics are out of scope). The slice is the evaluator's scratch, valid until the next group.
func (e *Evaluator) scopeTopics(offs []CommittedOffset, members []Member, topics map[string]*topicView) []string {
	names := e.names[:0]
	for i := range offs {
		if t := offs[i].Topic; (len(names) == 0 || names[len(names)-1] != t) && topics[t] != nil {
			names = append(names, t)
		}
	}
	// a member's target assignment (KIP-848, streams) puts a partition in scope before its first commit
	for i := range members {
		for t := range memberTopics(&members[i]) {
			if topics[t] != nil {
				names = append(names, t)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	e.names = names
	return names
}

// evalScope evaluates every partition of the topics names in (topic, partition) order into out's partitions, topic
// aggregates and total, with the group's commits offs (sorted) and streams topics, and each partition's state of
// the last cycle; it leaves the states in gc.gs for the next cycle. It returns the latest commit time of the
// partitions with a commit (zero when there is none).
func (e *Evaluator) evalScope(gc *groupCtx, out *GroupLag, streams map[string]StreamsTopic, offs []CommittedOffset,
	names []string, topics map[string]*topicView, now time.Time) time.Time {
	n := 0
	for _, topic := range names {
		n += len(topics[topic].sorted)
	}
	out.Partitions, out.Topics = e.partitionLags(n), make([]TopicLag, 0, len(names))
	walk := newStateWalk(gc.gs, e.cfg.Status.Window, n, e.runs)
	commits := commitCursor{offs: offs}
	var lastCommit time.Time
	for _, topic := range names {
		tv := topics[topic]
		tl := TopicLag{Topic: topic}
		var stream *StreamsTopic // one per group-topic, shared by its partitions
		if sm, ok := streams[topic]; ok {
			tl.Subtopology, tl.Internal = sm.Subtopology, sm.Internal
			stream = &sm
		}
		for _, pv := range tv.sorted {
			c, has := commits.find(topic, pv.p.Partition)
			pl := e.evalPartition(gc, walk.state(topic, pv.p.Partition, tv.obs.ID), tv.obs, pv, c, has, now)
			pl.streams = stream
			if pl.HasCommit && pl.CommitTime.After(lastCommit) {
				lastCommit = pl.CommitTime
			}
			out.addPartition(&tl, &pl)
		}
		tl.UnreadRecordsDeleted = e.unreadDeleted[gtKey{gc.group, topic}]
		out.Total.UnreadRecordsDeleted += tl.UnreadRecordsDeleted
		tl.Complete = tl.Unknown == 0
		out.Topics = append(out.Topics, tl)
	}
	e.runs = walk.done(gc.gs)
	return lastCommit
}

// addPartition appends pl to the group's partitions and adds it to its topic's aggregate tl and the group's total.
// An unassigned partition does not count in the group's status and replaying: the group will never consume it.
func (g *GroupLag) addPartition(tl *TopicLag, pl *PartitionLag) {
	if !pl.Flags.Has(FlagUnassigned) {
		g.Status = max(g.Status, pl.Status)
		g.Replaying = g.Replaying || pl.Flags.Has(FlagReplay)
	}
	tl.Add(pl)
	g.Total.Add(pl)
	g.Partitions = append(g.Partitions, *pl)
}

// commitCursor finds a group's commit on each partition, asked in (topic, partition) order, by walking the group's
// commits sorted the same way alongside: no map per group. Of a partition listed twice, the last commit is found.
type commitCursor struct {
	offs []CommittedOffset
	i    int // next unread commit
}

// find returns the commit on topic/partition and whether there is one, passing over the commits before it.
func (c *commitCursor) find(topic string, partition int32) (CommittedOffset, bool) {
	var out CommittedOffset
	has := false
	for c.i < len(c.offs) && cmpTP(c.offs[c.i].Topic, c.offs[c.i].Partition, topic, partition) <= 0 {
		if c.offs[c.i].Topic == topic && c.offs[c.i].Partition == partition {
			out, has = c.offs[c.i], true
		}
		c.i++
	}
	return out, has
}

func cmpTP(t1 string, p1 int32, t2 string, p2 int32) int {
	if c := cmp.Compare(t1, t2); c != 0 {
		return c
	}
	return cmp.Compare(p1, p2)
}

func cmpOffset(a, b CommittedOffset) int { return cmpTP(a.Topic, a.Partition, b.Topic, b.Partition) }

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
