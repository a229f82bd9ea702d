package lagread

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

// ReadRecords answers every request with one Fetch per (leader, isolation level): a few KiB from the requested
// offset, decoded into the first consumable record and its timestamp (see probeBatches). The loop caches the answers
// by topic incarnation and offset, so a group that does not move costs no further fetch.
func (c *ClusterReader) ReadRecords(ctx context.Context, reqs []lagexporter.RecordRequest) ([]lagexporter.RecordProbe, error) {
	type key struct {
		leader int32
		iso    lagexporter.Isolation
	}
	groups := map[key][]int{}
	out := make([]lagexporter.RecordProbe, len(reqs))
	var errs lagexporter.CycleErrors
	c.mu.Lock()
	for i, r := range reqs {
		out[i] = lagexporter.RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
			Isolation: r.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: r.Offset}
		leader, ok := c.leaders[tp{r.Topic, r.Partition}]
		if !ok || leader < 0 {
			out[i].Error = "no leader"
			continue
		}
		k := key{leader, r.Isolation}
		groups[k] = append(groups[k], i)
	}
	c.mu.Unlock()
	keys := make([]key, 0, len(groups))
	ids := map[int32]bool{}
	for k := range groups {
		keys = append(keys, k)
		ids[k.leader] = true
	}
	leaderIDs := make([]int32, 0, len(ids))
	for id := range ids {
		leaderIDs = append(leaderIDs, id)
	}
	res := perBroker(leaderIDs, func(id int32) lagexporter.CycleErrors {
		var errs lagexporter.CycleErrors
		for _, k := range keys {
			if k.leader != id {
				continue
			}
			if err := c.fetchProbes(ctx, id, k.iso, reqs, groups[k], out); err != nil {
				for _, i := range groups[k] {
					out[i].Error = err.Error()
				}
				errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindRecords, Subject: brokerSubject(id), Message: err.Error()})
			}
		}
		return errs
	})
	for _, id := range leaderIDs {
		errs = append(errs, res[id]...)
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// maxFetchRounds bounds the Fetch requests per (leader, isolation) in one ReadRecords call. A Fetch can carry one
// offset per partition, so when several groups wait at different offsets of one partition, the lowest is fetched
// first and every other request the returned batches cover is answered from the same bytes; offsets beyond them
// need another round. Requests left after the last round fail for this cycle (the loop falls back to interpolation
// and asks again next cycle; answers are cached, so the backlog drains).
const maxFetchRounds = 3

func (c *ClusterReader) fetchProbes(ctx context.Context, id int32, iso lagexporter.Isolation, reqs []lagexporter.RecordRequest,
	idx []int, out []lagexporter.RecordProbe) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	// from is where each request's scan continues: its offset, or where the last round's bytes ended when they held
	// no valid timestamp yet (Kafka answers a Fetch from one segment, and a record stamped far apart from the
	// segment's first rolls a new one: the next record is a fetch away); partial keeps such an unfinished answer.
	from := make(map[int]int64, len(idx))
	partial := map[int]lagexporter.RecordProbe{}
	pending := map[tp][]int{} // request indexes per partition, by ascending from
	for _, i := range idx {
		k := tp{reqs[i].Topic, reqs[i].Partition}
		pending[k] = append(pending[k], i)
		from[i] = reqs[i].Offset
	}
	byFrom := func(l []int) { sort.SliceStable(l, func(a, b int) bool { return from[l[a]] < from[l[b]] }) }
	for _, l := range pending {
		byFrom(l)
	}
	for round := 0; round < maxFetchRounds && len(pending) > 0; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		fr := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 0, MaxBytes: 64 << 20, SessionEpoch: -1}
		if iso == lagexporter.ReadCommitted {
			fr.Isolation = sarama.ReadCommitted
		}
		for k, l := range pending {
			fr.AddBlock(k.topic, k.partition, from[l[0]], c.FetchPartitionBytes, -1)
		}
		c.requests.Add(1)
		resp, err := b.Fetch(fr)
		if err != nil {
			_ = b.Close()
			return fmt.Errorf("fetch record timestamps of %d partitions: %w", len(pending), err)
		}
		for k, l := range pending {
			blk := resp.GetBlock(k.topic, k.partition)
			if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
				msg := "partition missing from Fetch response"
				if blk != nil {
					msg = blk.Err.Error()
				}
				for _, i := range l {
					out[i].Error = msg
				}
				delete(pending, k)
				continue
			}
			var batches []*sarama.RecordBatch
			covered := int64(-1) // last offset the returned batches cover
			for _, rs := range blk.RecordsSet {
				if rs != nil && rs.RecordBatch != nil {
					batches = append(batches, rs.RecordBatch)
					covered = max(covered, rs.RecordBatch.FirstOffset+int64(rs.RecordBatch.LastOffsetDelta))
				}
			}
			rest := l[:0]
			for n, i := range l {
				// the first request is always answered (even by an empty fetch); the others when covered
				if n > 0 && from[i] > covered {
					rest = append(rest, i)
					continue
				}
				rq := reqs[i]
				rq.Offset = from[i]
				p, epoch := scanBatches(rq, batches, blk.AbortedTransactions)
				if prev, ok := partial[i]; ok {
					p = continueProbe(prev, p)
				}
				if p.TimestampOffset < 0 && p.ScannedTo > from[i] && p.ScannedTo < reqs[i].End {
					partial[i], from[i] = p, p.ScannedTo // progress, not done: scan on next round
					rest = append(rest, i)
					continue
				}
				delete(partial, i)
				out[i] = finishProbe(p, reqs[i].End)
				if out[i].AppendClock != nil {
					c.mu.Lock()
					out[i].AppendClock.Broker = c.epochs.leaderOf(k, epoch)
					c.mu.Unlock()
				}
			}
			if len(rest) == 0 {
				delete(pending, k)
			} else {
				byFrom(rest)
				pending[k] = rest
			}
		}
	}
	for _, l := range pending {
		for _, i := range l {
			if p, ok := partial[i]; ok {
				out[i] = finishProbe(p, reqs[i].End) // what was scanned: an unfinished answer, asked again next cycle
				continue
			}
			out[i].Error = "not fetched this cycle (fetch round limit)"
		}
	}
	return nil
}

