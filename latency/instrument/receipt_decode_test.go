package instrument

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// decodeFixed (every field's bytes checked once) reads what readFixed (field by field) reads, and fails the same
// way, for every combination of flags, with stamps that are zero (refused when flagged) or not. A failed decode's
// values are thrown away, so only a successful one's are compared.
func TestDecodeFixedMatchesReadFixed(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for flags := range byte(rFlagAll + 1) {
		for range 50 {
			b := make([]byte, fixedLen(flags))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			for at := 4; at+8 <= len(b); at += 8 {
				if rng.IntN(4) == 0 { // a zero stamp somewhere
					binary.BigEndian.PutUint64(b[at:], 0)
				}
			}
			slow, fast := reader{b: b, what: "receipt"}, reader{b: b, what: "receipt"}
			var rs, rf Receipt
			rs.readFixed(&slow, flags)
			rf.decodeFixed(&fast, b, flags)
			if (slow.err == nil && (rs != rf || len(slow.b) != 0)) || errString(slow.err) != errString(fast.err) {
				t.Fatalf("flags %#x: read %+v (%v), decoded %+v (%v)", flags, rs, slow.err, rf, fast.err)
			}
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// BenchmarkDecodeReceiptBatch decodes one receipts record of 256 receipts with every field (the emitter's default
// batch; cmd/bench-collector's shape) into a reused slice, as the collector does. Reports wall and process CPU ns
// per receipt.
//
//	go test ./latency/instrument -run '^$' -bench DecodeReceiptBatch -benchmem
func BenchmarkDecodeReceiptBatch(b *testing.B) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	rs := make([]Receipt, 256)
	for j := range rs {
		off := int64(j)
		rs[j] = Receipt{Group: "bench-app", Topic: "orders", Partition: 3, Offset: off,
			RecordTimestampMs: now.UnixMilli(), HasRecordTimestamp: true, TimestampType: TimestampLogAppend,
			ProduceNs: now.UnixNano(), ProduceHost: "p" + strconv.Itoa(j%3), ReceiveNs: now.UnixNano() + 1e7,
			ProcessedNs: now.UnixNano() + 15e6, Host: "c1", TraceID: [16]byte{byte(off), 1}, SpanID: [8]byte{2},
			HasTrace: true, Clock: ClockOffset{Offset: time.Millisecond, Uncertainty: time.Microsecond, Valid: true}}
	}
	v, err := AppendReceiptBatch(nil, rs)
	if err != nil {
		b.Fatal(err)
	}
	var buf []Receipt
	var ru0, ru1 syscall.Rusage
	b.ReportAllocs()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		if buf, err = DecodeReceiptBatch(buf[:0], v); err != nil {
			b.Fatal(err)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	n := float64(b.N * len(rs))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/receipt")
	b.ReportMetric(float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano())/n, "cpu-ns/receipt")
}

// TestReceiptBatchLen reads the receipt count from an encoded batch's header, and refuses what is not a receipt
// batch's header.
func TestReceiptBatchLen(t *testing.T) {
	for _, n := range []int{1, 127, 128, 256, MaxReceiptsPerBatch} {
		rs := make([]Receipt, n)
		for i := range rs {
			rs[i] = Receipt{Group: "g", Topic: "t", Offset: int64(i), Host: "h", ProcessedNs: 1}
		}
		v, err := AppendReceiptBatch(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := ReceiptBatchLen(v); !ok || got != n {
			t.Errorf("%d receipts: ReceiptBatchLen = %d, %v", n, got, ok)
		}
	}
	acks, err := AppendAckBatch(nil, []Ack{{Topic: "t", Offset: 1, SendNs: 1, AckNs: 2, Host: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][]byte{
		"empty": nil, "version only": {ReceiptBatchVersion}, "zero count": {ReceiptBatchVersion, 0},
		"count too large": binary.AppendUvarint([]byte{ReceiptBatchVersion}, MaxReceiptsPerBatch+1),
		"truncated count": {ReceiptBatchVersion, 0x80}, "an ack batch": acks,
	} {
		if n, ok := ReceiptBatchLen(v); ok {
			t.Errorf("%s: ReceiptBatchLen = %d, true; want false", name, n)
		}
	}
}
