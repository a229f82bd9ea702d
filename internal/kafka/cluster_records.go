package kafka

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
	pending := map[tp][]int{} // request indexes per partition, by ascending offset
	for _, i := range idx {
		k := tp{reqs[i].Topic, reqs[i].Partition}
		pending[k] = append(pending[k], i)
	}
	for _, l := range pending {
		sort.Slice(l, func(a, b int) bool { return reqs[l[a]].Offset < reqs[l[b]].Offset })
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
			fr.AddBlock(k.topic, k.partition, reqs[l[0]].Offset, c.FetchPartitionBytes, -1)
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
				if n == 0 || reqs[i].Offset <= covered {
					out[i] = probeBatches(reqs[i], batches, blk.AbortedTransactions)
					continue
				}
				rest = append(rest, i)
			}
			if len(rest) == 0 {
				delete(pending, k)
			} else {
				pending[k] = rest
			}
		}
	}
	for _, l := range pending {
		for _, i := range l {
			out[i].Error = "not fetched this cycle (fetch round limit)"
		}
	}
	return nil
}

// probeBatches finds, in record batches fetched from r.Offset (in offset order), the first consumable record at or
// after r.Offset and the first valid timestamp from there, the way a consumer with r.Isolation would see them:
// control batches (transaction markers) are never delivered; for read_committed, data batches of a producer inside an
// aborted transaction (from the Fetch response's aborted list, until that producer's marker) are skipped. Offsets
// missing inside or between batches before the first consumable record are compaction gaps. A pure function.
func probeBatches(r lagexporter.RecordRequest, batches []*sarama.RecordBatch, aborted []*sarama.AbortedTransaction) lagexporter.RecordProbe {
	p := lagexporter.RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
		Isolation: r.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: r.Offset}
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
		}
		switch {
		case b.Control:
			delete(active, b.ProducerID) // the marker ends the producer's transaction
		case b.IsTransactional && active[b.ProducerID]:
			// aborted data: a read_committed consumer never receives it
		default:
			for _, rec := range b.Records {
				off := b.FirstOffset + rec.OffsetDelta
				if off < pos {
					continue
				}
				if p.FirstOffset < 0 {
					if off > max(pos, b.FirstOffset) {
						p.Gap = true
					}
					p.FirstOffset = off
				}
				ts := b.FirstTimestamp.Add(rec.TimestampDelta)
				if b.LogAppendTime {
					ts = b.MaxTimestamp
				}
				if b.FirstTimestamp.IsZero() && !b.LogAppendTime || !lagexporter.ValidRecordTimestamp(ts) {
					continue // NO_TIMESTAMP (-1): keep looking for a valid stamp
				}
				p.TimestampOffset, p.Timestamp = off, ts
				p.ScannedTo = last + 1
				return p
			}
		}
		pos = last + 1
		p.ScannedTo = pos
		if pos >= r.End {
			break
		}
	}
	p.ScannedTo = min(p.ScannedTo, max(r.End, r.Offset))
	if p.FirstOffset < 0 && p.ScannedTo < r.End {
		p.Gap = false // nothing known beyond what was fetched
	}
	return p
}
