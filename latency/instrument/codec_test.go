package instrument

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProduceHeaderGolden(t *testing.T) {
	// 2026-11-29T12:00:00.123456Z in µs (0x66169085e5240, computed independently with Python), host "p1", no offset:
	// every byte of the documented v1 layout.
	h := ProduceHeader{Time: time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC), Unit: UnitMicros, Host: "p1"}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	const want = "01" + "02" + "00066169085e5240" + "00" + "02" + "7031"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding = %s, want %s", got, want)
	}
	var back ProduceHeader
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	// µs resolution: the 789 ns are truncated.
	if want := time.Date(2026, 11, 29, 12, 0, 0, 123456000, time.UTC); !back.Time.Equal(want) || back.Host != "p1" || back.Unit != UnitMicros || back.Offset.Valid {
		t.Fatalf("decoded %+v", back)
	}
}

func TestProduceHeaderRoundTrip(t *testing.T) {
	ts := time.Unix(1795953600, 987654321)
	tests := []struct {
		name string
		in   ProduceHeader
		want time.Time
	}{
		{"millis truncates", ProduceHeader{Time: ts, Unit: UnitMillis, Host: "a"}, time.Unix(1795953600, 987000000)},
		{"nanos exact", ProduceHeader{Time: ts, Unit: UnitNanos, Host: "host-2"}, ts},
		{"default unit is micros", ProduceHeader{Time: ts, Host: ""}, time.Unix(1795953600, 987654000)},
		// The offset rounds its uncertainty up to whole µs, never claiming more precision than measured.
		{"with clock offset", ProduceHeader{Time: ts, Unit: UnitNanos, Host: "h",
			Offset: ClockOffset{Offset: 2500 * time.Millisecond, Uncertainty: 1500 * time.Nanosecond, Valid: true}}, ts},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.in.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			var got ProduceHeader
			if err := got.UnmarshalBinary(b); err != nil {
				t.Fatal(err)
			}
			if !got.Time.Equal(tc.want) || got.Host != tc.in.Host {
				t.Fatalf("got %v %q, want %v %q", got.Time, got.Host, tc.want, tc.in.Host)
			}
			if tc.in.Offset.Valid {
				want := ClockOffset{Offset: tc.in.Offset.Offset, Uncertainty: 2 * time.Microsecond, Valid: true}
				if got.Offset != want {
					t.Fatalf("offset %+v, want %+v", got.Offset, want)
				}
			}
		})
	}
}

