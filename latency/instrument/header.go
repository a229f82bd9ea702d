package instrument

import (
	"encoding/binary"
	"fmt"
	"time"
)

// HeaderProduceTime is the record header key carrying the produce-time stamp ([ProduceHeader]). It is needed because a
// Kafka record carries only one timestamp: on a LogAppendTime topic the broker overwrites the producer's.
const HeaderProduceTime = "tidemark-pt"

// HeaderTraceParent is the W3C Trace Context header key, written through OpenTelemetry's propagator.
const HeaderTraceParent = "traceparent"

// ProduceHeaderVersion is the version byte of the produce-time header this build writes.
const ProduceHeaderVersion = 1

// Unit is the resolution a stamp was taken in. The header keeps it so a reader knows the precision of the stamp.
type Unit uint8

// Units a produce-time stamp may be written in.
const (
	UnitMillis Unit = 1
	UnitMicros Unit = 2
	UnitNanos  Unit = 3
)

func (u Unit) String() string {
	switch u {
	case UnitMillis:
		return "ms"
	case UnitMicros:
		return "us"
	case UnitNanos:
		return "ns"
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

func (u Unit) duration() time.Duration {
	switch u {
	case UnitMillis:
		return time.Millisecond
	case UnitMicros:
		return time.Microsecond
	case UnitNanos:
		return time.Nanosecond
	}
	return 0
}

const headerFlagOffset = 1 << 0

// ProduceHeader is the value of the [HeaderProduceTime] header: when and where a record was produced, on the producer
// host's own clock.
//
// Wire format v1 (big-endian, exact length, nothing may follow):
//
//	offset  size  field
//	0       1     version = 1
//	1       1     unit: 1 = ms, 2 = µs, 3 = ns
//	2       8     stamp: int64, units since the Unix epoch, producer host clock
//	10      1     flags: bit 0 = clock offset present; other bits must be 0
//	11      12    (if bit 0) clock offset: int64 ns (host − collector), uint32 µs uncertainty
//	..      1     host id length n (0..255)
//	..      n     host id (UTF-8)
type ProduceHeader struct {
	// Time is the produce time on the producer host's clock, truncated to Unit.
	Time time.Time
	// Unit is the resolution Time was written in; 0 means UnitMicros when marshalling.
	Unit Unit
	// Host identifies the producer host (its clock); the collector estimates one clock offset per host id.
	Host string
	// Offset is the host's measured clock offset against the collector when it runs TimeSync, else invalid.
	Offset ClockOffset
}

// MarshalBinary encodes h in the v1 layout. It fails when the host id is longer than 255 bytes, the unit is unknown or
// a valid Offset is beyond ±MaxClockOffset or has a negative uncertainty.
func (h ProduceHeader) MarshalBinary() ([]byte, error) {
	return h.AppendBinary(make([]byte, 0, 32+len(h.Host)))
}

// AppendBinary appends the v1 encoding of h to b (see MarshalBinary).
func (h ProduceHeader) AppendBinary(b []byte) ([]byte, error) {
	unit := h.Unit
	if unit == 0 {
		unit = UnitMicros
	}
	d := unit.duration()
	if d == 0 {
		return nil, fmt.Errorf("encode produce header: unknown unit %d: %w", unit, ErrMalformed)
	}
	if err := checkStr("host id", h.Host); err != nil {
		return nil, fmt.Errorf("encode produce header: %w", err)
	}
	if err := h.Offset.check("clock"); err != nil {
		return nil, fmt.Errorf("encode produce header: %w", err)
	}
	b = append(b, ProduceHeaderVersion, byte(unit))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Time.UnixNano()/int64(d)))
	var flags byte
	if h.Offset.Valid {
		flags |= headerFlagOffset
	}
	b = append(b, flags)
	if h.Offset.Valid {
		b = putOffset(b, h.Offset)
	}
	return putStr(b, h.Host), nil
}

// UnmarshalBinary decodes the v1 layout. Errors wrap ErrUnsupportedVersion for another version byte and ErrMalformed
// for anything else that does not follow the layout, including a clock offset beyond ±MaxClockOffset. Stamps are not
// judged here (a -1 or absurd stamp decodes fine); the consumer drops a stamp ≤ 0 and the latency engine judges the
// rest.
func (h *ProduceHeader) UnmarshalBinary(data []byte) error {
	r := reader{b: data, what: "produce header"}
	v := r.u8("version")
	if r.err == nil && v != ProduceHeaderVersion {
		return fmt.Errorf("decode produce header: version %d: %w", v, ErrUnsupportedVersion)
	}
	unit := Unit(r.u8("unit"))
	stamp := r.i64("stamp")
	flags := r.u8("flags")
	if r.err == nil && unit.duration() == 0 {
		r.fail("unknown unit %d", unit)
	}
	if r.err == nil && flags&^headerFlagOffset != 0 {
		r.fail("unknown flags %#x", flags)
	}
	var off ClockOffset
	if flags&headerFlagOffset != 0 {
		off = readOffset(&r, "clock")
	}
	host := r.str("host id")
	if err := r.end(); err != nil {
		return err
	}
	if err := off.check("clock"); err != nil {
		return fmt.Errorf("decode produce header: %w", err)
	}
	*h = ProduceHeader{Time: fromUnits(stamp, unit), Unit: unit, Host: host, Offset: off}
	return nil
}

// fromUnits converts a stamp to a time, saturating instead of overflowing for absurd values (which the latency
// engine then rejects as implausible).
func fromUnits(v int64, u Unit) time.Time {
	d := int64(u.duration())
	const maxNs = int64(^uint64(0) >> 1)
	if v > maxNs/d {
		return time.Unix(0, maxNs)
	}
	if v < -maxNs/d {
		return time.Unix(0, -maxNs)
	}
	return time.Unix(0, v*d)
}
