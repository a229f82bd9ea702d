package latency

import (
	"fmt"
	"time"
)

// ProducerAck is one produced record seen from its producer: the host sent it at Send and received the broker's
// acknowledgement at Ack (both read on the producer host's clock), and the partition leader Broker stamped its
// LogAppendTime AppendMs (ms, truncated, on the broker's clock) in between. Causality gives send ≤ append ≤ ack on
// the reference clock, a two-sided bracket of the producer host's clock (see ObserveAck).
type ProducerAck struct {
	Host     HostID // the producer host
	Broker   HostID // the leader that stamped the append (its partition leader epoch's leader)
	Send     time.Time
	Ack      time.Time
	AppendMs int64
}

// ObserveAck brackets a producer host's clock with one acknowledged record (KindBracketed), the way the probe path
// brackets a broker's, with the roles of the two clocks swapped: here the reference stamp is the broker's append,
// carried to the reference clock through the broker's own two-sided estimate θb ± ub at that stamp.
//
// With S, K the send and acknowledgement stamps (producer clock, ms) and A the append stamp (broker clock, ms,
// truncated, so the true stamp lies in [A, A+1)), the append happened on the reference clock within
// [A − θb − ub, A + 1 − θb + ub], and since the record was sent before and acknowledged after it,
//
//	producer − reference ∈ [S − (A + 1 − θb + ub), K − (A − θb − ub)]
//
// an interval as wide as the round trip K − S plus 1 ms plus 2·ub. Its midpoint is RFC 5905 §8's offset
// θ = ((T2 − T1) + (T3 − T4))/2 with the server's receive and transmit stamps T2 = T3 collapsed into the append
// stamp and the sign flipped to host − reference; its width is the RFC's round-trip delay δ = (T4 − T1) − (T3 − T2).
// Each bound enters the host's two-sided window, whose buckets keep their narrowest bound for the drift fit and
// intersect all of them: the minimum-delay filter of RFC 5905 §10 (the probe path's brackets go through the same
// window).
//
// Errors: ErrUnknownHost (a stale or unissued id, the reference as producer, an unknown broker), ErrBadRoundTrip (an
// acknowledgement stamped before its send: the producer's clock stepped back), ErrAppendClockUnknown (the broker's
// clock has no two-sided estimate at A), ErrImplausibleOffset (a midpoint beyond Config.Bounds.MaxSkew). A refused
// acknowledgement changes nothing.
func (e *Engine) ObserveAck(a ProducerAck) error {
	hs := *e.hosts.Load()
	h := hs.at(a.Host)
	if h == nil || a.Host == RefHost {
		return fmt.Errorf("observe ack for host %d: %w", a.Host, ErrUnknownHost)
	}
	e.touchHost(h)
	if a.Ack.Before(a.Send) {
		return fmt.Errorf("observe ack for %s: ack %v before send %v: %w", h.name, a.Ack, a.Send, ErrBadRoundTrip)
	}
	theta, unc, err := e.appendClock(hs, a.Broker, a.AppendMs)
	if err != nil {
		return fmt.Errorf("observe ack for %s: %w", h.name, err)
	}
	b := ackBound(timeToMs(a.Send), timeToMs(a.Ack), float64(a.AppendMs), theta, unc)
	if mid, lim := (b.lo+b.hi)/2, durMs(e.cfg.Bounds.MaxSkew); mid > lim || mid < -lim {
		return fmt.Errorf("observe ack for %s: offset %v (max skew %v): %w", h.name, msDuration(mid), e.cfg.Bounds.MaxSkew, ErrImplausibleOffset)
	}
	h.addTwo(b, KindBracketed, e.two.bucketMs)
	return nil
}

// appendClock returns the broker's offset θb and its uncertainty ub (ms) that apply to its stamp appendMs, when its
// estimate is two-sided there.
func (e *Engine) appendClock(hs hostTable, broker HostID, appendMs int64) (theta, unc float64, err error) {
	if broker == RefHost {
		return 0, 0, nil
	}
	bh := hs.at(broker)
	if bh == nil {
		return 0, 0, fmt.Errorf("broker host %d: %w", broker, ErrUnknownHost)
	}
	var r resolved
	bh.snap.Load().lookup(float64(appendMs), &r)
	if r.kind < KindReported || r.ambiguous {
		return 0, 0, fmt.Errorf("broker %s (%s): %w", bh.name, r.kind, ErrAppendClockUnknown)
	}
	return r.theta, r.unc, nil
}

// ackBound is ObserveAck's bracket in ms: send s and ack k on the producer's clock, append stamp a (truncated ms) on
// a broker whose offset is theta ± unc. Its time is the append's reference time.
func ackBound(s, k, a, theta, unc float64) bound {
	return bound{at: a + 0.5 - theta, lo: s - (a + 1 - theta + unc), hi: k - (a - theta - unc)}
}
