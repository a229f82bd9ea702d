package instrument

import "time"

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
