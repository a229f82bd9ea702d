package instrument

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func recorder() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func headersOf(msg *sarama.ProducerMessage) []*sarama.RecordHeader {
	hs := make([]*sarama.RecordHeader, len(msg.Headers))
	for i := range msg.Headers {
		hs[i] = &msg.Headers[i]
	}
	return hs
}

func TestProducerSendSpan(t *testing.T) {
	tp, rec := recorder()
	truth := time.Unix(1795953600, 0)
	p := NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: OffsetClock(fixedClock(&truth), 2500*time.Millisecond),
		TracerProvider: tp})
	msg := &sarama.ProducerMessage{Topic: "orders", Key: sarama.StringEncoder("order-7"), Value: sarama.StringEncoder("{}")}
	p.OnSend(msg)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "send orders" || s.SpanKind() != trace.SpanKindProducer || s.Parent().IsValid() {
		t.Fatalf("span %q kind %v parent %v", s.Name(), s.SpanKind(), s.Parent())
	}
	// Recorded on the host's (skewed) clock, like an SDK on that host would: correcting it is Tidemark's job.
	if want := truth.Add(2500 * time.Millisecond); !s.StartTime().Equal(want) || !s.EndTime().Equal(want) {
		t.Fatalf("span times %v..%v, want %v", s.StartTime(), s.EndTime(), want)
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{"messaging.system": "kafka", "messaging.operation.name": "send",
		"messaging.operation.type": "send", "messaging.destination.name": "orders", "messaging.kafka.message.key": "order-7",
		"tidemark.host": "p1"} {
		if got := a[k].AsString(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if a["messaging.message.body.size"].AsInt64() != 2 {
		t.Errorf("body size %v", a["messaging.message.body.size"])
	}
	// traceparent carries the send span's context: the consumer and the collector join this span.
	tid, sid, ok := TraceFromHeaders(headersOf(msg))
	if !ok || tid != s.SpanContext().TraceID() || sid != s.SpanContext().SpanID() {
		t.Fatalf("traceparent %x/%x, span %v", tid, sid, s.SpanContext())
	}
	// A second interceptor (a retry or a mirror) keeps the first produce and makes no second span.
	p.OnSend(msg)
	if len(rec.Ended()) != 1 {
		t.Fatalf("re-send made another span")
	}
}

func TestProducerSendSpanJoinsApplicationSpan(t *testing.T) {
	tp, rec := recorder()
	ctx, parent := tp.Tracer("app").Start(context.Background(), "handle request")
	msg := &sarama.ProducerMessage{Topic: "orders"}
	InjectContext(ctx, msg)
	NewProducerInterceptor(ProducerConfig{Host: "p1", TracerProvider: tp}).OnSend(msg)
	parent.End()
	var send sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "send orders" {
			send = s
		}
	}
	if send == nil || send.Parent().SpanID() != parent.SpanContext().SpanID() || send.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("send span %v is not the child of %v", send, parent.SpanContext())
	}
	if !attrs(send)["messaging.kafka.message.tombstone"].AsBool() {
		t.Error("a record without a value is a tombstone")
	}
	_, sid, _ := TraceFromHeaders(headersOf(msg))
	if sid != send.SpanContext().SpanID() {
		t.Fatal("traceparent does not name the send span")
	}
}

func TestProducerWithNoopProviderStillMintsTrace(t *testing.T) {
	msg := &sarama.ProducerMessage{Topic: "orders"}
	NewProducerInterceptor(ProducerConfig{Host: "p1", TracerProvider: noop.NewTracerProvider()}).OnSend(msg)
	if _, _, ok := TraceFromHeaders(headersOf(msg)); !ok {
		t.Fatal("a noop provider left the record without a trace id")
	}
}

