package lagexporter

import "time"

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
