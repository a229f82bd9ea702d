package latency

import (
	"errors"
	"math"
	"testing"
	"time"
)

// ackAt builds a producer acknowledgement at reference time t for a producer whose clock is theta ms off: the
// record reaches the broker out ms later, whose clock is brokerTheta ms off and which stamps the append truncated to
// the ms, and the acknowledgement is back after another back ms.
func ackAt(p, b HostID, t time.Time, out, back, theta, brokerTheta float64) ProducerAck {
	arrive := timeToMs(t) + out
	return ProducerAck{Host: p, Broker: b, Send: t.Add(msDur(theta)), Ack: t.Add(msDur(out + back + theta)),
		AppendMs: int64(math.Floor(arrive + brokerTheta))}
}

func TestObserveAckBracketsProducer(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	const brokerTheta, producerTheta = 700.0, 2500.0
	tests := []struct {
		name string
		acks [][2]float64 // (out, back) delays in ms, 1 s apart
		// probe is the broker's probe round trip (out, back) in ms; {1, 1} when zero.
		probe [2]float64
		// want bounds the result: the truth lies inside, and the interval is at most maxWidth ms wide.
		maxWidth float64
	}{
		// One round trip of 10 ms: K − S = 10, plus 1 ms of truncation, plus twice the broker's uncertainty (its
		// symmetric 2 ms probe brackets give ± 1.5 ms): 14 ms.
		{name: "single", acks: [][2]float64{{5, 5}}, maxWidth: 14.1},
		// A slow acknowledgement (a GC pause on the producer) after a fast one adds nothing: the minimum-delay
		// filter keeps the narrow bracket, 2 + 1 + 3 = 6 ms wide, plus the 100 ppm drift prior over 1 s.
		{name: "slow one filtered", acks: [][2]float64{{1, 1}, {150, 250}}, maxWidth: 6.3},
		// Asymmetric round trips intersect: out-heavy and back-heavy bounds cut each other's open ends, each widened
		// by the drift allowance over its age (the unsettled clock's |slope| + 100 ppm): 6 ms plus 0.3.
		{name: "asymmetric pair", acks: [][2]float64{{1, 9}, {9, 1}}, maxWidth: 6.35},
		// Every delay on one side, for the broker's probes and the producer alike: the broker's estimate is off by
		// 2 ms and the producer's truth sits at its bracket's edge, inside only because the broker's
		// uncertainty widens it.
		{name: "one-sided delays", acks: [][2]float64{{0, 4}}, probe: [2]float64{3, 0}, maxWidth: 12.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := mustEngine(t, Config{})
			b, p := e.Host("broker-1"), e.Host("p-ahead")
			if tc.probe == [2]float64{} {
				tc.probe = [2]float64{1, 1}
			}
			for i := range 3 { // the broker is bracketed first, by its probe round trips
				if err := e.ObserveBracket(bracketAt(b, base.Add(time.Duration(i)*time.Second), tc.probe[0], tc.probe[1], brokerTheta)); err != nil {
					t.Fatal(err)
				}
			}
			for i, d := range tc.acks {
				if err := e.ObserveAck(ackAt(p, b, base.Add(time.Duration(i)*time.Second), d[0], d[1], producerTheta, brokerTheta)); err != nil {
					t.Fatal(err)
				}
			}
			o, err := e.Offset(p, base)
			if err != nil {
				t.Fatal(err)
			}
			lo, hi := durMs(o.Lower), durMs(o.Upper)
			if o.Kind != KindBracketed || lo > producerTheta || hi < producerTheta || hi-lo > tc.maxWidth {
				t.Errorf("producer offset [%.3f, %.3f] ms (%v), want bracketed, containing %v, at most %v ms wide",
					lo, hi, o.Kind, producerTheta, tc.maxWidth)
			}
		})
	}
}

// TestObserveAckRefusals: an acknowledgement that brackets nothing is refused with its reason and changes nothing.
func TestObserveAckRefusals(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	b, p := e.Host("broker-1"), e.Host("p")
	good := ackAt(p, b, base, 2, 2, 100, 50)
	// The broker has no estimate yet: the append stamp cannot be placed, nothing changes.
	if err := e.ObserveAck(good); !errors.Is(err, ErrAppendClockUnknown) {
		t.Errorf("unbracketed broker: err %v, want ErrAppendClockUnknown", err)
	}
	if o, _ := e.Offset(p, base); o.Kind != KindUnknown {
		t.Errorf("after a refused ack the producer is %v, want unknown", o.Kind)
	}
	if err := e.ObserveBracket(bracketAt(b, base, 1, 1, 50)); err != nil {
		t.Fatal(err)
	}
	bad := good
	bad.Ack = bad.Send.Add(-time.Millisecond)
	if err := e.ObserveAck(bad); !errors.Is(err, ErrBadRoundTrip) {
		t.Errorf("ack before send: err %v, want ErrBadRoundTrip", err)
	}
	far := ackAt(p, b, base, 2, 2, float64(48*time.Hour/time.Millisecond), 50)
	if err := e.ObserveAck(far); !errors.Is(err, ErrImplausibleOffset) {
		t.Errorf("offset of two days: err %v, want ErrImplausibleOffset", err)
	}
	for _, a := range []ProducerAck{{Host: RefHost, Broker: b}, {Host: 99, Broker: b}, {Host: p, Broker: 99, Send: base, Ack: base}} {
		if err := e.ObserveAck(a); !errors.Is(err, ErrUnknownHost) {
			t.Errorf("ack %+v: err %v, want ErrUnknownHost", a, err)
		}
	}
	if err := e.ObserveAck(good); err != nil {
		t.Fatal(err)
	}
	if o, _ := e.Offset(p, base); o.Kind != KindBracketed || durMs(o.Lower) > 100 || durMs(o.Upper) < 100 {
		t.Errorf("producer %v [%v, %v], want bracketed around 100 ms", o.Kind, o.Lower, o.Upper)
	}
}
