package lagexporter

import (
	"cmp"
	"slices"
	"time"
)

// Evaluator turns a sequence of Observations into Snapshots. It holds the state that spans cycles: each
// group-partition's status window, commit-change time and replay state, each partition's last known offsets (for
// stale values when a read fails) and high-watermark history (for the interpolation fallback). State of groups,
// partitions and topic incarnations that disappear from an observation is dropped in that same cycle, so their series
// disappear (case C15).
//
// An Evaluator is not safe for concurrent use; the Loop owns one.
type Evaluator struct {
	cfg    *Config
	parts  map[gpKey]*gpState
	topics map[tpKey]*tpState
	groups map[string]*GroupObservation // last successfully read group (for stale values)
	seq    uint64
	window []Sample // scratch, reused
}

type gpKey struct {
	group, topic string
	partition    int32
}

type tpKey struct {
	topic     string
	partition int32
}

type gpState struct {
	topicID    string
	ring       []ringSample // fixed capacity cfg.Status.Window; oldest at next when full
	next       int
	full       bool
	committed  int64
	hasCommit  bool
	commitTime time.Time
	replay     ReplayState
	seen       uint64 // seq of the last cycle that saw it
}

// ringSample is a Sample stored compactly (100,000 partitions × a 10-sample window): committed < 0 means no commit.
// The representation is private to the ring; Sample, which the rules read, has an explicit HasCommit.
type ringSample struct{ committed, lag int64 }

type tpState struct {
	topicID string
	last    PartitionObservation // last known offsets
	history []hwPoint            // ascending time, HW strictly increasing
	seen    uint64
}

type hwPoint struct {
	t  time.Time
	hw int64
}

// NewEvaluator returns an Evaluator for cfg, which must have passed Validate.
func NewEvaluator(cfg *Config) *Evaluator {
	return &Evaluator{cfg: cfg, parts: map[gpKey]*gpState{}, topics: map[tpKey]*tpState{},
		groups: map[string]*GroupObservation{}}
}

type topicView struct {
	obs   *TopicObservation
	parts map[int32]*partView
}