func newTracedConsumer(t *testing.T, tp trace.TracerProvider, clock Clock) *Consumer {
	t.Helper()
	cfg := mocks.NewTestConfig()
	prod := mocks.NewAsyncProducer(t, cfg)
	t.Cleanup(func() { _ = prod.Close() })
	em := NewEmitter(prod, EmitterConfig{Topic: "receipts", Linger: time.Hour, MaxBatch: 1000})
	c, err := NewConsumer(ConsumerConfig{Group: "billing", Host: "c1", Clock: clock, TracerProvider: tp}, em)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestConsumerProcessSpan(t *testing.T) {
	tp, rec := recorder()
	truth := time.Unix(1795953600, 0)
	pmsg := &sarama.ProducerMessage{Topic: "orders"}
	NewProducerInterceptor(ProducerConfig{Host: "p1", TracerProvider: tp}).OnSend(pmsg)
	send := rec.Ended()[0].SpanContext()

	now := truth
	c := newTracedConsumer(t, tp, OffsetClock(fixedClock(&now), -300*time.Millisecond))
	m := consumed("orders", 3, 41, truth, pmsg.Headers)
	c.Receive(m)
	now = now.Add(7 * time.Millisecond)
	c.Done(m)
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	s := spans[1]
	if s.Name() != "process orders" || s.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("span %q kind %v", s.Name(), s.SpanKind())
	}
	// One message per process span: parented to the creation context and linked to it (semantic conventions).
	if s.Parent().SpanID() != send.SpanID() || s.SpanContext().TraceID() != send.TraceID() || !s.Parent().IsRemote() {
		t.Fatalf("parent %v, want remote %v", s.Parent(), send)
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanID() {
		t.Fatalf("links %+v", l)
	}
	// From Receive to Done on the consumer's clock (300 ms behind).
	if want := truth.Add(-300 * time.Millisecond); !s.StartTime().Equal(want) || s.EndTime().Sub(s.StartTime()) != 7*time.Millisecond {
		t.Fatalf("span %v..%v", s.StartTime(), s.EndTime())
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{"messaging.system": "kafka", "messaging.operation.name": "process",
		"messaging.operation.type": "process", "messaging.destination.name": "orders", "messaging.consumer.group.name": "billing",
		"messaging.destination.partition.id": "3", "tidemark.host": "c1"} {
		if got := a[k].AsString(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if a["messaging.kafka.offset"].AsInt64() != 41 {
		t.Errorf("offset %v", a["messaging.kafka.offset"])
	}
}

func TestConsumerBadTraceParentMakesRootSpan(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []sarama.RecordHeader
		bad     uint64
	}{
		{"absent", nil, 0},
		// A malformed value is counted and gives no parent: never a span under a made-up context.
		{"malformed", []sarama.RecordHeader{{Key: []byte(HeaderTraceParent), Value: []byte("00-zz-00-01")}}, 1},
		{"all-zero ids", []sarama.RecordHeader{{Key: []byte(HeaderTraceParent),
			Value: []byte("00-00000000000000000000000000000000-0000000000000000-01")}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, rec := recorder()
			c := newTracedConsumer(t, tp, nil)
			m := consumed("orders", 0, 1, time.Now(), tc.headers)
			c.Receive(m)
			c.Done(m)
			spans := rec.Ended()
			if len(spans) != 1 || spans[0].Parent().IsValid() || len(spans[0].Links()) != 0 {
				t.Fatalf("spans %d, parent %v", len(spans), spans[0].Parent())
			}
			if got := c.Stats().BadTraceParent; got != tc.bad {
				t.Fatalf("BadTraceParent %d, want %d", got, tc.bad)
			}
		})
	}
}

func TestConsumerForgetEndsOpenSpans(t *testing.T) {
	tp, rec := recorder()
	c := newTracedConsumer(t, tp, nil)
	m := consumed("orders", 2, 9, time.Now(), nil)
	c.Receive(m)
	c.Forget("orders", 2)
	spans := rec.Ended()
	if len(spans) != 1 || !attrs(spans[0])["tidemark.revoked"].AsBool() {
		t.Fatalf("spans %v", spans)
	}
	if st := c.Stats(); st.PendingRecords != 0 {
		t.Fatalf("pending %d", st.PendingRecords)
	}
}

// The receipt carries the traceparent's sampled flag as bit6 "not sampled", so that receipts written before the bit
// existed (their producers minted sampled traces) still read as sampled.
func TestReceiptTraceSampledFlag(t *testing.T) {
	r := Receipt{Group: "g", Topic: "t", Offset: 1, ProcessedNs: 1, Host: "c1", HasTrace: true,
		TraceID: [16]byte{1}, SpanID: [8]byte{2}, TraceUnsampled: true}
	b, err := r.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if b[1] != rFlagTrace|rFlagTraceUnsampled {
		t.Fatalf("flags %#x", b[1])
	}
	var got Receipt
	if err := got.UnmarshalBinary(b); err != nil || got != r {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	b[1] = rFlagTraceUnsampled          // the bit alone, without trace context (and without its 24 bytes)
	b = append(b[:23:23], b[23+24:]...) // header 23 bytes, then the trace ids
	if err := got.UnmarshalBinary(b); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bit6 without bit5: %v, want ErrMalformed", err)
	}
	if err := (&Receipt{Group: "g", Topic: "t", ProcessedNs: 1, Host: "c1", TraceUnsampled: true}).Validate(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Validate: %v", err)
	}
}

func TestConsumerReportsUnsampledTrace(t *testing.T) {
	r := receiptOf(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	if !r.HasTrace || !r.TraceUnsampled {
		t.Fatalf("receipt %+v", r)
	}
	if r = receiptOf(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); !r.HasTrace || r.TraceUnsampled {
		t.Fatalf("receipt %+v", r)
	}
}

// receiptOf runs one record with the given traceparent through a consumer helper and returns its receipt.
func receiptOf(t *testing.T, traceparent string) Receipt {
	t.Helper()
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	prod := mocks.NewAsyncProducer(t, cfg)
	var sent *sarama.ProducerMessage
	prod.ExpectInputWithMessageCheckerFunctionAndSucceed(func(m *sarama.ProducerMessage) error { sent = m; return nil })
	em := NewEmitter(prod, EmitterConfig{Topic: "receipts", Linger: time.Hour, MaxBatch: 1})
	c, err := NewConsumer(ConsumerConfig{Group: "g", Host: "c1"}, em)
	if err != nil {
		t.Fatal(err)
	}
	m := consumed("orders", 0, 5, time.Now(), []sarama.RecordHeader{{Key: []byte(HeaderTraceParent), Value: []byte(traceparent)}})
	c.Receive(m)
	c.Done(m)
	em.Close()
	v, _ := sent.Value.Encode()
	rs, err := DecodeReceiptBatch(nil, v)
	if err != nil || len(rs) != 1 {
		t.Fatalf("decode: %v (%d)", err, len(rs))
	}
	return rs[0]
}
