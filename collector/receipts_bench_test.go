package collector

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// logAppendMeta knows every topic as LogAppendTime, answering one view (no allocation per lookup, as the metadata
// cache answers a known topic).
type logAppendMeta struct{ v *kafka.TopicView }

func (m logAppendMeta) Topic(string) *kafka.TopicView { return m.v }
func (logAppendMeta) Await(string) <-chan struct{}    { return closedAwait }

// lockedAppends attributes every append to broker 1, at the cost of kafka.AppendLeaders' answers: a lock, a map
// lookup and a clock read (its partition's last use) per call.
type lockedAppends struct {
	mu      sync.Mutex
	lastUse map[lockedAppendsKey]time.Time
}

type lockedAppendsKey struct {
	topic     string
	partition int32
}

func (a *lockedAppends) touch(topic string, partition int32) {
	a.mu.Lock()
	a.lastUse[lockedAppendsKey{topic, partition}] = time.Now()
	a.mu.Unlock()
}

func (a *lockedAppends) AppendLeader(_ context.Context, topic string, partition int32, _ int64) int32 {
	a.touch(topic, partition)
	return 1
}

func (a *lockedAppends) Placed(topic string, partition int32, _ int64) int32 {
	a.touch(topic, partition)
	return 1
}

func (a *lockedAppends) Await(topic string, partition int32, _ int64) <-chan struct{} {
	a.touch(topic, partition)
	return nil
}

// BenchmarkReceiptsPath is the receipts path without servers: Receipts.HandleBatch (decode, stamps, engine,
// live histograms, row building, pending rows, the sink hand-off and its acknowledgement) over fakes of its
// dependencies, on receipts shaped like cmd/bench-collector's: 256 per Kafka record (the emitter's default batch),
// every stamp on a LogAppendTime topic, three producer hosts and a trace each, 8 records per consumed batch. The
// receipt and receipts-topic offsets advance every iteration (rewritten in place in the encoded records), so every
// receipt is live and none is skipped as stored. It reports ns, B and allocs per receipt.
//
//	go test ./collector -run '^$' -bench ReceiptsPath -benchmem -count 8
func BenchmarkReceiptsPath(b *testing.B) {
	const perRecord, records = 256, 8
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		b.Fatal(err)
	}
	deps := &pathDeps{engine: eng, hosts: newHosts(eng), sink: discardSink{}, dlq: &fakeDLQ{},
		meta:    logAppendMeta{knownTopic(kafka.TimestampLogAppend, 1)},
		appends: &lockedAppends{lastUse: map[lockedAppendsKey]time.Time{}}, metrics: NewMetrics(nil), clock: func() time.Time { return now },
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	p := newReceipts(context.Background(), deps)

	// Encode the records once; offsets[i] are where receipt i's offset sits in its record's value.
	recs := make([]kafka.Record, records)
	offsets := make([][]int, records)
	for r := range recs {
		rs := make([]instrument.Receipt, perRecord)
		for j := range rs {
			off := int64(r*perRecord + j)
			base := now.Add(time.Duration(off-records*perRecord) * time.Millisecond)
			rs[j] = instrument.Receipt{
				Group: "bench-app", Topic: "orders", Partition: 3, Offset: off,
				RecordTimestampMs: base.Add(3 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
				TimestampType: instrument.TimestampLogAppend,
				ProduceNs:     base.Add(2500 * time.Millisecond).UnixNano(), ProduceHost: "p" + strconv.Itoa(int(off%3)),
				ReceiveNs: base.Add(10 * time.Millisecond).UnixNano(), ProcessedNs: base.Add(15 * time.Millisecond).UnixNano(),
				Host: "c1", TraceID: [16]byte{byte(off), 1}, SpanID: [8]byte{2}, HasTrace: true,
			}
		}
		v, err := instrument.AppendReceiptBatch(nil, rs)
		if err != nil {
			b.Fatal(err)
		}
		// Find each receipt's offset field: version, count, then per receipt its length, 7 bytes, the offset.
		pos := 1 + uvarintLen(perRecord)
		for range rs {
			l, n := binary.Uvarint(v[pos:])
			offsets[r] = append(offsets[r], pos+n+7)
			pos += n + int(l)
		}
		recs[r] = kafka.Record{Topic: "tidemark-receipts", Value: v}
	}
	var next int64 // the next receipts-topic offset
	var srcOff int64
	var before, after runtime.MemStats
	var cpu0, cpu1 syscall.Rusage
	b.ReportAllocs()
	runtime.ReadMemStats(&before)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu0)
	for b.Loop() {
		for r := range recs {
			recs[r].Offset = next
			next++
			for _, at := range offsets[r] {
				binary.BigEndian.PutUint64(recs[r].Value[at:], uint64(srcOff))
				srcOff++
			}
		}
		batch := kafka.Batch{Topic: "tidemark-receipts", Records: recs}
		if err := p.HandleBatch(context.Background(), batch, func(int64) {}); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &cpu1)
	runtime.ReadMemStats(&after)
	n := float64(srcOff)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/receipt")
	cpu := time.Duration(cpu1.Utime.Nano() + cpu1.Stime.Nano() - cpu0.Utime.Nano() - cpu0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/receipt")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/receipt")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/receipt")
	if live := testutil.ToFloat64(deps.metrics.Classes.WithLabelValues(PathReceipts, latency.ClassLive.String())); live != n {
		b.Fatalf("%v live receipts, want all %v", live, n)
	}
}

func uvarintLen(v uint64) int { return len(binary.AppendUvarint(nil, v)) }
