package instrument

import (
	"fmt"
	"time"
)

// Clock returns the current wall-clock time of the host it stands for. time.Now in production; tests and the demo
// pass a shifted clock to simulate a host whose clock disagrees with the reference.
type Clock func() time.Time

// OffsetClock returns a clock that reads base shifted by offset (host clock − true time), e.g. +2.5 s for a host
// whose clock runs ahead.
func OffsetClock(base Clock, offset time.Duration) Clock {
	if base == nil {
		base = time.Now
	}
	return func() time.Time { return base().Add(offset) }
}

func (c Clock) now() time.Time {
	if c == nil {
		return time.Now()
	}
	return c()
}

// ClockOffset is a host's clock offset against the collector's reference clock, as measured by a round-trip time
// sync: Offset = host clock − reference clock, and the true offset lies within Offset ± Uncertainty (half the round
// trip that bracketed it, the NTP bound). Valid is false when no estimate is known.
type ClockOffset struct {
	Offset      time.Duration
	Uncertainty time.Duration
	Valid       bool
}

// MaxClockOffset bounds the magnitude of a clock offset the wire formats accept. A host whose clock is more than a
// day off is misconfigured rather than skewed, and offsets near the int64 range would overflow the latency engine's
// corrections; producers and consumers drop (send as invalid) an offset beyond it, decoders reject one as malformed.
const MaxClockOffset = 24 * time.Hour

// check returns an ErrMalformed error naming field when a valid offset is out of range: |Offset| > MaxClockOffset
// or a negative Uncertainty (an interval cannot have negative width).
func (o ClockOffset) check(field string) error {
	if !o.Valid {
		return nil // not encoded
	}
	if o.Offset > MaxClockOffset || o.Offset < -MaxClockOffset {
		return fmt.Errorf("%s offset %v exceeds ±%v: %w", field, o.Offset, MaxClockOffset, ErrMalformed)
	}
	if o.Uncertainty < 0 {
		return fmt.Errorf("%s uncertainty %v is negative: %w", field, o.Uncertainty, ErrMalformed)
	}
	return nil
}

// sane returns o, or the invalid offset when o is out of range (see check): an instrumented application never has a
// receipt or header refused for its time-sync result; the collector then estimates the offset from causality.
func (o ClockOffset) sane() ClockOffset {
	if o.check("") != nil {
		return ClockOffset{}
	}
	return o
}
