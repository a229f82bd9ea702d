package instrument

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"
)

func fullAck() Ack {
	return Ack{Topic: "orders", Partition: 2, Offset: 41, SendNs: 1795953600_000_000_000, AckNs: 1795953600_004_000_000,
		Host: "p1", RecordTimestampMs: 1795953597_502, HasRecordTimestamp: true}
}

// TestAckGolden pins the v1 layout byte by byte (docs/instrumentation.md, "Producer acknowledgements").
func TestAckGolden(t *testing.T) {
	a := fullAck()
	b, err := a.AppendBinary(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "01" + "01" + "00" + "00000002" + "0000000000000029" + "18ec8248a9158000" + "18ec8248a9528900" +
		"000001a2272d1c3e" + "06" + hex.EncodeToString([]byte("orders")) + "02" + hex.EncodeToString([]byte("p1"))
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("ack bytes\n got %s\nwant %s", got, want)
	}
}

func TestAckBatchRoundTrip(t *testing.T) {
	noTS := fullAck()
	noTS.HasRecordTimestamp, noTS.RecordTimestampMs, noTS.Offset = false, 0, 42
	in := []Ack{fullAck(), noTS}
	b, err := AppendAckBatch(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	if !IsAckBatch(b) {
		t.Fatal("an ack batch is not recognised as one")
	}
	out, err := DecodeAckBatch(nil, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("decoded %+v, want %+v", out, in)
	}
	// A receipt batch is not an ack batch, and still decodes as it always did.
	rb, err := AppendReceiptBatch(nil, []Receipt{fullReceipt()})
	if err != nil {
		t.Fatal(err)
	}
	if IsAckBatch(rb) {
		t.Fatal("a receipt batch taken for an ack batch")
	}
	if rs, err := DecodeReceiptBatch(nil, rb); err != nil || len(rs) != 1 || rs[0] != fullReceipt() {
		t.Fatalf("receipt batch: %+v, %v", rs, err)
	}
}

// TestAckBatchOnReceiptDecoder is what a collector that predates acks does with one: the receipt decoder refuses the
// record as an unsupported version (the collector dead-letters it, reason unsupported_version); it never reads an
// ack as a receipt.
func TestAckBatchOnReceiptDecoder(t *testing.T) {
	b, _ := AppendAckBatch(nil, []Ack{fullAck()})
	rs, err := DecodeReceiptBatch(nil, b)
	if !errors.Is(err, ErrUnsupportedVersion) || len(rs) != 0 {
		t.Fatalf("receipt decoder on an ack batch: %d receipts, err %v; want ErrUnsupportedVersion", len(rs), err)
	}
	if _, err := DecodeAckBatch(nil, []byte{ReceiptBatchVersion, 1, 0}); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("ack decoder on a receipt batch: err %v, want ErrUnsupportedVersion", err)
	}
}

func TestAckRejects(t *testing.T) {
	good, _ := fullAck().appendUncheckedCopy()
	tests := []struct {
		name string
		data []byte
		want error
		in   string // a word the error must contain, naming what was wrong
	}{
		{name: "empty", data: nil, want: ErrMalformed, in: "version"},
		{name: "version 2", data: append([]byte{2}, good[1:]...), want: ErrUnsupportedVersion, in: "version 2"},
		{name: "unknown flag", data: append([]byte{1, 0x02}, good[2:]...), want: ErrMalformed, in: "flags"},
		{name: "truncated stamps", data: good[:20], want: ErrMalformed, in: "send"},
		{name: "truncated host", data: good[:len(good)-1], want: ErrMalformed, in: "producer host id"},
		{name: "trailing byte", data: append(append([]byte(nil), good...), 0), want: ErrMalformed, in: "trailing"},
	}
	for _, edit := range []struct {
		name, in string
		f        func(a *Ack)
	}{
		{"negative offset", "offset", func(a *Ack) { a.Offset = -1 }},
		{"negative partition", "partition", func(a *Ack) { a.Partition = -1 }},
		{"empty topic", "topic", func(a *Ack) { a.Topic = "" }},
		{"empty host", "host", func(a *Ack) { a.Host = "" }},
		{"zero send", "send", func(a *Ack) { a.SendNs = 0 }},
		{"zero ack", "acknowledgement", func(a *Ack) { a.AckNs = 0 }},
		{"timestamp type 3", "timestamp type", func(a *Ack) { a.TimestampType = 3 }},
		{"record timestamp -2", "record timestamp", func(a *Ack) { a.RecordTimestampMs = -2 }},
	} {
		a := fullAck()
		edit.f(&a)
		tests = append(tests, struct {
			name string
			data []byte
			want error
			in   string
		}{name: edit.name, data: a.appendUnchecked(nil), want: ErrMalformed, in: edit.in})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a Ack
			err := a.UnmarshalBinary(tc.data)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("err %v, want %v naming %q", err, tc.want, tc.in)
			}
			// The same bytes in a batch: the whole batch is refused, nothing appended.
			batch := append(binary.AppendUvarint([]byte{AckBatchVersion, 1}, uint64(len(tc.data))), tc.data...)
			if as, err := DecodeAckBatch(nil, batch); err == nil || len(as) != 0 {
				t.Fatalf("batch: %d acks, err %v", len(as), err)
			}
		})
	}
	if _, err := AppendAckBatch(nil, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty batch: err %v", err)
	}
	if _, err := DecodeAckBatch(nil, []byte{AckBatchVersion, 0}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty batch: err %v", err)
	}
}

