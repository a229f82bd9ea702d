package lagread

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// data returns a batch of n records from first, one second apart, optionally transactional for producer pid.
func data(first int64, n int, pid int64, tx bool) *sarama.RecordBatch {
	b := &sarama.RecordBatch{FirstOffset: first, LastOffsetDelta: int32(n - 1), FirstTimestamp: t0.Add(time.Duration(first) * time.Second),
		ProducerID: pid, IsTransactional: tx}
	for i := range n {
		b.Records = append(b.Records, &sarama.Record{OffsetDelta: int64(i), TimestampDelta: time.Duration(i) * time.Second})
	}
	return b
}

func marker(off, pid int64) *sarama.RecordBatch {
	return &sarama.RecordBatch{FirstOffset: off, Control: true, IsTransactional: true, ProducerID: pid,
		FirstTimestamp: t0, Records: []*sarama.Record{{}}}
}

func TestProbeBatches(t *testing.T) {
	rc, ru := lagexporter.ReadCommitted, lagexporter.ReadUncommitted
	tests := []struct {
		name         string
		req          lagexporter.RecordRequest
		batches      []*sarama.RecordBatch
		aborted      []*sarama.AbortedTransaction
		first, tsOff int64
		scanned      int64
		gap          bool
		gapOffsets   int64 // compacted offsets before the first record
	}{
		// C01: data 0..4 of T1, COMMIT marker at 5, HW 6; from 5 there is nothing to consume up to End.
		{"C01 marker at the tail", lagexporter.RecordRequest{Offset: 5, End: 6, Isolation: rc},
			[]*sarama.RecordBatch{marker(5, 7)}, nil, -1, -1, 6, false, 0},
		// druid variant from 2: aborted data (pid 9) at 2, ABORT marker at 3, plain record at 4.
		{"aborted then marker then data", lagexporter.RecordRequest{Offset: 2, End: 5, Isolation: rc},
			[]*sarama.RecordBatch{data(2, 1, 9, true), marker(3, 9), data(4, 1, -1, false)},
			[]*sarama.AbortedTransaction{{ProducerID: 9, FirstOffset: 2}}, 4, 4, 5, false, 0},
		// read_uncommitted receives aborted data: first consumable is 2.
		{"aborted data is consumable uncommitted", lagexporter.RecordRequest{Offset: 2, End: 5, Isolation: ru},
			[]*sarama.RecordBatch{data(2, 1, 9, true), marker(3, 9), data(4, 1, -1, false)}, nil, 2, 2, 3, false, 0},
		// the committed offset lands inside a batch: records below it are skipped, no gap.
		{"inside a batch", lagexporter.RecordRequest{Offset: 12, End: 20, Isolation: ru},
			[]*sarama.RecordBatch{data(10, 5, -1, false)}, nil, 12, 12, 15, false, 0},
		// compaction: offsets 100..104 removed, next batch starts at 105.
		{"compaction gap", lagexporter.RecordRequest{Offset: 100, End: 110, Isolation: ru},
			[]*sarama.RecordBatch{data(105, 5, -1, false)}, nil, 105, 105, 110, true, 5},
		// 100, 101 compacted, 102 a COMMIT marker, then data: 2 compacted offsets; the marker is not a gap.
		{"compaction then a marker", lagexporter.RecordRequest{Offset: 100, End: 110, Isolation: ru},
			[]*sarama.RecordBatch{marker(102, 7), data(103, 7, -1, false)}, nil, 103, 103, 110, true, 2},
		// compaction inside a batch: 200..209 with 200..202 removed (the batch keeps its base offset).
		{"compaction inside a batch", lagexporter.RecordRequest{Offset: 200, End: 210, Isolation: ru},
			[]*sarama.RecordBatch{holes(data(200, 10, -1, false), 0, 1, 2)}, nil, 203, 203, 210, true, 3},
		// a batch compaction emptied (300..304), then a record at 305: 5 compacted offsets.
		{"emptied batch", lagexporter.RecordRequest{Offset: 300, End: 310, Isolation: ru},
			[]*sarama.RecordBatch{holes(data(300, 5, -1, false), 0, 1, 2, 3, 4), data(305, 5, -1, false)}, nil, 305, 305, 310, true, 5},
		// nothing fetched (partition max bytes too small to tell): nothing claimed.
		{"empty fetch", lagexporter.RecordRequest{Offset: 5, End: 9, Isolation: ru}, nil, nil, -1, -1, 5, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := probeBatches(tc.req, tc.batches, tc.aborted)
			if p.FirstOffset != tc.first || p.TimestampOffset != tc.tsOff || p.ScannedTo != tc.scanned || p.Gap != tc.gap ||
				p.GapOffsets != tc.gapOffsets {
				t.Fatalf("probe = first %d ts@%d scanned %d gap %v (%d offsets), want %d %d %d %v (%d)", p.FirstOffset,
					p.TimestampOffset, p.ScannedTo, p.Gap, p.GapOffsets, tc.first, tc.tsOff, tc.scanned, tc.gap, tc.gapOffsets)
			}
			if tc.tsOff >= 0 && !p.Timestamp.Equal(t0.Add(time.Duration(tc.tsOff)*time.Second)) {
				t.Fatalf("timestamp %v, want t0+%ds", p.Timestamp, tc.tsOff)
			}
		})
	}
}