func TestProduceHeaderRejects(t *testing.T) {
	good, _ := ProduceHeader{Time: time.Unix(1, 0), Host: "h"}.MarshalBinary()
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"future version", append([]byte{2}, good[1:]...), ErrUnsupportedVersion},
		{"unknown unit", append([]byte{1, 9}, good[2:]...), ErrMalformed},
		{"truncated stamp", good[:6], ErrMalformed},
		{"unknown flag bit", append(append(append([]byte{}, good[:10]...), 0x80), good[11:]...), ErrMalformed},
		{"host length past end", append(append([]byte{}, good[:11]...), 5, 'h'), ErrMalformed},
		{"trailing byte", append(append([]byte{}, good...), 0), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h ProduceHeader
			if err := h.UnmarshalBinary(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := (ProduceHeader{Host: string(make([]byte, 256))}).MarshalBinary(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("256-byte host id: error %v, want ErrMalformed", err)
	}
}

func fullReceipt() Receipt {
	return Receipt{
		Group: "billing", Topic: "orders", Partition: 7, Offset: 1604800,
		RecordTimestampMs: 1795953600020, HasRecordTimestamp: true, TimestampType: TimestampLogAppend,
		ProduceNs: 1795953602500000000, ProduceHost: "p1",
		ProduceClock: ClockOffset{Offset: 2500 * time.Millisecond, Uncertainty: 300 * time.Microsecond, Valid: true},
		ReceiveNs:    1795953599720000000, ProcessedNs: 1795953599820000000, Host: "c1",
		Clock:   ClockOffset{Offset: -300 * time.Millisecond, Uncertainty: time.Millisecond, Valid: true},
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, HasTrace: true,
	}
}

func TestReceiptRoundTrip(t *testing.T) {
	minimal := Receipt{Group: "g", Topic: "t", Partition: 0, Offset: 0, ProcessedNs: 1, Host: "c"}
	// A -1 record timestamp (NO_TIMESTAMP) must survive as -1: judging it is the latency engine's job.
	sentinel := Receipt{Group: "g", Topic: "legacy", Offset: 10, RecordTimestampMs: -1, HasRecordTimestamp: true, ProcessedNs: 5, Host: "c"}
	for _, in := range []Receipt{fullReceipt(), minimal, sentinel} {
		b, err := in.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got Receipt
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if got != in {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
		}
	}
	// Size check: the full receipt is 3+4+8+8 + 8+8+8 + 12+12 + 24 + (1+7)+(1+6)+(1+2)+(1+2) = 116 bytes.
	full := fullReceipt()
	b, _ := full.MarshalBinary()
	if len(b) != 116 {
		t.Fatalf("full receipt is %d bytes, want 116", len(b))
	}
}

func TestReceiptRejects(t *testing.T) {
	full := fullReceipt()
	good, _ := full.MarshalBinary()
	mut := func(i int, v byte) []byte { c := bytes.Clone(good); c[i] = v; return c }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"future version", mut(0, 9), ErrUnsupportedVersion},
		{"unknown flag", mut(1, good[1]|0x80), ErrMalformed},
		{"unknown timestamp type", mut(2, 3), ErrMalformed},
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"trailing", append(bytes.Clone(good), 1), ErrMalformed},
		// Flags promise a produce stamp but it is zero: an encoder never writes that, so it is garbage.
		{"zero produce stamp", func() []byte { c := bytes.Clone(good); copy(c[31:39], make([]byte, 8)); return c }(), ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r Receipt
			if err := r.UnmarshalBinary(tc.in); !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReceiptBatch(t *testing.T) {
	rs := []Receipt{fullReceipt(), {Group: "g", Topic: "t", Offset: 3, ProcessedNs: 9, Host: "c"}}
	b, err := AppendReceiptBatch(nil, rs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReceiptBatch([]Receipt{{Offset: 99}}, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Offset != 99 || got[1] != rs[0] || got[2] != rs[1] {
		t.Fatalf("decoded %+v", got)
	}
	// A corrupt second item rejects the whole batch and appends nothing.
	bad := bytes.Clone(b)
	bad[len(bad)-1] = 200 // producer host id length now runs past the end
	got, err = DecodeReceiptBatch(nil, bad)
	if !errors.Is(err, ErrMalformed) || len(got) != 0 {
		t.Fatalf("corrupt batch: %d receipts, error %v", len(got), err)
	}
	// A count above MaxReceiptsPerBatch is refused before any allocation.
	if _, err := DecodeReceiptBatch(nil, []byte{1, 0xff, 0xff, 0x03}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("huge count: %v", err)
	}
	if _, err := AppendReceiptBatch(nil, nil); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty batch encodes: %v", err)
	}
}

func FuzzProduceHeader(f *testing.F) {
	for _, h := range []ProduceHeader{
		{Time: time.Unix(1795953600, 5), Unit: UnitNanos, Host: "p1"},
		{Time: time.Unix(0, 0), Unit: UnitMillis, Offset: ClockOffset{Offset: -time.Second, Valid: true}},
	} {
		b, _ := h.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0})
	// A clock offset one past +24 h (refused) and one at −24 h (kept).
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0x00, 0x00, 0x4e, 0x94, 0x91, 0x4f, 0x00, 0x01, 0, 0, 0, 0, 1, 'p'})
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0xff, 0xff, 0xb1, 0x6b, 0x6e, 0xb1, 0x00, 0x00, 0, 0, 0, 0, 1, 'p'})
	f.Fuzz(func(t *testing.T, data []byte) {
		var h ProduceHeader
		if err := h.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		// Whatever decodes re-encodes to a value that decodes the same (stamps may saturate, so compare decoded).
		b, err := h.MarshalBinary()
		if err != nil {
			t.Fatalf("re-encode %+v: %v", h, err)
		}
		var h2 ProduceHeader
		if err := h2.UnmarshalBinary(b); err != nil || h2.Host != h.Host || h2.Offset != h.Offset {
			t.Fatalf("re-decode: %+v %v, want %+v", h2, err, h)
		}
	})
}

func FuzzReceiptBatch(f *testing.F) {
	b, _ := AppendReceiptBatch(nil, []Receipt{fullReceipt(), {Group: "g", Topic: "t", ProcessedNs: 1, Host: "c"}})
	f.Add(b)
	f.Add([]byte{1, 1, 3, 1, 0, 0})
	// Layout-correct batches holding one receipt each that Validate refuses (defect 3 and the rules after it), so the
	// fuzzer starts next to every rule's boundary.
	for _, edit := range []func(r *Receipt){
		func(r *Receipt) { r.Offset = -1 },
		func(r *Receipt) { r.Partition = -1 },
		func(r *Receipt) { r.Group = "" },
		func(r *Receipt) { r.Topic = "" },
		func(r *Receipt) { r.Host = "" },
		func(r *Receipt) { r.ProcessedNs = -1 },
		func(r *Receipt) { r.RecordTimestampMs = -2 },
		func(r *Receipt) { r.Clock.Offset = MaxClockOffset + 1 },
		func(r *Receipt) { r.ProduceNs, r.ProduceClock = 0, ClockOffset{} },
		func(r *Receipt) { r.SpanID = [8]byte{} },
	} {
		r := fullReceipt()
		edit(&r)
		body := r.appendUnchecked(nil)
		f.Add(append(binary.AppendUvarint([]byte{ReceiptBatchVersion, 1}, uint64(len(body))), body...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeReceiptBatch(nil, data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			if len(rs) != 0 {
				t.Fatalf("error with %d receipts appended", len(rs))
			}
			return
		}
		// A batch that decodes re-encodes to exactly the same bytes: the format has one encoding per value.
		again, err := AppendReceiptBatch(nil, rs)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, data) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", data, again)
		}
	})
}

