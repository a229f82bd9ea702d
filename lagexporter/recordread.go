package lagexporter

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// readRecords asks for the first unconsumed record of every lagging group-partition whose answer is not cached, and
// puts every answer the evaluator needs (cached or new) into obs.Records. It returns the invalid timestamps the new
// answers met (cached answers were counted when they were read).
func (l *Loop) readRecords(ctx context.Context, obs *Observation) map[TimestampProblem]uint64 {
	l.probeSeq++
	seq := l.probeSeq
	reqs, unfinished := l.recordRequests(obs, seq)
	invalid := map[TimestampProblem]uint64{}
	if len(reqs) > 0 {
		got, err := l.cluster.ReadRecords(ctx, reqs)
		obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindRecords)...)
		l.absorbRecords(got, unfinished, seq, obs.Time, invalid)
	}
	obs.Records = l.cycleRecords(seq, obs.Time)
	return invalid
}

// recordRequests walks every group's partitions with a backlog and returns the reads this cycle needs: one per
// (topic incarnation, partition, first unconsumed offset, isolation) that the cache cannot answer, each marked in
// the cache as used in cycle seq. unfinished holds last cycle's answers that are asked again (no valid timestamp
// yet), so that their timestamp problems are counted once.
func (l *Loop) recordRequests(obs *Observation, seq uint32) ([]RecordRequest, map[cacheKey]RecordProbe) {
	byTopic := make(map[string]*TopicObservation, len(obs.Topics)) // partitions in order (the reader's order)
	for i := range obs.Topics {
		t := &obs.Topics[i]
		if !slices.IsSortedFunc(t.Partitions, cmpPartition) {
			cp := *t
			cp.Partitions = slices.Clone(t.Partitions)
			slices.SortStableFunc(cp.Partitions, cmpPartition)
			t = &cp
		}
		byTopic[t.Topic] = t
	}
	unfinished := map[cacheKey]RecordProbe{}
	var reqs []RecordRequest
	var offs []CommittedOffset
	var names []string
	for gi := range obs.Groups {
		g := &obs.Groups[gi]
		if g.Error != "" {
			continue
		}
		iso, reset := l.cfg.GroupSettingsOf(g)
		// the group's commits in (topic, partition) order, walked alongside its partitions (no map per group)
		offs = g.Offsets
		if !slices.IsSortedFunc(offs, cmpOffset) {
			offs = slices.Clone(offs)
			slices.SortStableFunc(offs, cmpOffset)
		}
		names = scopeNames(names[:0], g)
		commits := commitCursor{offs: offs}
		for _, topic := range names {
			t := byTopic[topic]
			if t == nil {
				continue
			}
			for _, p := range t.Partitions {
				if !p.Known() {
					continue
				}
				c, has := commits.find(topic, p.Partition)
				in := PartitionInput{HasCommit: has, Committed: c.Offset, OffsetsKnown: true, LogStart: p.LogStart,
					HighWatermark: p.HighWatermark, LastStable: p.LastStable, Isolation: iso, Reset: reset}
				if req, ok := l.recordRequest(t, p.Partition, in, seq, unfinished); ok {
					reqs = append(reqs, req)
				}
			}
		}
	}
	return reqs, unfinished
}

func cmpPartition(a, b PartitionObservation) int { return cmp.Compare(a.Partition, b.Partition) }

// recordRequest decides one partition's read for a group waiting at in.Start(): none when nothing is unconsumed,
// when another group already asked for the same offset this cycle, or when the cache holds a final answer (a valid
// timestamp, or a scan that reached the end); else the read, with a placeholder in the cache.
func (l *Loop) recordRequest(t *TopicObservation, partition int32, in PartitionInput, seq uint32,
	unfinished map[cacheKey]RecordProbe) (RecordRequest, bool) {
	start, end := in.Start(), in.End()
	if start >= end {
		return RecordRequest{}, false
	}
	k := probeCacheKey(t.ID, t.Topic, partition, start, in.Isolation)
	e, ok := l.cachedAt(k)
	if ok && e.used == seq {
		return RecordRequest{}, false // another group waits at the same offset
	}
	if ok {
		if e.firstOffset >= 0 && e.timestampOffset >= 0 || e.scannedTo >= end {
			e.used = seq
			l.setCached(k, e)
			return RecordRequest{}, false
		}
		unfinished[k] = l.cached(k, &e)
		if e.flags&probeWide != 0 {
			delete(l.wide, k)
		}
	}
	l.setCached(k, cachedProbe{used: seq}) // placeholder, replaced by the answer
	return RecordRequest{Topic: t.Topic, TopicID: t.ID, Partition: partition, Offset: start, End: end,
		Isolation: in.Isolation}, true
}

// absorbRecords puts the reads' answers into the cache for cycle seq and adds to invalid the timestamp problems they
// found (for an answer read again, only the stamps it got further to).
func (l *Loop) absorbRecords(got []RecordProbe, unfinished map[cacheKey]RecordProbe, seq uint32, now time.Time,
	invalid map[TimestampProblem]uint64) {
	for _, r := range got {
		k := probeCacheKey(r.TopicID, r.Topic, r.Partition, r.Offset, r.Isolation)
		if e, ok := l.cachedAt(k); ok {
			l.dropCached(k, &e) // a placeholder, or an answer given twice (the last one counts)
		}
		if r.Error != "" {
			continue
		}
		e, exact := packProbe(k, &r, seq)
		if !exact { // the offsets stay in e too: the next call decides on them whether to ask again
			e.flags |= probeWide
			l.wide[k] = r
		}
		l.setCached(k, e)
		prev := unfinished[k]
		invalid[TimestampMissing] += uint64(max(r.MissingTimestamps-prev.MissingTimestamps, 0))
		invalid[TimestampWrongUnit] += uint64(max(r.WrongUnitTimestamps-prev.WrongUnitTimestamps, 0))
		if r.TimestampOffset >= 0 && ValidRecordTimestamp(r.Timestamp) && r.Timestamp.After(now) {
			invalid[TimestampFuture]++
		}
	}
}

// cycleRecords returns the answers cycle seq used, their append clocks read afresh, and drops every other entry of
// the cache (not needed this cycle, or never answered).
func (l *Loop) cycleRecords(seq uint32, now time.Time) []RecordProbe {
	n := 0
	for _, m := range l.cache {
		n += len(m)
	}
	out := make([]RecordProbe, 0, n)
	for t, m := range l.cache {
		for s, e := range m {
			k := cacheKey{t, s}
			if e.used != seq || e.flags&probeAnswered == 0 { // not needed this cycle, or no answer
				l.dropCached(k, &e)
				continue
			}
			out = append(out, l.refreshed(l.cached(k, &e), now))
		}
		if len(m) == 0 {
			delete(l.cache, t)
		}
	}
	return out
}

// refreshed is a cached answer with its AppendClock's offset read afresh (when the loop has clocks).
func (l *Loop) refreshed(rp RecordProbe, now time.Time) RecordProbe {
	if rp.AppendClock != nil && l.clocks != nil {
		// The offset is read afresh every cycle (a cached answer says only whose clock it was), and recorded
		// with the observation so that lag eval, which has no clocks, sees what this cycle saw.
		c := AppendClock{Broker: rp.AppendClock.Broker}
		if c.Broker >= 0 {
			c.Offset, c.Uncertainty, c.Known = l.clocks(c.Broker, now)
		}
		rp.AppendClock = &c
	}
	return rp
}
