package instrument

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// ReceiptVersion is the version byte of a single receipt this build writes.
const ReceiptVersion = 1

// ReceiptBatchVersion is the version byte of a receipts-topic record value (a batch of receipts).
const ReceiptBatchVersion = 1

// MaxReceiptsPerBatch bounds how many receipts one receipts-topic record may hold; larger counts are rejected as
// malformed so a corrupt count cannot make the decoder allocate without bound.
const MaxReceiptsPerBatch = 4096

// TimestampType says what a Kafka record's own timestamp means. The consumer cannot always tell (sarama does not
// expose the batch attribute), so it may send TimestampUnknown and let the collector resolve it from the topic config.
type TimestampType uint8

// Record timestamp types.
const (
	TimestampUnknown   TimestampType = 0
	TimestampCreate    TimestampType = 1 // producer's clock (CreateTime topic)
	TimestampLogAppend TimestampType = 2 // partition leader's clock (LogAppendTime topic)
)

const (
	rFlagRecordTS = 1 << iota
	rFlagProduce
	rFlagReceive
	rFlagOffset
	rFlagProduceOffset
	rFlagTrace
	rFlagTraceUnsampled // with rFlagTrace: the traceparent's sampled flag was clear
	rFlagAll            = 1<<iota - 1
)

// Receipt is what a consumer reports after it processed one record: which record, the stamps seen along the way, and
// where each was read. Stamps are Unix nanoseconds on the clock of the host that took them; 0 means "not known".
//
// Wire format v1 (big-endian, exact length):
//
//	size  field
//	1     version = 1
//	1     flags: bit0 record ts, bit1 produce stamp, bit2 receive stamp, bit3 consumer clock offset,
//	      bit4 producer clock offset, bit5 trace context, bit6 trace not sampled (only with bit5); bit7 must be 0
//	1     record timestamp type (0 unknown, 1 CreateTime, 2 LogAppendTime)
//	4     partition int32
//	8     offset int64
//	8     processed stamp, ns (consumer clock)
//	8     (bit0) record timestamp, ms, as Kafka carries it (may be -1)
//	8     (bit1) produce stamp, ns (producer clock, from the produce-time header)
//	8     (bit2) receive stamp, ns (consumer clock)
//	12    (bit3) consumer clock offset: int64 ns, uint32 µs uncertainty
//	12    (bit4) producer clock offset: int64 ns, uint32 µs uncertainty
//	24    (bit5) trace id (16 bytes), span id (8 bytes)
//	1+n   group   (length byte, bytes)
//	1+n   topic
//	1+n   consumer host id
//	1+n   producer host id
type Receipt struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64

	// RecordTimestampMs is the record's Kafka timestamp in ms; HasRecordTimestamp says whether it was read. Its
	// meaning is TimestampType (append time on a LogAppendTime topic).
	RecordTimestampMs  int64
	HasRecordTimestamp bool
	TimestampType      TimestampType

	// ProduceNs is the produce stamp from the produce-time header (producer clock), 0 if the record had none.
	ProduceNs    int64
	ProduceHost  string
	ProduceClock ClockOffset

	// ReceiveNs is when the application got the record, 0 if not stamped; ProcessedNs when processing completed.
	// Both on the consumer's clock.
	ReceiveNs   int64
	ProcessedNs int64
	Host        string
	Clock       ClockOffset

	// TraceID and SpanID come from the record's traceparent header; zero when HasTrace is false. TraceUnsampled is
	// set when that header's sampled flag was clear (the producer's trace is not recorded): the zero value, sampled,
	// is what receipts written before the flag existed mean, since their producers always minted sampled traces.
	TraceID        [16]byte
	SpanID         [8]byte
	HasTrace       bool
	TraceUnsampled bool
}

// Processed returns the processed stamp as a time.
func (r *Receipt) Processed() time.Time { return time.Unix(0, r.ProcessedNs) }