// TestReceiptValidity covers Receipt.Validate, one row per rule of docs/instrumentation.md ("Receipt validity"): the
// bytes follow the v1 layout, yet no real consumer writes them, so the decoder refuses them (and the collector
// dead-letters the batch) with an error naming the field, and the encoder refuses the same value.
func TestReceiptValidity(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(r *Receipt)
		field string // substring the error must contain; "" means the receipt is valid
	}{
		// Defect 3: these decoded and were stored as live rows.
		{"offset -1", func(r *Receipt) { r.Offset = -1 }, "offset -1"},
		{"partition -1", func(r *Receipt) { r.Partition = -1 }, "partition -1"},
		{"empty group", func(r *Receipt) { r.Group = "" }, "group"},
		{"empty topic", func(r *Receipt) { r.Topic = "" }, "topic"},
		// Kafka refuses topic names over 249 characters; 250 cannot name a real record.
		{"topic over Kafka's limit", func(r *Receipt) { r.Topic = strings.Repeat("t", 250) }, "topic is 250 bytes"},
		{"topic at Kafka's limit", func(r *Receipt) { r.Topic = strings.Repeat("t", 249) }, ""},
		// The consumer helper refuses an empty host id; the collector keys clock estimates by it.
		{"empty host id", func(r *Receipt) { r.Host = "" }, "host id is empty"},
		{"255-byte host id", func(r *Receipt) { r.Host = strings.Repeat("h", 255) }, ""},
		// Done always stamps processed from the clock; 0 or before 1970 is no clock reading.
		{"processed 0", func(r *Receipt) { r.ProcessedNs = 0 }, "processed stamp 0"},
		{"processed negative", func(r *Receipt) { r.ProcessedNs = -5 }, "processed stamp -5"},
		{"receive negative", func(r *Receipt) { r.ReceiveNs = -1 }, "receive stamp -1"},
		// The consumer drops a produce-time header with a stamp ≤ 0 (counted as a bad header).
		{"produce negative", func(r *Receipt) { r.ProduceNs = -1 }, "produce stamp -1"},
		// -1 is Kafka's NO_TIMESTAMP and is kept for the engine to judge; -2 is not a Kafka value.
		{"record timestamp -1 kept", func(r *Receipt) { r.RecordTimestampMs = -1 }, ""},
		{"record timestamp -2", func(r *Receipt) { r.RecordTimestampMs = -2 }, "record timestamp -2"},
		// Implausible but well-formed stamps are the latency engine's to flag, not the decoder's.
		{"stamp in year 2262 kept", func(r *Receipt) { r.ProcessedNs = 1<<63 - 1 }, ""},
		{"produce after processed kept", func(r *Receipt) { r.ProduceNs = r.ProcessedNs + int64(time.Hour) }, ""},
		// Offsets beyond a day would overflow the engine's corrections; the helpers send them as invalid instead.
		{"consumer offset over 24h", func(r *Receipt) { r.Clock.Offset = MaxClockOffset + 1 }, "consumer clock offset"},
		{"consumer offset under -24h", func(r *Receipt) { r.Clock.Offset = -MaxClockOffset - 1 }, "consumer clock offset"},
		{"producer offset at 24h kept", func(r *Receipt) { r.ProduceClock.Offset = -MaxClockOffset }, ""},
		{"producer offset int64 min", func(r *Receipt) { r.ProduceClock.Offset = -1 << 63 }, "producer clock offset"},
		// The consumer copies producer host and offset only from a decoded produce-time header, with its stamp.
		{"producer host without stamp", func(r *Receipt) { r.ProduceNs, r.ProduceClock = 0, ClockOffset{} }, "producer host id"},
		{"producer offset without stamp", func(r *Receipt) { r.ProduceNs, r.ProduceHost = 0, "" }, "producer clock offset without"},
		// W3C Trace Context forbids all-zero ids; TraceParent never returns them.
		{"zero trace id", func(r *Receipt) { r.TraceID = [16]byte{} }, "trace id"},
		{"zero span id", func(r *Receipt) { r.SpanID = [8]byte{} }, "span id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := fullReceipt()
			tc.edit(&r)
			var got Receipt
			err := got.UnmarshalBinary(r.appendUnchecked(nil))
			_, encErr := r.MarshalBinary()
			if tc.field == "" {
				if err != nil || encErr != nil || got != r {
					t.Fatalf("valid receipt: decode %v, encode %v, got %+v", err, encErr, got)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("decode error %v, want ErrMalformed naming %q", err, tc.field)
			}
			if !errors.Is(encErr, ErrMalformed) {
				t.Fatalf("encode error %v, want ErrMalformed", encErr)
			}
			// A batch holding it is refused whole: the collector dead-letters it.
			ok := fullReceipt()
			batch := append([]byte{ReceiptBatchVersion, 2}, byte(len(ok.appendUnchecked(nil))))
			batch = ok.appendUnchecked(batch)
			bad := r.appendUnchecked(nil)
			batch = binary.AppendUvarint(batch, uint64(len(bad)))
			if rs, err := DecodeReceiptBatch(nil, append(batch, bad...)); !errors.Is(err, ErrMalformed) || len(rs) != 0 {
				t.Fatalf("batch: %d receipts, error %v", len(rs), err)
			}
		})
	}
	// The wire cannot carry a negative uncertainty (uint32 µs): the encoder refuses one instead of claiming 0.
	r := fullReceipt()
	r.Clock.Uncertainty = -time.Microsecond
	if _, err := r.MarshalBinary(); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "uncertainty") {
		t.Fatalf("negative uncertainty: %v", err)
	}
}