// appendUncheckedCopy returns the v1 bytes of a valid ack (a helper for building refused variants).
func (a Ack) appendUncheckedCopy() ([]byte, error) { return a.AppendBinary(nil) }

func FuzzAckBatch(f *testing.F) {
	b, _ := AppendAckBatch(nil, []Ack{fullAck(), {Topic: "t", Host: "p", SendNs: 1, AckNs: 1}})
	f.Add(b)
	f.Add([]byte{AckBatchVersion, 1, 3, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		as, err := DecodeAckBatch(nil, data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			if len(as) != 0 {
				t.Fatalf("error with %d acks appended", len(as))
			}
			return
		}
		again, err := AppendAckBatch(nil, as)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", data, again)
		}
	})
}

// TestProducerReportsAcks: an instrumented async producer's successes become acks with the header's send stamp, the
// acknowledgement stamp, partition, offset and the broker's timestamp, sent in an ack batch apart from receipts.
func TestProducerReportsAcks(t *testing.T) {
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	receipts := mocks.NewAsyncProducer(t, cfg)
	var sent []*sarama.ProducerMessage
	receipts.ExpectInputWithMessageCheckerFunctionAndSucceed(func(m *sarama.ProducerMessage) error { sent = append(sent, m); return nil })
	em := NewEmitter(receipts, EmitterConfig{Topic: "receipts", Linger: time.Hour, MaxBatch: 2})

	truth := time.Unix(1795953600, 0)
	clock := OffsetClock(func() time.Time { return truth }, 2500*time.Millisecond)
	acks := NewAckReporter(AckConfig{Host: "p1", Clock: clock}, em)
	app := mocks.NewAsyncProducer(t, cfg)
	app.ExpectInputAndSucceed()
	app.ExpectInputAndSucceed()
	p := WrapAsyncProducer(app, acks, true)
	ic := NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: clock, Unit: UnitNanos})
	forwarded := make(chan *sarama.ProducerMessage, 2)
	go func() {
		for m := range p.Successes() {
			forwarded <- m
		}
		close(forwarded)
	}()
	m1 := &sarama.ProducerMessage{Topic: "orders"}
	ic.OnSend(m1) // the mock producer does not run interceptors
	p.Input() <- m1
	other := &sarama.ProducerMessage{Topic: "orders"}
	NewProducerInterceptor(ProducerConfig{Host: "mirror-source", Clock: clock}).OnSend(other)
	p.Input() <- other
	<-forwarded
	<-forwarded
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	em.Close()
	if st := acks.Stats(); st != (AckReporterStats{Reported: 1, OtherHost: 1}) {
		t.Fatalf("reporter stats %+v", st)
	}
	if len(sent) != 1 || !IsAckBatch(mustValue(t, sent[0])) {
		t.Fatalf("%d records sent, want 1 ack batch", len(sent))
	}
	as, err := DecodeAckBatch(nil, mustValue(t, sent[0]))
	if err != nil {
		t.Fatal(err)
	}
	skewed := truth.Add(2500 * time.Millisecond).UnixNano()
	if len(as) != 1 || as[0].SendNs != skewed || as[0].AckNs != skewed || as[0].Host != "p1" || as[0].Topic != "orders" ||
		as[0].Offset != m1.Offset || as[0].Partition != m1.Partition {
		t.Fatalf("acks %+v (message partition %d offset %d)", as, m1.Partition, m1.Offset)
	}
	if es := em.Stats(); es.Acks != (AckStats{Emitted: 1, Sent: 1, Records: 1}) || es.Emitted != 0 {
		t.Fatalf("emitter stats %+v", es)
	}
}

// TestSyncProducerReportsAcks: the sync producer's successes are reported when SendMessage returns.
func TestSyncProducerReportsAcks(t *testing.T) {
	bp := newBlockedProducer() // never read: a full ack queue drops, it never blocks SendMessage
	em := NewEmitter(bp, EmitterConfig{QueueSize: 1, MaxBatch: 100, Linger: time.Hour})
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	app := mocks.NewSyncProducer(t, cfg)
	app.ExpectSendMessageAndSucceed()
	app.ExpectSendMessageAndSucceed()
	app.ExpectSendMessageAndSucceed()
	clock := func() time.Time { return time.Unix(1795953600, 0) }
	acks := NewAckReporter(AckConfig{Host: "p1", Clock: clock}, em)
	p := WrapSyncProducer(app, acks)
	ic := NewProducerInterceptor(ProducerConfig{Host: "p1", Clock: clock})
	for range 3 {
		m := &sarama.ProducerMessage{Topic: "orders"}
		ic.OnSend(m)
		if _, _, err := p.SendMessage(m); err != nil {
			t.Fatal(err)
		}
	}
	// MaxBatch 100 and an hour's linger: the loop holds what it took; the queue of 1 holds one more at most.
	st := em.Stats().Acks
	if acks.Stats().Reported != 3 || st.Emitted != 3 || st.Dropped > 2 {
		t.Fatalf("reporter %+v, emitter acks %+v", acks.Stats(), st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range bp.in {
		}
	}()
	em.Close()
	close(bp.in)
	if st := em.Stats().Acks; st.Failed != 0 || st.Records == 0 {
		t.Fatalf("after Close: %+v, want the held acks handed over", st)
	}
}

func mustValue(t *testing.T, m *sarama.ProducerMessage) []byte {
	t.Helper()
	v, err := m.Value.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
