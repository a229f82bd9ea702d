package lagread

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

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

// fetchProbes answers the requests idx of reqs, whose partitions broker id leads, into out, with up to
// maxFetchRounds Fetch requests at isolation level iso (see probeFetch). A partition the broker answers with an
// error, and a request still unanswered after the last round, get their error in out. It returns the broker's error
// (unreachable, the Fetch failed) or ctx's; ReadRecords then fails every request of the call.
func (c *ClusterReader) fetchProbes(ctx context.Context, id int32, iso lagexporter.Isolation, reqs []lagexporter.RecordRequest,
	idx []int, out []lagexporter.RecordProbe) error {
	b, err := c.broker(id)
	if err != nil {
		return err
	}
	f := newProbeFetch(c, reqs, idx, out)
	for round := 0; round < maxFetchRounds && len(f.pending) > 0; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.requests.Add(1)
		resp, err := b.Fetch(f.request(iso))
		if err != nil {
			_ = b.Close()
			return fmt.Errorf("fetch record timestamps of %d partitions: %w", len(f.pending), err)
		}
		for k, l := range f.pending {
			f.answer(k, l, resp.GetBlock(k.topic, k.partition))
		}
	}
	f.giveUp()
	return nil
}

// probeFetch is the state of one fetchProbes call: which requests still wait, per partition, and where each one's
// scan continues. Each round fetches every pending partition from its lowest waiting offset; the answer settles the
// requests its batches cover, and moves on those whose scan found no valid timestamp yet.
type probeFetch struct {
	c    *ClusterReader
	reqs []lagexporter.RecordRequest
	out  []lagexporter.RecordProbe
	// from is where each request's scan continues: its offset, or where the last round's bytes ended when they held
	// no valid timestamp yet (Kafka answers a Fetch from one segment, and a record stamped far apart from the
	// segment's first rolls a new one: the next record is a fetch away); partial keeps such an unfinished answer.
	from    map[int]int64
	partial map[int]lagexporter.RecordProbe
	pending map[tp][]int // request indexes per partition, by ascending from
}

// newProbeFetch starts the requests idx of reqs, each at its own offset.
func newProbeFetch(c *ClusterReader, reqs []lagexporter.RecordRequest, idx []int, out []lagexporter.RecordProbe) *probeFetch {
	f := &probeFetch{c: c, reqs: reqs, out: out, from: make(map[int]int64, len(idx)),
		partial: map[int]lagexporter.RecordProbe{}, pending: map[tp][]int{}}
	for _, i := range idx {
		k := tp{reqs[i].Topic, reqs[i].Partition}
		f.pending[k] = append(f.pending[k], i)
		f.from[i] = reqs[i].Offset
	}
	for _, l := range f.pending {
		f.byFrom(l)
	}
	return f
}

// byFrom sorts request indexes by where their scans continue, keeping the order of equal ones.
func (f *probeFetch) byFrom(l []int) {
	sort.SliceStable(l, func(a, b int) bool { return f.from[l[a]] < f.from[l[b]] })
}

// request is the next round's Fetch: every pending partition from its lowest waiting offset, FetchPartitionBytes
// each, without waiting for data (MaxWaitTime 0).
func (f *probeFetch) request(iso lagexporter.Isolation) *sarama.FetchRequest {
	fr := &sarama.FetchRequest{Version: 11, MaxWaitTime: 0, MinBytes: 0, MaxBytes: 64 << 20, SessionEpoch: -1}
	if iso == lagexporter.ReadCommitted {
		fr.Isolation = sarama.ReadCommitted
	}
	for k, l := range f.pending {
		fr.AddBlock(k.topic, k.partition, f.from[l[0]], f.c.FetchPartitionBytes, -1)
	}
	return fr
}