// MaxTopicLen is Kafka's limit on a topic name (249 characters, kafka.common.internals.Topic); a receipt naming a
// longer topic cannot describe a real record.
const MaxTopicLen = 249

// Validate reports whether r holds only values a real consumer can produce (docs/instrumentation.md, "Receipt
// validity"). The error names the first offending field and wraps ErrMalformed. The encoder and the decoder both
// apply it, so a receipt that encodes decodes, and a receipt that fails it is dead-lettered by the collector instead
// of being stored. Values that are well-formed but implausible (a stamp in the year 2500, a produce stamp after the
// processed stamp) pass: judging them is the latency engine's job.
func (r *Receipt) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
	}
	for _, s := range [...]struct{ name, v string }{
		{"group", r.Group}, {"topic", r.Topic}, {"host id", r.Host}, {"producer host id", r.ProduceHost},
	} {
		if err := checkStr(s.name, s.v); err != nil {
			return err
		}
	}
	switch {
	case r.Group == "":
		return fail("group is empty")
	case r.Topic == "":
		return fail("topic is empty")
	case len(r.Topic) > MaxTopicLen:
		return fail("topic is %d bytes, Kafka allows at most %d", len(r.Topic), MaxTopicLen)
	case r.Host == "":
		return fail("host id is empty")
	case r.Partition < 0:
		return fail("partition %d is negative", r.Partition)
	case r.Offset < 0:
		return fail("offset %d is negative", r.Offset)
	case r.TimestampType > TimestampLogAppend:
		return fail("unknown timestamp type %d", r.TimestampType)
	case r.ProcessedNs <= 0:
		return fail("processed stamp %d is not positive", r.ProcessedNs)
	case r.ReceiveNs < 0:
		return fail("receive stamp %d is negative", r.ReceiveNs)
	case r.ProduceNs < 0:
		return fail("produce stamp %d is negative", r.ProduceNs)
	case r.HasRecordTimestamp && r.RecordTimestampMs < -1:
		return fail("record timestamp %d ms is negative and not -1 (NO_TIMESTAMP)", r.RecordTimestampMs)
	case r.ProduceNs == 0 && r.ProduceHost != "":
		return fail("producer host id %q without a produce stamp", r.ProduceHost)
	case r.ProduceNs == 0 && r.ProduceClock.Valid:
		return fail("producer clock offset without a produce stamp")
	}
	if err := r.Clock.check("consumer clock"); err != nil {
		return err
	}
	if err := r.ProduceClock.check("producer clock"); err != nil {
		return err
	}
	if r.HasTrace && (r.TraceID == [16]byte{} || r.SpanID == [8]byte{}) {
		return fail("all-zero trace id or span id (invalid in W3C Trace Context)")
	}
	if r.TraceUnsampled && !r.HasTrace {
		return fail("trace sampling flag without trace context")
	}
	return nil
}

// AppendBinary appends the v1 encoding of r to b. It fails, wrapping ErrMalformed, when r does not pass Validate
// (a string longer than 255 bytes, an empty group, a negative offset, ...).
func (r *Receipt) AppendBinary(b []byte) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("encode receipt: %w", err)
	}
	return r.appendUnchecked(b), nil
}

