package lagexporter

import (
	"cmp"
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

// NewEvaluator returns an Evaluator for cfg, which must have passed Validate.
func NewEvaluator(cfg *Config) *Evaluator {
	return &Evaluator{cfg: cfg, topics: map[tpKey]*tpState{},
		groups: map[string]*groupState{}, endDecreases: map[string]uint64{}, unreadDeleted: map[gtKey]int64{}}
}

type gtKey struct{ group, topic string }

type tpKey struct {
	topic     string
	partition int32
}

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
//
// Its steps, in order: the partitions' views of this cycle (viewTopics), the end-offset decrease counters
// (countEndDecreases), the record reads handed to their partitions (attachRecords), every allowed group
// (evalGroups), and last the state of what the observation no longer has (forget).
func (e *Evaluator) Apply(obs *Observation) *Snapshot {
	e.seq++
	seq, now := e.seq, obs.Time
	snap := &Snapshot{Cluster: e.cfg.Cluster, Time: now, Seq: seq, Errors: slices.Clone(obs.Errors)}
	// the maps are made here, not returned by the steps, so that they stay off the heap
	topics := make(map[string]*topicView, len(obs.Topics))
	e.viewTopics(obs, snap, topics, seq, now)
	e.countEndDecreases(topics, snap)
	attachRecords(topics, obs.Records)
	seenGT := map[gtKey]bool{}
	e.evalGroups(obs, topics, snap, seenGT, seq, now)
	e.forget(seq, seenGT)
	return snap
}

// viewTopics puts into topics this cycle's view of every allowed topic, keyed by name, and appends to snap.Topics
// the topics with the partition offsets read this cycle, sorted by name.
func (e *Evaluator) viewTopics(obs *Observation, snap *Snapshot, topics map[string]*topicView, seq uint64, now time.Time) {
	for i := range obs.Topics {
		t := &obs.Topics[i]
		if !e.cfg.TopicAllowed(t.Topic) {
			continue
		}
		tv := &topicView{obs: t, sorted: make([]*partView, 0, len(t.Partitions))}
		snapTopic := TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType, Retention: t.Retention,
			Partitions: make([]PartitionObservation, 0, len(t.Partitions))}
		for _, p := range t.Partitions {
			tv.sorted = append(tv.sorted, e.viewPartition(t, p, seq, now))
			// partition offsets are published as read this cycle: an unreadable partition has no offset series
			snapTopic.Partitions = append(snapTopic.Partitions, p)
		}
		slices.SortStableFunc(tv.sorted, func(a, b *partView) int { return cmp.Compare(a.p.Partition, b.p.Partition) })
		tv.sorted = lastPerPartition(tv.sorted) // a partition listed twice counts once (the last), as a map had it
		topics[t.Topic] = tv
		snap.Topics = append(snap.Topics, snapTopic)
	}
	slices.SortFunc(snap.Topics, func(a, b TopicObservation) int { return cmp.Compare(a.Topic, b.Topic) })
}

// viewPartition returns partition p of topic t as this cycle evaluates it, and updates its state: a new partition
// or topic incarnation starts a new state; known offsets become the last known ones (and extend the high-watermark
// history), an end offset read lower than before is counted and flagged; unknown offsets of a partition read before
// in this incarnation are replaced by the last known ones, flagged stale.
func (e *Evaluator) viewPartition(t *TopicObservation, p PartitionObservation, seq uint64, now time.Time) *partView {
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
	return pv
}

// countEndDecreases drops the end-offset decrease counters of topics no longer viewed and puts every viewed topic's
// counter (0 when it never decreased) into snap.
func (e *Evaluator) countEndDecreases(topics map[string]*topicView, snap *Snapshot) {
	for name := range e.endDecreases {
		if topics[name] == nil {
			delete(e.endDecreases, name)
		}
	}
	snap.EndOffsetDecreases = make(map[string]uint64, len(topics))
	for name := range topics {
		snap.EndOffsetDecreases[name] = e.endDecreases[name]
	}
}

// attachRecords hands each record read to its partition's view, keyed by offset and isolation: a small map per
// partition with an integer key, not one map of (topic, partition, offset, isolation) probed once per
// group-partition. Reads of topics or partitions not viewed this cycle are ignored.
func attachRecords(topics map[string]*topicView, records []RecordProbe) {
	for i := range records {
		r := &records[i]
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
}

// evalGroups evaluates every allowed group of obs into snap.Groups, sorted by name, and puts into seenGT the
// (group, topic) pairs the groups were evaluated on.
func (e *Evaluator) evalGroups(obs *Observation, topics map[string]*topicView, snap *Snapshot, seenGT map[gtKey]bool,
	seq uint64, now time.Time) {
	if len(obs.Groups) > 0 { // sized once, not grown by append (up to 25 % unused); none stays nil
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
}

// forget drops the state of what cycle seq's observation no longer has: deleted groups, partitions and old topic
// incarnations, and the unread-deleted counters of (group, topic) pairs not evaluated (seenGT). A group's revoked or
// deleted partitions were dropped by its state walk (evalGroup).
func (e *Evaluator) forget(seq uint64, seenGT map[gtKey]bool) {
	for name, gs := range e.groups {
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
}

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
