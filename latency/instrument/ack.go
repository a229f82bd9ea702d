package instrument

import (
	"encoding/binary"
	"fmt"
)

// AckVersion is the version byte of a single producer acknowledgement this build writes.
const AckVersion = 1

// AckBatchVersion is the first byte of a receipts-topic record value holding producer acknowledgements. It differs
// from ReceiptBatchVersion so that a collector that knows only receipt batches refuses the record as an unsupported
// version (it dead-letters it, reason unsupported_version) instead of misreading it; receipt batches are unchanged.
const AckBatchVersion = 2

const (
	aFlagRecordTS = 1 << iota
	aFlagAll      = 1<<iota - 1
)

// Ack is what an instrumented producer reports for one record the broker acknowledged: the record (topic,
// partition, offset), the producer host's send stamp (from the record's produce-time header) and its acknowledgement
// stamp (when the success reached the application), both on that host's clock, and the record timestamp the
// acknowledgement carried. On a LogAppendTime topic that timestamp is the leader's append stamp, so
// send ≤ append ≤ ack brackets the producer host's clock against the broker's (docs/latency.md, "Producer brackets").
//
// Wire format v1 (big-endian, exact length):
//
//	size  field
//	1     version = 1
//	1     flags: bit0 record timestamp; other bits must be 0
//	1     record timestamp type (0 unknown, 1 CreateTime, 2 LogAppendTime)
//	4     partition int32
//	8     offset int64
//	8     send stamp, ns (producer clock)
//	8     acknowledgement stamp, ns (producer clock)
//	8     (bit0) record timestamp, ms, as the acknowledgement carried it
//	1+n   topic   (length byte, bytes)
//	1+n   producer host id
type Ack struct {
	Topic     string
	Partition int32
	Offset    int64

	// SendNs and AckNs are Unix nanoseconds on the producer host's clock.
	SendNs int64
	AckNs  int64
	Host   string

	// RecordTimestampMs is the timestamp the broker's acknowledgement gave the record (its LogAppendTime on a
	// LogAppendTime topic); HasRecordTimestamp says whether there was one. TimestampType says what it means when the
	// producer knows (it usually does not: TimestampUnknown, resolved by the collector from the topic config).
	RecordTimestampMs  int64
	HasRecordTimestamp bool
	TimestampType      TimestampType
}

// Validate reports whether a holds only values a real producer writes: non-empty topic (at most MaxTopicLen bytes)
// and host id (at most 255 bytes), non-negative partition and offset, positive send and acknowledgement stamps, a
// known timestamp type, a record timestamp of -1 or more. The error names the field and wraps ErrMalformed. An
// acknowledgement stamp before the send stamp passes (a clock stepped back in between): the latency engine refuses
// such a round trip and counts it.
func (a *Ack) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
	}
	for _, s := range [...]struct{ name, v string }{{"topic", a.Topic}, {"producer host id", a.Host}} {
		if err := checkStr(s.name, s.v); err != nil {
			return err
		}
	}
	switch {
	case a.Topic == "":
		return fail("topic is empty")
	case len(a.Topic) > MaxTopicLen:
		return fail("topic is %d bytes, Kafka allows at most %d", len(a.Topic), MaxTopicLen)
	case a.Host == "":
		return fail("producer host id is empty")
	case a.Partition < 0:
		return fail("partition %d is negative", a.Partition)
	case a.Offset < 0:
		return fail("offset %d is negative", a.Offset)
	case a.SendNs <= 0:
		return fail("send stamp %d is not positive", a.SendNs)
	case a.AckNs <= 0:
		return fail("acknowledgement stamp %d is not positive", a.AckNs)
	case a.TimestampType > TimestampLogAppend:
		return fail("unknown timestamp type %d", a.TimestampType)
	case a.HasRecordTimestamp && a.RecordTimestampMs < -1:
		return fail("record timestamp %d ms is negative and not -1 (NO_TIMESTAMP)", a.RecordTimestampMs)
	}
	return nil
}

