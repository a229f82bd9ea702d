package instrument

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"
)

// fixedClock returns a clock that reads *now.
func fixedClock(now *time.Time) Clock { return func() time.Time { return *now } }

func TestProducerInterceptorStampsAndTraces(t *testing.T) {
	now := time.Unix(1795953600, 0)
	p := NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: OffsetClock(fixedClock(&now), 2500*time.Millisecond)})
	msg := &sarama.ProducerMessage{Topic: "orders"}
	p.OnSend(msg)
	var h ProduceHeader
	if err := h.UnmarshalBinary([]byte(producerCarrier{msg}.Get(HeaderProduceTime))); err != nil {
		t.Fatal(err)
	}
	// The stamp is the producer's skewed clock: true time + 2.5 s.
	if want := now.Add(2500 * time.Millisecond); !h.Time.Equal(want) || h.Host != "p1" {
		t.Fatalf("header %+v, want time %v host p1", h, want)
	}
	tp := producerCarrier{msg}.Get(HeaderTraceParent)
	hs := make([]*sarama.RecordHeader, len(msg.Headers))
	for i := range msg.Headers {
		hs[i] = &msg.Headers[i]
	}
	tid, _, ok := TraceFromHeaders(hs)
	if !ok || len(tp) != 55 || tp[:3] != "00-" || tp[len(tp)-3:] != "-01" {
		t.Fatalf("traceparent %q ok=%v", tp, ok)
	}
	// A second interceptor (a retry or mirror) keeps the first produce time and trace.
	now = now.Add(time.Hour)
	p.OnSend(msg)
	if len(msg.Headers) != 2 {
		t.Fatalf("headers duplicated: %d", len(msg.Headers))
	}
	tid2, _, _ := TraceFromHeaders(hs)
	if tid2 != tid {
		t.Fatal("trace id changed on re-send")
	}
}

func consumed(topic string, part int32, off int64, ts time.Time, hs []sarama.RecordHeader) *sarama.ConsumerMessage {
	m := &sarama.ConsumerMessage{Topic: topic, Partition: part, Offset: off, Timestamp: ts}
	for i := range hs {
		m.Headers = append(m.Headers, &hs[i])
	}
	return m
}

func TestConsumerEmitsReceipts(t *testing.T) {
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	prod := mocks.NewAsyncProducer(t, cfg)
	var sent []*sarama.ProducerMessage
	check := func(m *sarama.ProducerMessage) error { sent = append(sent, m); return nil }
	prod.ExpectInputWithMessageCheckerFunctionAndSucceed(check)
	prod.ExpectInputWithMessageCheckerFunctionAndSucceed(check)
	em := NewEmitter(prod, EmitterConfig{Topic: "receipts", Linger: time.Hour, MaxBatch: 3})

	truth := time.Unix(1795953600, 0)
	pmsg := &sarama.ProducerMessage{Topic: "orders"}
	NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: OffsetClock(fixedClock(&truth), 2500*time.Millisecond), Unit: UnitNanos}).OnSend(pmsg)

	now := truth.Add(100 * time.Millisecond)
	c, err := NewConsumer(ConsumerConfig{Group: "g", Host: "c1", Clock: OffsetClock(fixedClock(&now), -300*time.Millisecond),
		TimestampTypes: map[string]TimestampType{"orders": TimestampLogAppend}}, em)
	if err != nil {
		t.Fatal(err)
	}
	m1 := consumed("orders", 2, 41, truth.Add(20*time.Millisecond), pmsg.Headers)
	m2 := consumed("orders", 2, 42, truth.Add(20*time.Millisecond), nil)
	m3 := consumed("other", 0, 7, time.Time{}, []sarama.RecordHeader{{Key: []byte(HeaderProduceTime), Value: []byte{1, 2}}})
	c.Receive(m1)
	now = now.Add(50 * time.Millisecond)
	c.Done(m1)
	c.Done(m2) // never Received
	c.Done(m3) // garbage produce header
	em.Close() // MaxBatch 3 was reached: one flush, two source partitions → two records

	if len(sent) != 2 {
		t.Fatalf("%d records sent, want 2 (one per source partition)", len(sent))
	}
	var rs []Receipt
	for _, m := range sent {
		v, _ := m.Value.Encode()
		k, _ := m.Key.Encode()
		if string(k) != "orders/2" && string(k) != "other/0" {
			t.Fatalf("key %q", k)
		}
		rs, err = DecodeReceiptBatch(rs, v)
		if err != nil {
			t.Fatal(err)
		}
	}
	byOff := map[int64]Receipt{}
	for _, r := range rs {
		byOff[r.Offset] = r
	}
	r1 := byOff[41]
	// Consumer clock is 300 ms behind: receive at true +100 ms reads +100−300; processed 50 ms later.
	if r1.ReceiveNs != truth.Add(-200*time.Millisecond).UnixNano() || r1.ProcessedNs != truth.Add(-150*time.Millisecond).UnixNano() {
		t.Fatalf("receipt stamps %+v", r1)
	}
	if r1.ProduceNs != truth.Add(2500*time.Millisecond).UnixNano() || r1.ProduceHost != "p1" || !r1.HasTrace ||
		r1.TimestampType != TimestampLogAppend || r1.RecordTimestampMs != truth.Add(20*time.Millisecond).UnixMilli() {
		t.Fatalf("receipt %+v", r1)
	}
	if r2 := byOff[42]; r2.ReceiveNs != 0 || r2.ProduceNs != 0 || r2.HasTrace {
		t.Fatalf("unreceived, unstamped record: %+v", r2)
	}
	if r3 := byOff[7]; r3.HasRecordTimestamp || r3.ProduceNs != 0 || r3.TimestampType != TimestampUnknown {
		t.Fatalf("record without timestamp: %+v", r3)
	}
	st := c.Stats()
	if st.Done != 3 || st.ReceiveMissing != 2 || st.BadHeaders != 1 || st.PendingRecords != 0 {
		t.Fatalf("consumer stats %+v", st)
	}
	if es := em.Stats(); es.Emitted != 3 || es.Sent != 3 || es.Dropped != 0 || es.Records != 2 {
		t.Fatalf("emitter stats %+v", es)
	}
}

