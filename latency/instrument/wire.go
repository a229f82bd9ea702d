package instrument

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// reader decodes big-endian fields from a byte slice; the first failure sticks in err and every later read returns
// zero values, so decoders check once at the end.
type reader struct {
	b    []byte
	err  error
	what string // format name for error messages
	// strs, when set, shares the strings str reads with equal ones read before (nil: every string is allocated).
	strs *interner
}

// interner remembers the last few distinct strings a decode read, so the receipts of one batch, which nearly always
// share group, topic and hosts, share their strings instead of allocating four per receipt. It is per decode call
// and fixed-size: hostile input with all-distinct names only costs its own allocations (and a few compares each).
type interner struct {
	vals [8]string
	next int
}

// get returns a string equal to b: a remembered one, else a new one, remembered in place of the oldest.
func (in *interner) get(b []byte) string {
	for _, v := range in.vals {
		if v == string(b) { // compared without allocating
			return v
		}
	}
	s := string(b)
	in.vals[in.next] = s
	in.next = (in.next + 1) % len(in.vals)
	return s
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("decode %s: %s: %w", r.what, fmt.Sprintf(format, args...), ErrMalformed)
	}
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b) < n {
		r.fail("%s needs %d bytes, %d left", field, n, len(r.b))
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8(field string) uint8 {
	if v := r.take(1, field); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if v := r.take(4, field); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) i64(field string) int64 {
	if v := r.take(8, field); v != nil {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// str reads a 1-byte length followed by that many bytes.
func (r *reader) str(field string) string {
	if r.err != nil {
		return ""
	}
	if len(r.b) < 1 { // not r.u8(field + " length"): that concatenation allocated on every string read
		r.fail("%s length needs 1 bytes, 0 left", field)
		return ""
	}
	n := int(r.b[0])
	r.b = r.b[1:]
	b := r.take(n, field)
	if r.strs != nil && len(b) > 0 {
		return r.strs.get(b)
	}
	return string(b)
}

// uvarint reads an unsigned varint no larger than max.
func (r *reader) uvarint(field string, max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: bad varint", field)
		return 0
	}
	if v > max {
		r.fail("%s %d exceeds %d", field, v, max)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func putStr(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func checkStr(field, s string) error {
	if len(s) > math.MaxUint8 {
		return fmt.Errorf("%s is %d bytes, at most 255 fit: %w", field, len(s), ErrMalformed)
	}
	return nil
}

func putOffset(b []byte, o ClockOffset) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(o.Offset.Nanoseconds()))
	return binary.BigEndian.AppendUint32(b, uncertaintyMicros(o.Uncertainty))
}

func readOffset(r *reader, field string) ClockOffset {
	// The field names are built only on failure: a concatenation per read allocated on every receipt.
	if r.err == nil && len(r.b) < 8 {
		r.fail("%s offset needs 8 bytes, %d left", field, len(r.b))
	}
	off := r.i64("")
	if r.err == nil && len(r.b) < 4 {
		r.fail("%s uncertainty needs 4 bytes, %d left", field, len(r.b))
	}
	unc := r.u32("")
	return ClockOffset{Offset: time.Duration(off), Uncertainty: time.Duration(unc) * time.Microsecond, Valid: true}
}

// uncertaintyMicros rounds up to whole microseconds (never claiming more precision than measured) and saturates at
// the uint32 maximum (~71 minutes, far beyond any useful bound).
func uncertaintyMicros(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	us := (d + time.Microsecond - 1) / time.Microsecond
	if us > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(us)
}