// AppendBinary appends the v1 encoding of a to b; it fails, wrapping ErrMalformed, when a does not pass Validate.
func (a *Ack) AppendBinary(b []byte) ([]byte, error) {
	if err := a.Validate(); err != nil {
		return nil, fmt.Errorf("encode ack: %w", err)
	}
	return a.appendUnchecked(b), nil
}

func (a *Ack) appendUnchecked(b []byte) []byte {
	var flags byte
	if a.HasRecordTimestamp {
		flags |= aFlagRecordTS
	}
	b = append(b, AckVersion, flags, byte(a.TimestampType))
	b = binary.BigEndian.AppendUint32(b, uint32(a.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(a.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(a.SendNs))
	b = binary.BigEndian.AppendUint64(b, uint64(a.AckNs))
	if a.HasRecordTimestamp {
		b = binary.BigEndian.AppendUint64(b, uint64(a.RecordTimestampMs))
	}
	b = putStr(b, a.Topic)
	return putStr(b, a.Host)
}

// UnmarshalBinary decodes the v1 layout; errors wrap ErrUnsupportedVersion or ErrMalformed (also for a value that
// follows the layout but fails Validate).
func (a *Ack) UnmarshalBinary(data []byte) error {
	rd := reader{b: data, what: "ack"}
	if err := a.decode(&rd); err != nil {
		return err
	}
	return rd.end()
}

func (a *Ack) decode(rd *reader) error {
	v := rd.u8("version")
	if rd.err == nil && v != AckVersion {
		return fmt.Errorf("decode ack: version %d: %w", v, ErrUnsupportedVersion)
	}
	flags := rd.u8("flags")
	tt := TimestampType(rd.u8("timestamp type"))
	if rd.err == nil && flags&^aFlagAll != 0 {
		rd.fail("unknown flags %#x", flags)
	}
	out := Ack{TimestampType: tt}
	out.Partition = int32(rd.u32("partition"))
	out.Offset = rd.i64("offset")
	out.SendNs = rd.i64("send")
	out.AckNs = rd.i64("ack")
	if flags&aFlagRecordTS != 0 {
		out.RecordTimestampMs = rd.i64("record timestamp")
		out.HasRecordTimestamp = true
	}
	out.Topic = rd.str("topic")
	out.Host = rd.str("producer host id")
	if rd.err != nil {
		return rd.err
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("decode ack: %w", err)
	}
	*a = out
	return nil
}

// maxAckLen bounds one encoded acknowledgement: fixed part plus two 255-byte strings.
const maxAckLen = 3 + 4 + 8*4 + 2*256

// AppendAckBatch appends a receipts-topic record value holding as to b.
//
// Ack batch wire format v1: first byte AckBatchVersion (2), uvarint count (1..MaxReceiptsPerBatch), then per
// acknowledgement a uvarint length and that many bytes of a v1 Ack.
func AppendAckBatch(b []byte, as []Ack) ([]byte, error) {
	if len(as) == 0 || len(as) > MaxReceiptsPerBatch {
		return nil, fmt.Errorf("encode ack batch: %d acks, want 1..%d: %w", len(as), MaxReceiptsPerBatch, ErrMalformed)
	}
	b = append(b, AckBatchVersion)
	b = binary.AppendUvarint(b, uint64(len(as)))
	var tmp []byte
	for i := range as {
		var err error
		tmp, err = as[i].AppendBinary(tmp[:0])
		if err != nil {
			return nil, fmt.Errorf("encode ack batch item %d: %w", i, err)
		}
		b = binary.AppendUvarint(b, uint64(len(tmp)))
		b = append(b, tmp...)
	}
	return b, nil
}

// IsAckBatch reports whether a receipts-topic record value is an ack batch (its first byte is AckBatchVersion)
// rather than a receipt batch; decode it with DecodeAckBatch.
func IsAckBatch(data []byte) bool { return len(data) > 0 && data[0] == AckBatchVersion }

// DecodeAckBatch decodes an ack batch, appending to dst. On error nothing is appended: a batch is accepted or
// dead-lettered whole. Errors wrap ErrUnsupportedVersion or ErrMalformed.
func DecodeAckBatch(dst []Ack, data []byte) ([]Ack, error) {
	return decodeBatch(dst, data, ackBatch)
}
