package collector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// viewsByTopic answers per topic name; names it does not hold are missing.
type viewsByTopic map[string]*kafka.TopicView

func (m viewsByTopic) Topic(name string) *kafka.TopicView {
	if v, ok := m[name]; ok {
		return v
	}
	return &kafka.TopicView{State: kafka.TopicMissing}
}
func (viewsByTopic) Await(string) <-chan struct{} { return closedAwait }

// TestReceiptsRouteAcks: an ack batch in the receipts topic goes to the ack feed (no rows), a bad one is
// dead-lettered like a bad receipt batch, and receipts beside them are processed as always.
func TestReceiptsRouteAcks(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, sink, dlq := newTestDeps(t, truth)
	feed := &ackFeed{d: deps, queue: make(chan instrument.Ack, 4)} // not running: the test reads the queue
	p := &Receipts{pathDeps: deps, acks: feed}
	a := instrument.Ack{Topic: "orders", Partition: 1, Offset: 7, SendNs: truth.UnixNano(), AckNs: truth.UnixNano(), Host: "p1"}
	good, err := instrument.AppendAckBatch(nil, []instrument.Ack{a, a})
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good[:len(good)-3]...) // cut short inside the second ack
	r := instrument.Receipt{Group: "g", Topic: "orders", Partition: 1, Offset: 7, ProcessedNs: truth.UnixNano(), Host: "c1"}
	b := kafka.Batch{Topic: "tidemark-receipts", Records: []kafka.Record{
		{Topic: "tidemark-receipts", Offset: 10, Value: good},
		{Topic: "tidemark-receipts", Offset: 11, Value: bad},
		receiptRecord(t, 12, r),
	}}
	if err := p.HandleBatch(context.Background(), b, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if len(feed.queue) != 2 {
		t.Fatalf("%d acks queued, want the good batch's 2", len(feed.queue))
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 11 || !errors.Is(dlq.reasons[0], instrument.ErrMalformed) {
		t.Fatalf("dead letters %+v %v", dlq.recs, dlq.reasons)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Latency) != 1 {
		t.Fatalf("sink got %+v, want the receipt's one row", sink.rows)
	}
	// A full queue drops and counts, never blocks the receipts path.
	feed.add([]instrument.Ack{a, a, a})
	if n := testutil.ToFloat64(deps.metrics.ProducerAcks.WithLabelValues(AckQueueFull)); n != 1 {
		t.Fatalf("queue_full %v, want 1", n)
	}
}

// TestAckFeedOutcomes: a producer whose clock is 2500 ms ahead, its acks resolved against broker 1 (bracketed by
// probes to ±1.5 ms): the usable one brackets the producer around the truth; every other is counted with its reason.
func TestAckFeedOutcomes(t *testing.T) {
	truth := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	deps, _, _ := newTestDeps(t, truth)
	deps.meta = viewsByTopic{
		"orders": knownTopic(kafka.TimestampLogAppend, 1),
		"events": knownTopic(kafka.TimestampCreate, 1),
	}
	feed := &ackFeed{d: deps}
	const skew = 2500 * time.Millisecond
	// Sent at true .000, appended at .002 (broker clock exact), acknowledged at .004.
	ack := instrument.Ack{Topic: "orders", Partition: 1, Offset: 7, Host: "p1",
		SendNs: truth.Add(skew).UnixNano(), AckNs: truth.Add(skew + 4*time.Millisecond).UnixNano(),
		RecordTimestampMs: truth.Add(2 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true}
	ctx := context.Background()
	if got := feed.observe(ctx, &ack); got != AckAppendClockUnknown {
		t.Fatalf("before any probe: outcome %q, want %q", got, AckAppendClockUnknown)
	}
	seedC25Clocks(t, deps, truth) // brackets broker-1 (and reports P1, C1, not involved here)
	tests := []struct {
		name string
		edit func(a *instrument.Ack)
		want string
	}{
		{"usable", func(*instrument.Ack) {}, AckBracketed},
		{"CreateTime topic", func(a *instrument.Ack) { a.Topic = "events" }, AckCreateTime},
		{"no timestamp in the answer", func(a *instrument.Ack) { a.HasRecordTimestamp, a.RecordTimestampMs = false, 0 }, AckNoAppendStamp},
		{"unknown topic", func(a *instrument.Ack) { a.Topic = "gone" }, AckUnknownTopic},
		{"ack before send", func(a *instrument.Ack) { a.AckNs = a.SendNs - 1 }, AckBadRoundTrip},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := ack
			tc.edit(&a)
			if got := feed.observe(ctx, &a); got != tc.want {
				t.Fatalf("outcome %q, want %q", got, tc.want)
			}
		})
	}
	o, err := deps.engine.Offset(deps.hosts.id("p1"), truth)
	if err != nil {
		t.Fatal(err)
	}
	// [S − (A + 1 − θb + ub), K − (A − θb − ub)] with S = 2500, K = 2504, A = 2, θb = 0, ub = 1.5 (ms, against the
	// true send time) is [2495.5, 2503.5]: 8 ms, plus a microsecond of drift allowance.
	if o.Kind != latency.KindBracketed || o.Lower > skew || o.Upper < skew || o.Upper-o.Lower > 8010*time.Microsecond {
		t.Fatalf("producer p1: %v [%v, %v], want bracketed around %v, at most 8.01 ms wide", o.Kind, o.Lower, o.Upper, skew)
	}
}