// blockedProducer never accepts input, like a producer stuck on an unreachable cluster, until the test reads in.
// Input signals asked (without blocking) each time the emitter fetches the input channel, which it does right
// before the send that then blocks: the test's synchronisation point for "the batch loop is stuck in the producer".
type blockedProducer struct {
	sarama.AsyncProducer
	in    chan *sarama.ProducerMessage
	succ  chan *sarama.ProducerMessage
	errs  chan *sarama.ProducerError
	asked chan struct{}
}

func newBlockedProducer() *blockedProducer {
	return &blockedProducer{in: make(chan *sarama.ProducerMessage), succ: make(chan *sarama.ProducerMessage),
		errs: make(chan *sarama.ProducerError), asked: make(chan struct{}, 1)}
}

func (b *blockedProducer) Input() chan<- *sarama.ProducerMessage {
	select {
	case b.asked <- struct{}{}:
	default:
	}
	return b.in
}
func (b *blockedProducer) Successes() <-chan *sarama.ProducerMessage { return b.succ }
func (b *blockedProducer) Errors() <-chan *sarama.ProducerError      { return b.errs }
func (b *blockedProducer) AsyncClose()                               { close(b.succ); close(b.errs) }

// TestEmitterNeverBlocksAndBoundsMemory: with the producer stuck, Emit keeps returning at once (a blocking Emit
// hangs the test) and the emitter holds exactly one batch in the stuck send plus QueueSize queued receipts; every
// other receipt is counted dropped, none failed, and Close sends what it held once the producer moves again.
func TestEmitterNeverBlocksAndBoundsMemory(t *testing.T) {
	const queue, extra = 10, 1000
	for _, maxBatch := range []int{1, 4} {
		t.Run(fmt.Sprintf("max_batch=%d", maxBatch), func(t *testing.T) {
			bp := newBlockedProducer()
			// An hour's linger: only a full batch flushes, so what the loop holds does not depend on scheduling.
			em := NewEmitter(bp, EmitterConfig{QueueSize: queue, MaxBatch: maxBatch, Linger: time.Hour})
			receipt := func(i int) Receipt {
				return Receipt{Group: "g", Topic: "t", Partition: 0, Offset: int64(i), Host: "c1", ProcessedNs: 1}
			}
			if r := receipt(0); r.Validate() != nil {
				t.Fatalf("fixture receipt is invalid: %v", r.Validate())
			}
			// One full batch: the loop takes it and blocks handing it to the producer.
			for i := range maxBatch {
				if !em.Emit(receipt(i)) {
					t.Fatalf("receipt %d dropped by an empty emitter", i)
				}
			}
			select {
			case <-bp.asked:
			case <-time.After(time.Minute): // a hang guard only: a correct loop asks at once
				t.Fatalf("the batch loop never handed its full batch to the producer; stats %+v", em.Stats())
			}
			accepted := maxBatch
			for i := maxBatch; i < maxBatch+extra; i++ {
				if em.Emit(receipt(i)) {
					accepted++
				}
			}
			if want := maxBatch + queue; accepted != want {
				t.Fatalf("accepted %d receipts, want %d (one batch of %d in the stuck send + a queue of %d)",
					accepted, want, maxBatch, queue)
			}
			st := em.Stats()
			if want := (EmitterStats{Emitted: uint64(maxBatch + extra), Dropped: extra - queue, Records: 1}); st != want {
				t.Fatalf("stats with the producer stuck %+v, want %+v", st, want)
			}

			// The producer moves again: Close hands over everything held, in MaxBatch records.
			handed := make(chan int)
			go func() {
				n := 0
				for m := range bp.in {
					n += m.Metadata.(int)
				}
				handed <- n
			}()
			em.Close()
			close(bp.in)
			if n := <-handed; n != accepted {
				t.Fatalf("the producer was handed %d receipts, want the %d accepted", n, accepted)
			}
			records := 1 + (queue+maxBatch-1)/maxBatch
			if st := em.Stats(); st.Failed != 0 || st.Records != uint64(records) || st.Dropped != extra-queue {
				t.Fatalf("stats after Close %+v, want 0 failed, %d records, %d dropped", st, records, extra-queue)
			}
		})
	}
}