type partView struct {
	p     PartitionObservation // this cycle's or, when stale, the last known values
	stale bool
	st    *tpState
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
		tv := &topicView{obs: t, parts: make(map[int32]*partView, len(t.Partitions))}
		snapTopic := TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType,
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
				st.last = p
				e.recordHW(st, now, p.HighWatermark)
			} else if len(st.history) > 0 { // read before in this incarnation: lag from the last values, flagged stale
				pv.p, pv.stale = st.last, true
				pv.p.Leader = p.Leader
			}
			tv.parts[p.Partition] = pv
			// partition offsets are published as read this cycle: an unreadable partition has no offset series
			snapTopic.Partitions = append(snapTopic.Partitions, p)
		}
		topics[t.Topic] = tv
		snap.Topics = append(snap.Topics, snapTopic)
	}
	slices.SortFunc(snap.Topics, func(a, b TopicObservation) int { return cmp.Compare(a.Topic, b.Topic) })

	probes := make(map[probeKey]*RecordProbe, len(obs.Records))
	for i := range obs.Records {
		r := &obs.Records[i]
		probes[probeKey{r.Topic, r.Partition, r.Offset, r.Isolation.OrDefault()}] = r
	}

	for i := range obs.Groups {
		g := &obs.Groups[i]
		if !e.cfg.GroupAllowed(g.Group) {
			continue
		}
		snap.Groups = append(snap.Groups, e.evalGroup(g, topics, probes, now, seq))
	}
	slices.SortFunc(snap.Groups, func(a, b GroupLag) int { return cmp.Compare(a.Group, b.Group) })

	// Forget what this observation no longer has: deleted groups, revoked or deleted partitions, old incarnations.
	for k, st := range e.parts {
		if st.seen != seq {
			delete(e.parts, k)
		}
	}
	for k, st := range e.topics {
		if st.seen != seq {
			delete(e.topics, k)
		}
	}
	for name := range e.groups {
		if snap.Group(name) == nil {
			delete(e.groups, name)
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

func (e *Evaluator) evalGroup(g *GroupObservation, topics map[string]*topicView, probes map[probeKey]*RecordProbe,
	now time.Time, seq uint64) GroupLag {
	iso, reset := e.cfg.GroupSettings(g.Group)
	out := GroupLag{Group: g.Group, State: g.State, Isolation: iso, Members: g.Members, Error: g.Error}
	src, stale := g, false
	if g.Error != "" {
		prev := e.groups[g.Group]
		if prev == nil {
			out.Partitions, out.Topics = []PartitionLag{}, []TopicLag{}
			return out
		}
		src, stale = prev, true
		if out.State == "" {
			out.State, out.Members = prev.State, prev.Members
		}
	} else {
		cp := *g
		e.groups[g.Group] = &cp
	}

	committed := make(map[tpKey]CommittedOffset, len(src.Offsets))
	scope := map[string]bool{}
	for _, c := range src.Offsets {
		committed[tpKey{c.Topic, c.Partition}] = c
		scope[c.Topic] = true
	}
	for _, m := range out.Members {
		for t := range m.Assignment {
			scope[t] = true
		}
	}
	names := make([]string, 0, len(scope))
	for t := range scope {
		if topics[t] != nil { // deleted or denied topics are out of scope
			names = append(names, t)
		}
	}
	slices.Sort(names)

	hasMembers := len(out.Members) > 0
	var lastCommit time.Time
	n := 0
	for _, topic := range names {
		n += len(topics[topic].parts)
	}
	out.Partitions, out.Topics = make([]PartitionLag, 0, n), make([]TopicLag, 0, len(names))
	for _, topic := range names {
		tv := topics[topic]
		pnums := make([]int32, 0, len(tv.parts))
		for p := range tv.parts {
			pnums = append(pnums, p)
		}
		slices.Sort(pnums)
		tl := TopicLag{Topic: topic}
		for _, pn := range pnums {
			pv := tv.parts[pn]
			c, has := committed[tpKey{topic, pn}]
			pl := e.evalPartition(g.Group, topic, tv.obs.ID, pv, c, has, iso, reset, probes, now, seq, hasMembers)
			if stale {
				pl.Flags |= FlagStale
			}
			pl.FlagText = pl.Flags.String()
			if pl.HasCommit && pl.CommitTime.After(lastCommit) {
				lastCommit = pl.CommitTime
			}
			out.Status = max(out.Status, pl.Status)
			tl.Add(&pl)
			out.Total.Add(&pl)
			out.Partitions = append(out.Partitions, pl)
		}
		out.Topics = append(out.Topics, tl)
	}
	out.SimpleConsumer = !hasMembers && !lastCommit.IsZero() && now.Sub(lastCommit) < e.cfg.Status.SimpleConsumerWindow
	return out
}

func (e *Evaluator) evalPartition(group, topic, topicID string, pv *partView, c CommittedOffset, has bool,
	iso Isolation, reset Reset, probes map[probeKey]*RecordProbe, now time.Time, seq uint64, hasMembers bool) PartitionLag {
	key := gpKey{group, topic, pv.p.Partition}
	st := e.parts[key]
	if st == nil || st.topicID != topicID {
		st = &gpState{topicID: topicID, ring: make([]ringSample, e.cfg.Status.Window)}
		e.parts[key] = st
	}
	st.seen = seq

	// Commit bookkeeping: replay (C30) and the time of the last commit change (STOP rule).
	if has {
		st.replay = NextReplay(st.replay, st.committed, st.hasCommit, c.Offset)
		switch {
		case !c.CommitTime.IsZero():
			st.commitTime = c.CommitTime
		case !st.hasCommit || st.committed != c.Offset:
			st.commitTime = now
		}
		st.committed, st.hasCommit = c.Offset, true
	} else {
		st.hasCommit, st.replay, st.commitTime = false, ReplayState{}, time.Time{}
	}

	in := PartitionInput{HasCommit: has, Committed: c.Offset, OffsetsKnown: pv.p.Known(), LogStart: pv.p.LogStart,
		HighWatermark: pv.p.HighWatermark, LastStable: pv.p.LastStable, Isolation: iso, Reset: reset, Now: now}
	if in.OffsetsKnown {
		in.Probe = probes[probeKey{topic, pv.p.Partition, in.Start(), iso}]
	}
	pl := ComputeLag(in)
	pl.Topic, pl.Partition = topic, pv.p.Partition
	if has {
		pl.CommitTime = st.commitTime
	}
	if pv.stale {
		pl.Flags |= FlagStale
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
		pl.ReplayBoundary = st.replay.Boundary
	}
	if !pl.Known {
		return pl // unknown lag: no sample, status from nothing
	}

	rs := ringSample{committed: -1, lag: pl.Lag}
	if has {
		rs.committed = c.Offset
	}
	st.ring[st.next] = rs
	st.next++
	if st.next == len(st.ring) {
		st.next, st.full = 0, true
	}
	w := e.window[:0]
	add := func(rs []ringSample) {
		for _, r := range rs {
			w = append(w, Sample{Committed: max(r.committed, 0), HasCommit: r.committed >= 0, Lag: r.lag})
		}
	}
	if st.full {
		add(st.ring[st.next:])
	}
	add(st.ring[:st.next])
	e.window = w
	pl.Status = EvaluateStatus(StatusInput{Window: w, Now: now, LastCommit: st.commitTime, TimeLag: pl.TimeLag,
		TimeLagKnown: pl.TimeLagKnown, Replay: st.replay.Active, HasMembers: hasMembers}, e.cfg.Status)
	return pl
}
