package collector

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

// The per-batch caches (hostIDs, traceHexes) change no row: a batch of records whose receipts name more hosts than
// hostIDs keeps (12 consumers, producers with and without a produce-time header), several append leaders (one
// unknown), two topics of each timestamp type and traces on every other receipt makes the same rows as the same
// receipts handed to the path one per batch, where every lookup is fresh.
func TestBatchCacheSameRows(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	leaders := appendsAt{}
	var rs []instrument.Receipt
	for i := range 60 {
		off := int64(i)
		if i%7 != 3 {
			leaders[off] = int32(1 + i/20) // a leader change every 20 offsets; every 7th offset's leader is unknown
		}
		r := instrument.Receipt{Group: "g", Topic: "orders", Partition: 1, Offset: off,
			RecordTimestampMs: now.Add(-50 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
			ReceiveNs: now.Add(-30 * time.Millisecond).UnixNano(), ProcessedNs: now.Add(-10 * time.Millisecond).UnixNano(),
			Host: "c" + strconv.Itoa(i%12)}
		if i%3 != 0 {
			r.ProduceNs, r.ProduceHost = now.Add(-60*time.Millisecond).UnixNano(), "p"+strconv.Itoa(i%5)
		}
		if i >= 40 {
			r.Group, r.Topic, r.Offset = "h", "events", off-40
		}
		if i%2 == 0 {
			r.TraceID, r.SpanID, r.HasTrace = [16]byte{byte(i), 15: 1}, [8]byte{7: byte(i + 1)}, true
		}
		rs = append(rs, r)
	}
	meta := metaByTopic{"orders": kafka.TimestampLogAppend, "events": kafka.TimestampCreate}
	run := func(perRecord, perBatch int) []store.LatencyRow {
		deps, sink, _ := newTestDeps(t, now)
		deps.meta, deps.appends = meta, leaders
		p := &Receipts{pathDeps: deps}
		var recs []kafka.Record
		flush := func() {
			if len(recs) == 0 {
				return
			}
			if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "tidemark-receipts", Records: recs}, func(int64) {}); err != nil {
				t.Fatal(err)
			}
			recs = nil
		}
		for i := 0; i < len(rs); i += perRecord {
			recs = append(recs, receiptRecord(t, int64(i), rs[i:min(i+perRecord, len(rs))]...))
			if len(recs) == perBatch {
				flush()
			}
		}
		flush()
		var rows []store.LatencyRow
		for _, w := range sink.rows {
			for _, r := range w.Latency {
				r.ReceiptOffset = 0 // where it came from differs between the two runs
				rows = append(rows, r)
			}
		}
		return rows
	}
	batched, single := run(25, 3), run(1, 1)
	if len(batched) != len(rs) || len(single) != len(rs) {
		t.Fatalf("%d and %d rows, want %d each", len(batched), len(single), len(rs))
	}
	for i := range batched {
		if batched[i] != single[i] {
			t.Errorf("row %d:\nbatched %+v\nsingle  %+v", i, batched[i], single[i])
		}
	}
	if r := batched[0]; r.TraceID != "00000000000000000000000000000001" || r.SpanID != "0000000000000001" || r.BrokerHost != "broker-1" {
		t.Errorf("row 0 %+v: want trace, span and broker-1", r)
	}
	if r := batched[3]; r.TraceID != "" || r.BrokerHost != "" {
		t.Errorf("row 3 %+v: want no trace and no broker (leader unknown)", r)
	}
}

// placedBelow places every offset below its partition's bound and records what it was asked.
type placedBelow struct {
	bound map[int32]int64
	asked []string
	round chan struct{}
}

func (a *placedBelow) AppendLeader(context.Context, string, int32, int64) int32 { return 1 }
func (a *placedBelow) Placed(string, int32, int64) int32                        { return 1 }
func (a *placedBelow) Await(topic string, partition int32, offset int64) <-chan struct{} {
	a.asked = append(a.asked, topic+"/"+strconv.Itoa(int(partition))+"@"+strconv.FormatInt(offset, 10))
	if offset < a.bound[partition] {
		return nil
	}
	return a.round
}

// leaderWait asks about each run of one partition's receipts once, for its highest offset, and waits exactly when
// some receipt's offset is not placed yet (what asking about every receipt would answer): offsets are placed in
// order. CreateTime receipts have no append stamp and are not asked about.
func TestLeaderWaitOncePerRun(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rc := func(partition int32, offset int64, tt instrument.TimestampType) instrument.Receipt {
		return instrument.Receipt{Group: "g", Topic: "orders", Partition: partition, Offset: offset, HasRecordTimestamp: true,
			TimestampType: tt, RecordTimestampMs: now.UnixMilli(), ProcessedNs: now.UnixNano(), Host: "c1"}
	}
	la, ct := instrument.TimestampLogAppend, instrument.TimestampCreate
	tests := []struct {
		name  string
		rs    []instrument.Receipt
		bound map[int32]int64
		asked []string
		wait  bool
	}{
		{"one run, placed", []instrument.Receipt{rc(1, 5, la), rc(1, 6, la), rc(1, 7, la)}, map[int32]int64{1: 8},
			[]string{"orders/1@7"}, false},
		{"one run, its last offset not placed", []instrument.Receipt{rc(1, 5, la), rc(1, 6, la), rc(1, 7, la)}, map[int32]int64{1: 7},
			[]string{"orders/1@7"}, true},
		// a redelivery: the run's highest offset is not its last
		{"redelivered offsets", []instrument.Receipt{rc(1, 5, la), rc(1, 9, la), rc(1, 5, la)}, map[int32]int64{1: 9},
			[]string{"orders/1@9"}, true},
		{"interleaved partitions", []instrument.Receipt{rc(1, 5, la), rc(2, 3, la), rc(2, 4, la), rc(1, 6, la)},
			map[int32]int64{1: 10, 2: 10}, []string{"orders/1@5", "orders/2@4", "orders/1@6"}, false},
		// the CreateTime receipt in between neither is asked about nor ends the run
		{"create time skipped", []instrument.Receipt{rc(1, 5, la), rc(2, 50, ct), rc(1, 6, la)}, map[int32]int64{1: 6},
			[]string{"orders/1@6"}, true},
		{"no append stamps", []instrument.Receipt{rc(1, 5, ct)}, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deps, _, _ := newTestDeps(t, now)
			a := &placedBelow{bound: tc.bound, round: make(chan struct{})}
			deps.appends = a
			p := &Receipts{pathDeps: deps}
			wait := p.leaderWait(tc.rs)
			if (wait != nil) != tc.wait || !slices.Equal(a.asked, tc.asked) {
				t.Fatalf("wait %v after asking %v, want wait %v after asking %v", wait != nil, a.asked, tc.wait, tc.asked)
			}
		})
	}
}