// continueProbe merges the scan continued at prev.ScannedTo into prev, the scan up to there (both from scanBatches).
// A pure function.
func continueProbe(prev, next lagexporter.RecordProbe) lagexporter.RecordProbe {
	out := prev
	out.ScannedTo = next.ScannedTo
	out.MissingTimestamps += next.MissingTimestamps
	out.WrongUnitTimestamps += next.WrongUnitTimestamps
	out.TimestampOffset, out.Timestamp, out.AppendClock = next.TimestampOffset, next.Timestamp, next.AppendClock
	if prev.FirstOffset < 0 {
		out.FirstOffset = next.FirstOffset
		out.Gap = prev.Gap || next.Gap
		out.GapOffsets += next.GapOffsets
	}
	return out
}

// probeBatches is scanBatches with the answer finished (finishProbe).
func probeBatches(r lagexporter.RecordRequest, batches []*sarama.RecordBatch, aborted []*sarama.AbortedTransaction) (lagexporter.RecordProbe, int32) {
	p, epoch := scanBatches(r, batches, aborted)
	return finishProbe(p, r.End), epoch
}

// finishProbe clamps the scanned range to the request's end and, when no consumable record was found in a scan that
// stopped short of the end, claims no gap: nothing is known beyond what was fetched.
func finishProbe(p lagexporter.RecordProbe, end int64) lagexporter.RecordProbe {
	p.ScannedTo = min(p.ScannedTo, max(end, p.Offset))
	if p.FirstOffset < 0 && p.ScannedTo < end {
		p.Gap, p.GapOffsets = false, 0
	}
	return p
}