// scriptedClock is the true time of a test's world. Each reading first advances it by the next step of a script
// (cycled), so the four readings of a time-sync exchange (client send t0, server arrival t1, server reply t2, client
// receive t3) are separated by the delays the test chose, however the machine schedules the real HTTP round trip.
type scriptedClock struct {
	mu    sync.Mutex // guards now and i: the client and the server's handler goroutine both read the clock
	now   time.Time
	steps []time.Duration
	i     int
}

func (c *scriptedClock) read() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.steps[c.i%len(c.steps)])
	c.i++
	return c.now
}

// TestTimeSyncBracketsSkewedHost runs Sync over a real HTTP server with scripted delays: every sample brackets the
// true offset, and Sync keeps the sample with the shortest round trip, whose midpoint and half-width are exact.
func TestTimeSyncBracketsSkewedHost(t *testing.T) {
	ms := time.Millisecond
	// Per exchange: idle gap before t0, request delay (t0→t1), server time (t1→t2), reply delay (t2→t3).
	steps := []time.Duration{
		ms, 30 * ms, ms, 10 * ms, // asymmetric, slow out: [skew−30, skew+10] → skew−10 ± 20
		ms, 2 * ms, ms, 4 * ms, // the shortest round trip: [skew−2, skew+4] → skew+1 ± 3
		ms, 50 * ms, 0, 50 * ms, // symmetric but slow: [skew−50, skew+50] → skew ± 50
	}
	for _, skew := range []time.Duration{2500 * ms, -800 * ms, 0} {
		t.Run(skew.String(), func(t *testing.T) {
			truth := &scriptedClock{now: time.Unix(1795953600, 0), steps: steps}
			srv := httptest.NewServer(TimeSyncHandler(truth.read))
			defer srv.Close()
			ts := NewTimeSync(srv.URL+TimeSyncPath, OffsetClock(truth.read, skew), srv.Client(), 3)
			o, err := ts.Sync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if want := (ClockOffset{Offset: skew + ms, Uncertainty: 3 * ms, Valid: true}); o != want {
				t.Fatalf("estimate %+v, want %+v (the 2 ms out / 4 ms back sample)", o, want)
			}
			if d := o.Offset - skew; d < -o.Uncertainty || d > o.Uncertainty {
				t.Fatalf("true offset %v outside the bracket %v ± %v", skew, o.Offset, o.Uncertainty)
			}
			if ts.ClockOffset() != o {
				t.Fatal("ClockOffset does not return the last sync")
			}
		})
	}
}

