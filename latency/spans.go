package latency

import (
	"errors"
	"fmt"
	"time"
)

// ErrBrokerNotBracketed is returned by Engine.ObserveSpanBracket while the appending broker's own offset is not
// two-sided (the probe path has not bracketed it yet, or its estimate is suspect): a producer span then bounds the
// producer only against an unknown clock, and nothing is recorded.
var ErrBrokerNotBracketed = errors.New("appending broker's clock offset not bracketed")

// SpanBracket is a producer span around one record's append, as OpenTelemetry agents record it: the producer host
// stamped Start (the send call) and End (the broker's acknowledgement) on its own clock, and Broker, the leader of
// the record's epoch, stamped AppendMs (LogAppendTime, ms, its own clock) in between. Hence
//
//	producer − broker ∈ [Start − (AppendMs + 1 ms), End − AppendMs]
//
// (the +1 ms covers the truncation of the broker's millisecond stamp), and adding the broker's own bracketed offset
// (broker − reference, ± its uncertainty) bounds producer − reference. It is [Bracket] with the roles swapped: the
// producer sent and got the answer, the broker is the remote (RFC 5905 §8's offset bound).
type SpanBracket struct {
	Host       HostID    // the producer
	Broker     HostID    // the broker that stamped AppendMs
	Start, End time.Time // the producer span, producer clock
	AppendMs   int64
}

// ObserveSpanBracket feeds one producer span that brackets its record's append: the producer host becomes
// KindBracketed, two-sided, with the bound above widened by the broker's uncertainty. It fails with ErrUnknownHost,
// ErrBadRoundTrip (End before Start), ErrBrokerNotBracketed, or ErrImplausibleOffset (a bound beyond
// Config.Bounds.MaxSkew: nothing is recorded).
func (e *Engine) ObserveSpanBracket(b SpanBracket) error {
	h := e.host(b.Host)
	if h == nil || b.Host == RefHost || b.Host == b.Broker {
		return fmt.Errorf("observe span bracket for host %d: %w", b.Host, ErrUnknownHost)
	}
	if b.End.Before(b.Start) {
		return fmt.Errorf("observe span bracket for %s: %w", h.name, ErrBadRoundTrip)
	}
	// The broker's offset at the append's reference time: AppendMs is on the broker's clock, so look once there,
	// then again at AppendMs − offset (a second look moves the time by the offset's error, sub-millisecond).
	bo, err := e.Offset(b.Broker, time.UnixMilli(b.AppendMs))
	if err == nil && (bo.Kind == KindBracketed || bo.Kind == KindReference) {
		bo, err = e.Offset(b.Broker, time.UnixMilli(b.AppendMs).Add(-bo.Offset))
	}
	if err != nil {
		return fmt.Errorf("observe span bracket for %s: %w", h.name, err)
	}
	if (bo.Kind != KindBracketed && bo.Kind != KindReference) || bo.Suspect {
		return fmt.Errorf("observe span bracket for %s via %s (%s): %w", h.name, bo.Host, bo.Kind, ErrBrokerNotBracketed)
	}
	e.touchHost(h)
	theta, u := durMs(bo.Offset), durMs(bo.Uncertainty)
	a := float64(b.AppendMs)
	bd := bound{
		at: a - theta, // the append on the reference clock
		lo: timeToMs(b.Start) - (a + 1) + theta - u,
		hi: timeToMs(b.End) - a + theta + u,
	}
	if skew := durMs(e.cfg.Bounds.MaxSkew); bd.lo > skew || bd.hi < -skew {
		return fmt.Errorf("observe span bracket for %s: [%.1f, %.1f] ms (max skew %v): %w", h.name, bd.lo, bd.hi,
			e.cfg.Bounds.MaxSkew, ErrImplausibleOffset)
	}
	h.addTwo(bd, KindBracketed, e.two.bucketMs)
	return nil
}