// answer settles, from partition k's block of a Fetch response, its pending requests l (ascending from): a missing
// block or a partition error fails them all; else the first request is always answered (even by an empty fetch),
// the others when the returned batches cover their offset. What stays unanswered waits for the next round.
func (f *probeFetch) answer(k tp, l []int, blk *sarama.FetchResponseBlock) {
	if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) {
		msg := "partition missing from Fetch response"
		if blk != nil {
			msg = blk.Err.Error()
		}
		for _, i := range l {
			f.out[i].Error = msg
		}
		delete(f.pending, k)
		return
	}
	batches, covered := fetchedBatches(blk)
	rest := l[:0]
	for n, i := range l {
		if (n > 0 && f.from[i] > covered) || !f.scan(k, i, batches, blk.AbortedTransactions) {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 {
		delete(f.pending, k)
		return
	}
	f.byFrom(rest)
	f.pending[k] = rest
}

// fetchedBatches returns the record batches of a Fetch response block and the last offset they cover (-1: none).
func fetchedBatches(blk *sarama.FetchResponseBlock) ([]*sarama.RecordBatch, int64) {
	var batches []*sarama.RecordBatch
	covered := int64(-1)
	for _, rs := range blk.RecordsSet {
		if rs != nil && rs.RecordBatch != nil {
			batches = append(batches, rs.RecordBatch)
			covered = max(covered, rs.RecordBatch.FirstOffset+int64(rs.RecordBatch.LastOffsetDelta))
		}
	}
	return batches, covered
}

// scan scans request i of partition k in batches from where its scan continues and reports whether it is answered.
// A scan that made progress without finding a valid timestamp before the request's end is kept in partial and not
// answered: the next round continues it. An answer with a LogAppendTime gets the broker that led the batch's
// partition leader epoch as its AppendClock.
func (f *probeFetch) scan(k tp, i int, batches []*sarama.RecordBatch, aborted []*sarama.AbortedTransaction) bool {
	rq := f.reqs[i]
	rq.Offset = f.from[i]
	p, epoch := scanBatches(rq, batches, aborted)
	if prev, ok := f.partial[i]; ok {
		p = continueProbe(prev, p)
	}
	if p.TimestampOffset < 0 && p.ScannedTo > f.from[i] && p.ScannedTo < f.reqs[i].End {
		f.partial[i], f.from[i] = p, p.ScannedTo // progress, not done: scan on next round
		return false
	}
	delete(f.partial, i)
	f.out[i] = finishProbe(p, f.reqs[i].End)
	if f.out[i].AppendClock != nil {
		f.c.mu.Lock()
		f.out[i].AppendClock.Broker = f.c.epochs.leaderOf(k, epoch)
		f.c.mu.Unlock()
	}
	return true
}

// giveUp settles the requests still pending after the last round: an unfinished scan is answered with what was
// scanned (asked again next cycle), the others fail for this cycle.
func (f *probeFetch) giveUp() {
	for _, l := range f.pending {
		for _, i := range l {
			if p, ok := f.partial[i]; ok {
				f.out[i] = finishProbe(p, f.reqs[i].End) // what was scanned: an unfinished answer, asked again next cycle
				continue
			}
			f.out[i].Error = "not fetched this cycle (fetch round limit)"
		}
	}
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
	s := newBatchScan(r, aborted)
	for _, b := range batches {
		last := b.FirstOffset + int64(b.LastOffsetDelta)
		if r.Isolation == lagexporter.ReadCommitted {
			s.openAborted(last)
		}
		if last < s.pos {
			continue
		}
		if b.FirstOffset > s.pos && s.p.FirstOffset < 0 {
			s.p.Gap = true // offsets [pos, batch start) were removed
			s.p.GapOffsets += min(b.FirstOffset, max(r.End, r.Offset)) - s.pos
		}
		switch {
		case b.Control:
			delete(s.active, b.ProducerID) // the marker ends the producer's transaction
		case b.IsTransactional && s.active[b.ProducerID]:
			// aborted data: a read_committed consumer never receives it
		default:
			if e, found := s.scanData(b, last); found {
				return s.p, e
			}
		}
		s.pos = last + 1
		s.p.ScannedTo = s.pos
		if s.pos >= r.End {
			break
		}
	}
	return s.p, -1
}

// batchScan is scanBatches' state: the probe being built, the aborted transactions that have not begun yet (by
// first offset), the producers whose aborted transaction is open, and the next offset to account for.
type batchScan struct {
	r       lagexporter.RecordRequest
	p       lagexporter.RecordProbe
	aborted []*sarama.AbortedTransaction
	active  map[int64]bool
	pos     int64
}

// newBatchScan starts a scan at r.Offset; aborted is the Fetch response's aborted list (nil entries ignored).
func newBatchScan(r lagexporter.RecordRequest, aborted []*sarama.AbortedTransaction) *batchScan {
	ab := make([]*sarama.AbortedTransaction, 0, len(aborted))
	for _, a := range aborted {
		if a != nil {
			ab = append(ab, a)
		}
	}
	sort.Slice(ab, func(i, j int) bool { return ab[i].FirstOffset < ab[j].FirstOffset })
	return &batchScan{r: r, aborted: ab, active: map[int64]bool{}, pos: r.Offset,
		p: lagexporter.RecordProbe{Topic: r.Topic, TopicID: r.TopicID, Partition: r.Partition, Offset: r.Offset,
			Isolation: r.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: r.Offset}}
}

// openAborted marks the producers of the aborted transactions that begin at or before last (a batch's last offset)
// as inside an aborted transaction, until their marker.
func (s *batchScan) openAborted(last int64) {
	for len(s.aborted) > 0 && s.aborted[0].FirstOffset <= last {
		s.active[s.aborted[0].ProducerID] = true
		s.aborted = s.aborted[1:]
	}
}

// scanData scans a data batch a consumer receives, whose last offset is last, from s.pos: it records the first
// consumable record and the compaction gaps before it, counts invalid timestamps (C27), and reports whether a valid
// timestamp was found (then s.p holds it, and epoch is the batch's partition leader epoch when it is a
// LogAppendTime, else -1).
func (s *batchScan) scanData(b *sarama.RecordBatch, last int64) (epoch int32, found bool) {
	from := max(s.pos, b.FirstOffset) // the batch's first offset still to account for
	for _, rec := range b.Records {
		off := b.FirstOffset + rec.OffsetDelta
		if off < s.pos {
			continue
		}
		if s.p.FirstOffset < 0 {
			if off > from {
				s.p.Gap = true // compaction removed records inside the batch
				s.p.GapOffsets += off - from
			}
			s.p.FirstOffset = off
		}
		ts, problem := recordTimestamp(b, rec)
		switch problem {
		case lagexporter.TimestampMissing:
			s.p.MissingTimestamps++ // keep looking for a valid stamp (C27)
			continue
		case lagexporter.TimestampWrongUnit:
			s.p.WrongUnitTimestamps++
			continue
		}
		s.p.TimestampOffset, s.p.Timestamp = off, ts
		s.p.ScannedTo = last + 1
		if b.LogAppendTime {
			s.p.AppendClock = &lagexporter.AppendClock{Broker: -1}
			return b.PartitionLeaderEpoch, true
		}
		return -1, true
	}
	if s.p.FirstOffset < 0 && last+1 > from {
		s.p.Gap = true // a data batch compaction emptied (its offsets are kept, its records are not)
		s.p.GapOffsets += min(last+1, max(s.r.End, s.r.Offset)) - from
	}
	return -1, false
}

// recordTimestamp is rec's timestamp as a consumer reads it (the batch's MaxTimestamp on a LogAppendTime batch) and
// what is wrong with it, if anything (lagexporter.ClassifyRecordTimestamp); NO_TIMESTAMP (-1) decodes as the zero
// time, so a CreateTime batch without a first timestamp is missing one.
func recordTimestamp(b *sarama.RecordBatch, rec *sarama.Record) (time.Time, lagexporter.TimestampProblem) {
	ts := b.FirstTimestamp.Add(rec.TimestampDelta)
	if b.LogAppendTime {
		ts = b.MaxTimestamp
	}
	problem := lagexporter.ClassifyRecordTimestamp(ts)
	if b.FirstTimestamp.IsZero() && !b.LogAppendTime {
		problem = lagexporter.TimestampMissing
	}
	return ts, problem
}