func TestBracket(t *testing.T) {
	tests := []struct {
		name           string
		t0, t1, t2, t3 int64
		want           ClockOffset
	}{
		// Host +2500 ahead, 10 ms each way, 1 ms server time: t0=2500 (true 0), t1=10, t2=11, t3=2521.
		{"symmetric delay recovers the offset", 2500, 10, 11, 2521, ClockOffset{Offset: 2500, Uncertainty: 10, Valid: true}},
		// Asymmetric delay (30 out, 0 back) biases the midpoint by 15, but the bracket [2470, 2500] still holds the truth.
		{"asymmetric delay stays bracketed", 2500, 30, 31, 2531, ClockOffset{Offset: 2485, Uncertainty: 15, Valid: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bracket(tc.t0, tc.t1, tc.t2, tc.t3); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTimeSyncHandlerRejectsGarbage(t *testing.T) {
	srv := httptest.NewServer(TimeSyncHandler(time.Now))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL, "application/octet-stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("empty body: status %d", resp.StatusCode)
	}
}

// fixedOffset is an OffsetSource that always reports o.
type fixedOffset ClockOffset

func (f fixedOffset) ClockOffset() ClockOffset { return ClockOffset(f) }

// TestConsumerNeverWritesRefusedReceipts feeds the consumer helper values that Receipt.Validate refuses and checks it
// drops or counts each one instead, so a real client's receipt is never dead-lettered for them.
func TestConsumerNeverWritesRefusedReceipts(t *testing.T) {
	cfg := mocks.NewTestConfig()
	prod := mocks.NewAsyncProducer(t, cfg)
	var sent []*sarama.ProducerMessage
	prod.ExpectInputWithMessageCheckerFunctionAndSucceed(func(m *sarama.ProducerMessage) error { sent = append(sent, m); return nil })
	em := NewEmitter(prod, EmitterConfig{Topic: "receipts", Linger: time.Hour, MaxBatch: 1})

	now := time.Unix(1795953600, 0)
	// A time sync that measured two days (a host clock set to the wrong date): sent as invalid, not refused.
	c, err := NewConsumer(ConsumerConfig{Group: "g", Host: "c1", Clock: fixedClock(&now),
		Offsets: fixedOffset{Offset: 48 * time.Hour, Valid: true}}, em)
	if err != nil {
		t.Fatal(err)
	}
	// A produce-time header that follows the layout but stamps before 1970, as a third-party producer might.
	pt, err := ProduceHeader{Time: time.Unix(0, -1000), Unit: UnitNanos, Host: "p1"}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	m := consumed("orders", 0, 5, time.UnixMilli(-5), []sarama.RecordHeader{
		{Key: []byte(HeaderProduceTime), Value: pt},
		{Key: []byte(HeaderTraceParent), Value: []byte("00-not-a-trace-01")},
	})
	c.Done(m)
	em.Close()

	if len(sent) != 1 {
		t.Fatalf("%d records sent, want 1 (emitter stats %+v)", len(sent), em.Stats())
	}
	v, _ := sent[0].Value.Encode()
	rs, err := DecodeReceiptBatch(nil, v)
	if err != nil {
		t.Fatalf("the consumer's own receipt is refused: %v", err)
	}
	r := rs[0]
	if r.Clock.Valid || r.ProduceNs != 0 || r.ProduceHost != "" || r.HasRecordTimestamp || r.HasTrace ||
		r.ProcessedNs != now.UnixNano() || r.Offset != 5 {
		t.Fatalf("receipt %+v", r)
	}
	if st := c.Stats(); st.BadHeaders != 1 || st.BadTraceParent != 1 {
		t.Fatalf("consumer stats %+v, want 1 bad header and 1 bad traceparent", st)
	}
}

// TestProducerDropsOutOfRangeOffset checks the producer interceptor still stamps a record when its time sync
// reports an offset the header format refuses: the header goes without the offset.
func TestProducerDropsOutOfRangeOffset(t *testing.T) {
	now := time.Unix(1795953600, 0)
	p := NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: fixedClock(&now),
		Offsets: fixedOffset{Offset: -MaxClockOffset - time.Second, Valid: true}})
	msg := &sarama.ProducerMessage{Topic: "orders"}
	p.OnSend(msg)
	var h ProduceHeader
	if err := h.UnmarshalBinary([]byte(producerCarrier{msg}.Get(HeaderProduceTime))); err != nil {
		t.Fatal(err)
	}
	if h.Offset.Valid || !h.Time.Equal(now) || p.EncodeErrors() != 0 {
		t.Fatalf("header %+v, encode errors %d", h, p.EncodeErrors())
	}
}