// appendUnchecked appends the v1 layout of r without judging its values (tests use it to build refused bytes).
func (r *Receipt) appendUnchecked(b []byte) []byte {
	var flags byte
	if r.HasRecordTimestamp {
		flags |= rFlagRecordTS
	}
	if r.ProduceNs != 0 {
		flags |= rFlagProduce
	}
	if r.ReceiveNs != 0 {
		flags |= rFlagReceive
	}
	if r.Clock.Valid {
		flags |= rFlagOffset
	}
	if r.ProduceClock.Valid {
		flags |= rFlagProduceOffset
	}
	if r.HasTrace {
		flags |= rFlagTrace
	}
	if r.TraceUnsampled {
		flags |= rFlagTraceUnsampled
	}
	b = append(b, ReceiptVersion, flags, byte(r.TimestampType))
	b = binary.BigEndian.AppendUint32(b, uint32(r.Partition))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Offset))
	b = binary.BigEndian.AppendUint64(b, uint64(r.ProcessedNs))
	if r.HasRecordTimestamp {
		b = binary.BigEndian.AppendUint64(b, uint64(r.RecordTimestampMs))
	}
	if r.ProduceNs != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(r.ProduceNs))
	}
	if r.ReceiveNs != 0 {
		b = binary.BigEndian.AppendUint64(b, uint64(r.ReceiveNs))
	}
	if r.Clock.Valid {
		b = putOffset(b, r.Clock)
	}
	if r.ProduceClock.Valid {
		b = putOffset(b, r.ProduceClock)
	}
	if r.HasTrace {
		b = append(b, r.TraceID[:]...)
		b = append(b, r.SpanID[:]...)
	}
	b = putStr(b, r.Group)
	b = putStr(b, r.Topic)
	b = putStr(b, r.Host)
	return putStr(b, r.ProduceHost)
}

// MarshalBinary encodes r in the v1 layout (see AppendBinary).
func (r *Receipt) MarshalBinary() ([]byte, error) {
	return r.AppendBinary(make([]byte, 0, 96+len(r.Group)+len(r.Topic)+len(r.Host)+len(r.ProduceHost)))
}

// UnmarshalBinary decodes the v1 layout; errors wrap ErrUnsupportedVersion or ErrMalformed. A receipt that follows
// the layout but fails Validate (offset -1, empty topic, ...) is malformed too, and the error names the field.
func (r *Receipt) UnmarshalBinary(data []byte) error {
	rd := reader{b: data, what: "receipt"}
	if err := r.decode(&rd); err != nil {
		return err
	}
	return rd.end()
}

func (r *Receipt) decode(rd *reader) error {
	v := rd.u8("version")
	if rd.err == nil && v != ReceiptVersion {
		return fmt.Errorf("decode receipt: version %d: %w", v, ErrUnsupportedVersion)
	}
	flags := rd.u8("flags")
	tt := TimestampType(rd.u8("timestamp type"))
	if rd.err == nil && flags&^rFlagAll != 0 {
		rd.fail("unknown flags %#x", flags)
	}
	if rd.err == nil && tt > TimestampLogAppend {
		rd.fail("unknown timestamp type %d", tt)
	}
	out := Receipt{TimestampType: tt}
	if need := fixedLen(flags); rd.err == nil && len(rd.b) >= need {
		out.decodeFixed(rd, rd.b[:need], flags)
		rd.b = rd.b[need:]
	} else {
		out.readFixed(rd, flags)
	}
	if flags&rFlagTraceUnsampled != 0 {
		if flags&rFlagTrace == 0 {
			rd.fail("trace-not-sampled flag without trace context")
		}
		out.TraceUnsampled = true
	}
	out.Group = rd.str("group")
	out.Topic = rd.str("topic")
	out.Host = rd.str("host id")
	out.ProduceHost = rd.str("producer host id")
	if rd.err != nil {
		return rd.err
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("decode receipt: %w", err)
	}
	*r = out
	return nil
}

// fixedLen is the length of the fixed-size fields after the timestamp type that flags say are present.
func fixedLen(flags byte) int {
	n := 4 + 8 + 8 // partition, offset, processed
	for _, f := range [...]struct {
		bit  byte
		size int
	}{{rFlagRecordTS, 8}, {rFlagProduce, 8}, {rFlagReceive, 8}, {rFlagOffset, 12}, {rFlagProduceOffset, 12}, {rFlagTrace, 24}} {
		if flags&f.bit != 0 {
			n += f.size
		}
	}
	return n
}

