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
