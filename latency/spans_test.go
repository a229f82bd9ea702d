package latency

import (
	"errors"
	"math"
	"testing"
	"time"
)

// spanAt builds a producer span (an OpenTelemetry agent's, fed to ObserveAck as the collector's spans path does) on a host of offset theta (ms) around an append by a broker of offset brokerTheta:
// the send at reference time t, the append toBroker ms later, the acknowledgement back ms after the append.
func spanAt(p, b HostID, t time.Time, toBroker, back, theta, brokerTheta float64) ProducerAck {
	appendRef := timeToMs(t) + toBroker
	return ProducerAck{Host: p, Broker: b,
		Send: t.Add(msDur(theta)), Ack: t.Add(msDur(theta + toBroker + back)),
		AppendMs: int64(math.Floor(appendRef + brokerTheta))}
}

func TestProducerSpanBoundsProducer(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	const brokerTheta, producerTheta = 3000.0, -2000.0
	e := mustEngine(t, Config{})
	b, p := e.Host("B1"), e.Host("java-app")
	// Without the broker's own bracket a producer span bounds the producer against an unknown clock only.
	if err := e.ObserveAck(spanAt(p, b, base, 3, 3, producerTheta, brokerTheta)); !errors.Is(err, ErrAppendClockUnknown) {
		t.Fatalf("err = %v, want ErrAppendClockUnknown", err)
	}
	if err := e.ObserveBracket(bracketAt(b, base, 5, 5, brokerTheta)); err != nil {
		t.Fatal(err)
	}
	// The broker is at 3000.5 ± 5.5 ms; the span's 6 ms round trip gives producer − broker ∈ [−5004, −4997]
	// (−5003 − 1 ms truncation), so producer − reference ∈ [−2009, −1991]: −2000 ± 9.
	if err := e.ObserveAck(spanAt(p, b, base, 3, 3, producerTheta, brokerTheta)); err != nil {
		t.Fatal(err)
	}
	o, err := e.Offset(p, base)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindBracketed || math.Abs(durMs(o.Offset)-producerTheta) > 1e-3 || math.Abs(durMs(o.Uncertainty)-9) > 1e-3 {
		t.Errorf("producer offset %v ± %v (%v), want -2000 ± 9 ms bracketed", o.Offset, o.Uncertainty, o.Kind)
	}
	if lo, hi := durMs(o.Lower), durMs(o.Upper); lo > producerTheta || hi < producerTheta {
		t.Errorf("producer bounds [%v, %v] exclude the true offset", o.Lower, o.Upper)
	}

	bad := spanAt(p, b, base, 3, 3, producerTheta, brokerTheta)
	bad.Ack = bad.Send.Add(-time.Millisecond)
	if err := e.ObserveAck(bad); !errors.Is(err, ErrBadRoundTrip) {
		t.Errorf("span ending before it starts: err = %v, want ErrBadRoundTrip", err)
	}
	far := spanAt(p, b, base, 3, 3, 30*time.Hour.Seconds()*1000, brokerTheta) // beyond the default max skew
	if err := e.ObserveAck(far); !errors.Is(err, ErrImplausibleOffset) {
		t.Errorf("span 30 h off: err = %v, want ErrImplausibleOffset", err)
	}
	if err := e.ObserveAck(ProducerAck{Host: RefHost, Broker: b, Send: base, Ack: base}); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("span of the reference host: err = %v, want ErrUnknownHost", err)
	}
}
