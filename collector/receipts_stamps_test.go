package collector

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency/instrument"
)

// metaByTopic answers timestamp types per topic; today's leader is broker 1 everywhere.
type metaByTopic map[string]kafka.TimestampType

func (m metaByTopic) Topic(t string) *kafka.TopicView { return knownTopic(m[t], 1) }
func (m metaByTopic) Await(string) <-chan struct{}    { return closedAwait }

// appendsAt attributes appends by offset: the leader of each offset's epoch (absent: unknown).
type appendsAt map[int64]int32

func (a appendsAt) AppendLeader(_ context.Context, _ string, _ int32, offset int64) int32 {
	if l, ok := a[offset]; ok {
		return l
	}
	return -1
}

func (a appendsAt) Placed(_ string, _ int32, offset int64) int32 {
	return a.AppendLeader(context.Background(), "", 0, offset)
}
func (a appendsAt) Await(string, int32, int64) <-chan struct{} { return nil }

// TestReceiptRecordTimestampMeaning: what the record timestamp of a receipt becomes depends on the topic's
// timestamp type (case C28): on LogAppendTime the append stamp of the broker that led the record's epoch (broker 7,
// though broker 1 leads today; none when that leader is unknown), the produce stamp of an unnamed producer on
// CreateTime without a produce-time header, nothing when the produce-time header already gave the produce time.
func TestReceiptRecordTimestampMeaning(t *testing.T) {
	ts := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name               string
		topic              string
		declared           instrument.TimestampType
		header             bool
		wantEvent, wantApp int64
		wantProducer       string
		wantBroker         string
	}{
		{"log-append topic resolved from config", "lat", instrument.TimestampUnknown, true, ts.Add(-5 * time.Millisecond).UnixMilli(), ts.UnixMilli(), "p1", "broker-7"},
		{"declared by the consumer, config not asked", "unknown-topic", instrument.TimestampLogAppend, false, 0, ts.UnixMilli(), "", "broker-7"},
		// The epoch's leader cannot be known: the raw stamp is kept, attributed to no broker (never today's leader).
		{"log-append, epoch leader unknown", "lat-old", instrument.TimestampLogAppend, false, 0, ts.UnixMilli(), "", ""},
		{"create-time topic without header: an unnamed producer", "ct", instrument.TimestampUnknown, false, ts.UnixMilli(), 0, "producer@ct", ""},
		// With the header the record's CreateTime is the same moment on the same clock: the header's precision wins.
		{"create-time topic with header", "ct", instrument.TimestampUnknown, true, ts.Add(-5 * time.Millisecond).UnixMilli(), 0, "p1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			deps, sink, _ := newTestDeps(t, ts.Add(time.Second))
			deps.meta = metaByTopic{"lat": kafka.TimestampLogAppend, "ct": kafka.TimestampCreate}
			deps.appends = appendsAt{9: 7}
			if tc.topic == "lat-old" {
				deps.appends = appendsAt{}
			}
			r := instrument.Receipt{Group: "g", Topic: tc.topic, Partition: 1, Offset: 9, TimestampType: tc.declared,
				RecordTimestampMs: ts.UnixMilli(), HasRecordTimestamp: true, ProcessedNs: ts.Add(50 * time.Millisecond).UnixNano(), Host: "c1"}
			if tc.header {
				r.ProduceNs, r.ProduceHost = ts.Add(-5*time.Millisecond).UnixNano(), "p1"
			}
			p := &Receipts{pathDeps: deps}
			if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "rc", Records: []kafka.Record{receiptRecord(t, 0, r)}}, func(int64) {}); err != nil {
				t.Fatal(err)
			}
			row := sink.rows[0].Latency[0]
			if row.EventMs != tc.wantEvent || row.AppendMs != tc.wantApp || row.ProducerHost != tc.wantProducer || row.BrokerHost != tc.wantBroker {
				t.Fatalf("event %d append %d producer %q broker %q", row.EventMs, row.AppendMs, row.ProducerHost, row.BrokerHost)
			}
		})
	}
}