// readFixed reads the fixed-size fields after the timestamp type field by field, each failure naming its field.
func (r *Receipt) readFixed(rd *reader, flags byte) {
	r.Partition = int32(rd.u32("partition"))
	r.Offset = rd.i64("offset")
	r.ProcessedNs = rd.i64("processed")
	if flags&rFlagRecordTS != 0 {
		r.RecordTimestampMs = rd.i64("record timestamp")
		r.HasRecordTimestamp = true
	}
	if flags&rFlagProduce != 0 {
		r.ProduceNs = rd.i64("produce")
		if rd.err == nil && r.ProduceNs == 0 {
			rd.fail("produce flag set with a zero stamp")
		}
	}
	if flags&rFlagReceive != 0 {
		r.ReceiveNs = rd.i64("receive")
		if rd.err == nil && r.ReceiveNs == 0 {
			rd.fail("receive flag set with a zero stamp")
		}
	}
	if flags&rFlagOffset != 0 {
		r.Clock = readOffset(rd, "consumer clock")
	}
	if flags&rFlagProduceOffset != 0 {
		r.ProduceClock = readOffset(rd, "producer clock")
	}
	if flags&rFlagTrace != 0 {
		copy(r.TraceID[:], rd.take(16, "trace id"))
		copy(r.SpanID[:], rd.take(8, "span id"))
		r.HasTrace = true
	}
}

// decodeFixed is readFixed over b, which holds every field flags say is present (fixedLen(flags) bytes, checked
// once instead of per field): the same values and the same failures (a flagged zero stamp), in the same order.
func (r *Receipt) decodeFixed(rd *reader, b []byte, flags byte) {
	be := binary.BigEndian
	i64 := func() int64 { v := int64(be.Uint64(b)); b = b[8:]; return v }
	r.Partition = int32(be.Uint32(b))
	b = b[4:]
	r.Offset = i64()
	r.ProcessedNs = i64()
	if flags&rFlagRecordTS != 0 {
		r.RecordTimestampMs = i64()
		r.HasRecordTimestamp = true
	}
	if flags&rFlagProduce != 0 {
		if r.ProduceNs = i64(); r.ProduceNs == 0 {
			rd.fail("produce flag set with a zero stamp")
		}
	}
	if flags&rFlagReceive != 0 {
		if r.ReceiveNs = i64(); r.ReceiveNs == 0 {
			rd.fail("receive flag set with a zero stamp")
		}
	}
	clock := func() ClockOffset {
		off, unc := i64(), be.Uint32(b)
		b = b[4:]
		return ClockOffset{Offset: time.Duration(off), Uncertainty: time.Duration(unc) * time.Microsecond, Valid: true}
	}
	if flags&rFlagOffset != 0 {
		r.Clock = clock()
	}
	if flags&rFlagProduceOffset != 0 {
		r.ProduceClock = clock()
	}
	if flags&rFlagTrace != 0 {
		copy(r.TraceID[:], b[:16])
		copy(r.SpanID[:], b[16:24])
		r.HasTrace = true
	}
}

// AppendReceiptBatch appends a receipts-topic record value holding rs to b.
//
// Batch wire format v1: version byte = 1, uvarint count (1..MaxReceiptsPerBatch), then per receipt a uvarint length
// and that many bytes of a v1 receipt.
func AppendReceiptBatch(b []byte, rs []Receipt) ([]byte, error) {
	if len(rs) == 0 || len(rs) > MaxReceiptsPerBatch {
		return nil, fmt.Errorf("encode receipt batch: %d receipts, want 1..%d: %w", len(rs), MaxReceiptsPerBatch, ErrMalformed)
	}
	b = append(b, ReceiptBatchVersion)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	var tmp []byte
	for i := range rs {
		var err error
		tmp, err = rs[i].AppendBinary(tmp[:0])
		if err != nil {
			return nil, fmt.Errorf("encode receipt batch item %d: %w", i, err)
		}
		b = binary.AppendUvarint(b, uint64(len(tmp)))
		b = append(b, tmp...)
	}
	return b, nil
}