func TestProduceHeaderOffsetBound(t *testing.T) {
	h := ProduceHeader{Time: time.Unix(1795953600, 0), Host: "p", Offset: ClockOffset{Offset: MaxClockOffset, Valid: true}}
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatalf("offset at the bound: %v", err)
	}
	// Patch the offset to one past +24 h: the layout is fine, the value is not.
	binary.BigEndian.PutUint64(b[11:19], uint64(MaxClockOffset+1))
	var got ProduceHeader
	if err := got.UnmarshalBinary(b); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "clock offset") {
		t.Fatalf("offset past the bound: %v", err)
	}
	h.Offset.Offset = -MaxClockOffset - 1
	if _, err := h.MarshalBinary(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encode offset past the bound: %v", err)
	}
	h.Offset = ClockOffset{Uncertainty: -1, Valid: true}
	if _, err := h.MarshalBinary(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("encode negative uncertainty: %v", err)
	}
}

func TestTraceParent(t *testing.T) {
	const good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name string
		in   string
		want error // nil: parses
	}{
		{"valid", good, nil},
		{"absent", "", ErrNoTraceParent},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01", ErrMalformedTraceParent},
		{"short trace id", "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01", ErrMalformedTraceParent},
		{"long span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b700-01", ErrMalformedTraceParent},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ErrMalformedTraceParent},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ErrMalformedTraceParent},
		// Version ff is forbidden by W3C Trace Context §3.2.2.1.
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ErrMalformedTraceParent},
		{"garbage", "hello", ErrMalformedTraceParent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tid, sid, err := TraceParent([]byte(tc.in))
			if tc.want == nil {
				if err != nil || hex.EncodeToString(tid[:]) != good[3:35] || hex.EncodeToString(sid[:]) != good[36:52] {
					t.Fatalf("got %x %x %v", tid, sid, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if _, _, ok := ParseTraceParent([]byte(tc.in)); ok {
				t.Fatal("ParseTraceParent accepted it")
			}
		})
	}
}

// TestReceiptBatchSharesStrings decodes a batch whose receipts share group, topic and consumer host and cycle
// through producer hosts: the strings are allocated once per distinct value, not per receipt, and a batch with more
// distinct names than the decoder remembers still decodes every one exactly.
func TestReceiptBatchSharesStrings(t *testing.T) {
	batch := func(hosts int) []Receipt {
		rs := make([]Receipt, 256)
		for i := range rs {
			rs[i] = Receipt{Group: "orders-svc", Topic: "orders", Partition: 3, Offset: int64(i), ProcessedNs: 9,
				Host: "c1", ProduceNs: 5, ProduceHost: "p" + strconv.Itoa(i%hosts)}
		}
		return rs
	}
	for _, hosts := range []int{3, 40} {
		rs := batch(hosts)
		b, err := AppendReceiptBatch(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeReceiptBatch(nil, b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, rs) {
			t.Fatalf("%d producer hosts: decoded receipts differ from those encoded", hosts)
		}
	}
	b, _ := AppendReceiptBatch(nil, batch(3))
	dst := make([]Receipt, 0, 256)
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := DecodeReceiptBatch(dst[:0], b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 8 { // 6 distinct strings; 4 per receipt (1024) without sharing
		t.Fatalf("decoding 256 receipts with 6 distinct strings allocated %.0f times, want <= 8", allocs)
	}
}