// holes removes the records at the given offset deltas from b, as log compaction does (the batch keeps its offsets).
func holes(b *sarama.RecordBatch, deltas ...int64) *sarama.RecordBatch {
	var keep []*sarama.Record
	for _, r := range b.Records {
		drop := false
		for _, d := range deltas {
			drop = drop || r.OffsetDelta == d
		}
		if !drop {
			keep = append(keep, r)
		}
	}
	b.Records = keep
	return b
}

// TestProbeBatchesInvalidTimestamps: the stamps skipped before the first valid one are counted by problem.
func TestProbeBatchesInvalidTimestamps(t *testing.T) {
	noTS := &sarama.RecordBatch{FirstOffset: 10, Records: []*sarama.Record{{}}}
	secs := &sarama.RecordBatch{FirstOffset: 11, FirstTimestamp: time.UnixMilli(t0.Unix()), Records: []*sarama.Record{{}}} // seconds as ms
	micros := &sarama.RecordBatch{FirstOffset: 12, FirstTimestamp: time.UnixMilli(t0.UnixMicro()), Records: []*sarama.Record{{}}}
	p, _ := probeBatches(lagexporter.RecordRequest{Offset: 10, End: 14}, []*sarama.RecordBatch{noTS, secs, micros, data(13, 1, -1, false)}, nil)
	if p.FirstOffset != 10 || p.TimestampOffset != 13 || p.MissingTimestamps != 1 || p.WrongUnitTimestamps != 2 {
		t.Fatalf("first %d ts@%d missing %d wrong unit %d, want 10, 13, 1, 2", p.FirstOffset, p.TimestampOffset,
			p.MissingTimestamps, p.WrongUnitTimestamps)
	}
}

func TestProbeBatchesTimestamps(t *testing.T) {
	// record 10 has no timestamp (a batch whose first timestamp is -1 decodes as zero); record 11's is used.
	noTS := &sarama.RecordBatch{FirstOffset: 10, Records: []*sarama.Record{{}}}
	p, epoch := probeBatches(lagexporter.RecordRequest{Offset: 10, End: 12}, []*sarama.RecordBatch{noTS, data(11, 1, -1, false)}, nil)
	if p.FirstOffset != 10 || p.TimestampOffset != 11 {
		t.Fatalf("first %d ts@%d, want 10 and 11 (C27)", p.FirstOffset, p.TimestampOffset)
	}
	if p.AppendClock != nil || epoch != -1 {
		t.Fatalf("CreateTime: append clock %+v, epoch %d; want none", p.AppendClock, epoch)
	}
	// LogAppendTime: every record carries the batch's max timestamp, stamped by the leader of the batch's epoch.
	lat := data(20, 3, -1, false)
	lat.LogAppendTime, lat.MaxTimestamp, lat.PartitionLeaderEpoch = true, t0.Add(time.Hour), 7
	p, epoch = probeBatches(lagexporter.RecordRequest{Offset: 21, End: 23}, []*sarama.RecordBatch{lat}, nil)
	if !p.Timestamp.Equal(t0.Add(time.Hour)) {
		t.Fatalf("LogAppendTime stamp %v, want the batch max timestamp", p.Timestamp)
	}
	if p.AppendClock == nil || p.AppendClock.Broker != -1 || epoch != 7 {
		t.Fatalf("LogAppendTime: append clock %+v, epoch %d; want one to resolve, epoch 7", p.AppendClock, epoch)
	}
}

// TestLeaderEpochs: the epoch → leader history the record reads resolve a LogAppendTime's broker with.
func TestLeaderEpochs(t *testing.T) {
	var h leaderEpochs
	k := tp{"t", 0}
	h.observe(k, 5, 2)
	h.observe(k, 7, 1) // a failover from 2 to 1 (epoch 6 never seen: a failover and back between two reads)
	h.observe(k, 5, 3) // a late answer naming another leader for epoch 5 changes nothing
	h.observe(k, -1, 4)
	for _, c := range []struct {
		epoch, want int32
	}{{5, 2}, {6, -1}, {7, 1}, {8, -1}, {-1, -1}} {
		if got := h.leaderOf(k, c.epoch); got != c.want {
			t.Errorf("epoch %d: leader %d, want %d", c.epoch, got, c.want)
		}
	}
	for e := int32(100); e < 100+maxEpochsKept; e++ {
		h.observe(k, e, 9)
	}
	if got := h.leaderOf(k, 5); got != -1 || len(h.m[k]) != maxEpochsKept {
		t.Errorf("after %d more epochs: epoch 5 led by %d, %d kept; want forgotten, %d", maxEpochsKept, got, len(h.m[k]), maxEpochsKept)
	}
	h.retain(func(tp) bool { return false })
	if len(h.m) != 0 {
		t.Errorf("retain kept %v", h.m)
	}
}