// scanBatches finds, in record batches fetched from r.Offset (in offset order), the first consumable record at or
// after r.Offset and the first valid timestamp from there, the way a consumer with r.Isolation would see them:
// control batches (transaction markers) are never delivered; for read_committed, data batches of a producer inside an
// aborted transaction (from the Fetch response's aborted list, until that producer's marker) are skipped. Offsets
// missing inside or between batches before the first consumable record are compaction gaps. When the timestamp found
// is a LogAppendTime, the probe's AppendClock is set (Broker -1, to be resolved by the caller) and epoch is the
// partition leader epoch of the batch that carries it: its leader's clock stamped it (-1 otherwise). A pure function.
func scanBatches(r lagexporter.RecordRequest, batches []*sarama.RecordBatch, aborted []*sarama.AbortedTransaction) (p lagexporter.RecordProbe, epoch int32) {
	p = lagexporter.RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
		Isolation: r.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: r.Offset}
	epoch = -1
	ab := make([]*sarama.AbortedTransaction, 0, len(aborted))
	for _, a := range aborted {
		if a != nil {
			ab = append(ab, a)
		}
	}
	sort.Slice(ab, func(i, j int) bool { return ab[i].FirstOffset < ab[j].FirstOffset })
	active := map[int64]bool{}
	pos := r.Offset
	for _, b := range batches {
		last := b.FirstOffset + int64(b.LastOffsetDelta)
		if r.Isolation == lagexporter.ReadCommitted {
			for len(ab) > 0 && ab[0].FirstOffset <= last {
				active[ab[0].ProducerID] = true
				ab = ab[1:]
			}
		}
		if last < pos {
			continue
		}
		if b.FirstOffset > pos && p.FirstOffset < 0 {
			p.Gap = true // offsets [pos, batch start) were removed
			p.GapOffsets += min(b.FirstOffset, max(r.End, r.Offset)) - pos
		}
		switch {
		case b.Control:
			delete(active, b.ProducerID) // the marker ends the producer's transaction
		case b.IsTransactional && active[b.ProducerID]:
			// aborted data: a read_committed consumer never receives it
		default:
			from := max(pos, b.FirstOffset) // the batch's first offset still to account for
			for _, rec := range b.Records {
				off := b.FirstOffset + rec.OffsetDelta
				if off < pos {
					continue
				}
				if p.FirstOffset < 0 {
					if off > from {
						p.Gap = true // compaction removed records inside the batch
						p.GapOffsets += off - from
					}
					p.FirstOffset = off
				}
				ts := b.FirstTimestamp.Add(rec.TimestampDelta)
				if b.LogAppendTime {
					ts = b.MaxTimestamp
				}
				problem := lagexporter.ClassifyRecordTimestamp(ts)
				if b.FirstTimestamp.IsZero() && !b.LogAppendTime {
					problem = lagexporter.TimestampMissing // NO_TIMESTAMP (-1) decodes as the zero time
				}
				switch problem {
				case lagexporter.TimestampMissing:
					p.MissingTimestamps++ // keep looking for a valid stamp (C27)
					continue
				case lagexporter.TimestampWrongUnit:
					p.WrongUnitTimestamps++
					continue
				}
				p.TimestampOffset, p.Timestamp = off, ts
				p.ScannedTo = last + 1
				if b.LogAppendTime {
					p.AppendClock, epoch = &lagexporter.AppendClock{Broker: -1}, b.PartitionLeaderEpoch
				}
				return p, epoch
			}
			if p.FirstOffset < 0 && last+1 > from {
				p.Gap = true // a data batch compaction emptied (its offsets are kept, its records are not)
				p.GapOffsets += min(last+1, max(r.End, r.Offset)) - from
			}
		}
		pos = last + 1
		p.ScannedTo = pos
		if pos >= r.End {
			break
		}
	}
	return p, epoch
}