// maxReceiptLen bounds one encoded receipt: fixed part plus four 255-byte strings.
const maxReceiptLen = 3 + 4 + 8*5 + 12*2 + 24 + 4*256

// ReceiptBatchLen returns the number of receipts a receipts-topic record value declares in its header (version and
// count), without decoding them; ok is false when the header is not a receipt batch's (DecodeReceiptBatch says why).
func ReceiptBatchLen(data []byte) (n int, ok bool) {
	rd := reader{b: data, what: receiptBatch.batch}
	c := receiptBatch.header(&rd)
	return int(c), rd.err == nil
}

// DecodeReceiptBatch decodes a receipts-topic record value, appending to dst. On error nothing is appended: a batch is
// accepted or dead-lettered whole. Errors wrap ErrUnsupportedVersion or ErrMalformed.
func DecodeReceiptBatch(dst []Receipt, data []byte) ([]Receipt, error) {
	return decodeBatch(dst, data, receiptBatch)
}

// decoder is a batch item that decodes itself from one item's bytes (Receipt, Ack).
type decoder[T any] interface {
	*T
	decode(rd *reader) error
}

// batchKind names a batch's wire form for decodeBatch and its errors (constant strings: the decoder allocates none).
type batchKind struct {
	batch, item, length string // "receipt batch", "receipt", "receipt length"
	version             byte
	maxLen              uint64 // one encoded item's bound
}

var (
	receiptBatch = batchKind{"receipt batch", "receipt", "receipt length", ReceiptBatchVersion, maxReceiptLen}
	ackBatch     = batchKind{"ack batch", "ack", "ack length", AckBatchVersion, maxAckLen}
)

// header reads a batch's version byte and its count (1..MaxReceiptsPerBatch) and returns the count; a wrong version
// (ErrUnsupportedVersion) or a malformed count (ErrMalformed) is left in rd.err.
func (k batchKind) header(rd *reader) uint64 {
	v := rd.u8("version")
	if rd.err == nil && v != k.version {
		rd.err = fmt.Errorf("decode %s: version %d: %w", k.batch, v, ErrUnsupportedVersion)
		return 0
	}
	n := rd.uvarint("count", MaxReceiptsPerBatch)
	if rd.err == nil && n == 0 {
		rd.fail("empty batch")
	}
	return n
}

// decodeBatch decodes a batch of kind k: the version byte, a count of at most MaxReceiptsPerBatch, then each item's
// length (at most k.maxLen) and bytes; it appends to dst, or nothing on error.
// Items of one batch nearly always share group, topic and hosts: they share the strings too, so a batch costs one
// allocation per distinct value instead of one per string per item.
func decodeBatch[T any, P decoder[T]](dst []T, data []byte, k batchKind) ([]T, error) {
	rd := reader{b: data, what: k.batch}
	n := k.header(&rd)
	if rd.err != nil {
		return dst, rd.err
	}
	start := len(dst)
	// One allocation instead of doubling; each item takes at least a byte, so a count the record cannot hold
	// reserves no more than the record's size.
	dst = slices.Grow(dst, min(int(n), len(data)))
	var strs interner
	var brd reader // one for every item: a method called through the type parameter makes its argument escape
	var zero T
	for i := uint64(0); i < n; i++ {
		l := rd.uvarint(k.length, k.maxLen)
		body := rd.take(int(l), k.item)
		if rd.err != nil {
			return dst[:start], rd.err
		}
		brd = reader{b: body, what: k.item, strs: &strs}
		dst = append(dst, zero) // decoded in place, for the same reason
		err := P(&dst[len(dst)-1]).decode(&brd)
		if err == nil {
			err = brd.end()
		}
		if err != nil {
			return dst[:start], fmt.Errorf("decode %s item %d: %w", k.batch, i, err)
		}
	}
	if err := rd.end(); err != nil {
		return dst[:start], err
	}
	return dst, nil
}
