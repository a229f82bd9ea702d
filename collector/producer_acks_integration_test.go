package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// TestProducerAcksBracketProducerHost runs on the real servers: once the probes bracket every broker, an
// instrumented sync producer whose clock is 2.5 s ahead sends records to the LogAppendTime source topic and reports
// their acknowledgements through an emitter. The collector brackets its host two-sided: bracketed, not envelope,
// with the injected 2.5 s inside the interval (the test process's clock is the collector's reference, so the truth
// is exactly the injected skew).
func TestProducerAcksBracketProducerHost(t *testing.T) {
	e := newEnv(t)
	r := e.start(nil, nil)
	t.Cleanup(func() { r.stop(t) })
	brokers := uint64(len(e.brokers))
	// Probe brackets of every broker first: an ack whose broker has none brackets nothing (append_clock_unknown).
	if got := e.waitCount(brokers, 60*time.Second, "SELECT uniqExact(broker_id) FROM probe_events WHERE topic = ? AND status = 'ok'", e.cfg.Probe.Topic); got != brokers {
		t.Fatalf("probes answered by %d brokers, want %d", got, brokers)
	}

	const skew = 2500 * time.Millisecond
	const host, n = "p-acks", 100
	clock := instrument.OffsetClock(time.Now, skew)
	ec := testenv.SaramaConfig(t)
	ec.Producer.Idempotent, ec.Producer.RequiredAcks, ec.Net.MaxOpenRequests = true, sarama.WaitForAll, 1
	ap, err := sarama.NewAsyncProducer(e.brokers, ec)
	if err != nil {
		t.Fatal(err)
	}
	em := instrument.NewEmitter(ap, instrument.EmitterConfig{Topic: e.cfg.Receipts.Topic, Linger: 10 * time.Millisecond})
	pc := testenv.SaramaConfig(t)
	pc.Producer.Interceptors = []sarama.ProducerInterceptor{instrument.NewProducerInterceptor(instrument.ProducerConfig{Host: host, Clock: clock})}
	sp, err := sarama.NewSyncProducer(e.brokers, pc)
	if err != nil {
		t.Fatal(err)
	}
	acks := instrument.NewAckReporter(instrument.AckConfig{Host: host, Clock: clock}, em)
	prod := instrument.WrapSyncProducer(sp, acks)
	for i := range n {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: e.source, Key: sarama.StringEncoder(fmt.Sprint(i)),
			Value: sarama.StringEncoder("order")}); err != nil {
			t.Fatal(err)
		}
	}
	_ = prod.Close()
	em.Close()
	if st := em.Stats().Acks; st.Sent != n {
		t.Fatalf("emitter acks %+v, want %d sent", st, n)
	}
	bracketed := func() int64 {
		return int64(testutil.ToFloat64(r.metrics.ProducerAcks.WithLabelValues(AckBracketed)))
	}
	if got := waitFor(n, 60*time.Second, bracketed); got != n {
		t.Fatalf("%d acks bracketed, want %d; outcomes: %s", got, n, ackOutcomes(r.metrics))
	}
	o, err := r.engine.Offset(r.engine.Host(host), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v offset %v ± %v, interval [%v, %v] (true %v)", host, o.Kind, o.Offset, o.Uncertainty, o.Lower, o.Upper, skew)
	if o.Kind != latency.KindBracketed || o.Lower > skew || o.Upper < skew {
		t.Fatalf("%s: %v [%v, %v], want bracketed, containing %v", host, o.Kind, o.Lower, o.Upper, skew)
	}
}

// ackOutcomes renders the ack counter by outcome, for failure messages.
func ackOutcomes(m *Metrics) string {
	s := ""
	for _, o := range []string{AckBracketed, AckCreateTime, AckNoAppendStamp, AckUnknownTopic, AckAppendLeaderUnknown,
		AckAppendClockUnknown, AckBadRoundTrip, AckImplausible, AckQueueFull, AckOther} {
		if v := testutil.ToFloat64(m.ProducerAcks.WithLabelValues(o)); v > 0 {
			s += fmt.Sprintf("%s=%v ", o, v)
		}
	}
	return s
}
