package instrument

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// The instrumentation's cost per record: one record through the producer interceptor (OnSend) and the consumer
// helper (Receive, Done, its receipt queued to an emitter whose producer discards it), the way an application
// calls them.
//
//	go test -run '^$' -bench 'Record|TracingCost' -benchtime 100x ./latency/instrument
//
// This file uses only the API that predates tracing, so copied into a checkout of the code before spans existed it
// measures that code the same way (docs/instrumentation.md, "Cost"). BenchmarkTracingCost (tracing_bench_test.go)
// prints each tracing mode's cost as a ratio to tracing off, both measured in the same run.

// recordPath is one application's instrumentation: a producer interceptor and a consumer helper.
type recordPath struct {
	p    *ProducerInterceptor
	c    *Consumer
	stop func()
	off  int64
}

func newRecordPath(tb testing.TB, pcfg ProducerConfig, ccfg ConsumerConfig) *recordPath {
	tb.Helper()
	bp := &blockedProducer{in: make(chan *sarama.ProducerMessage, 1024), succ: make(chan *sarama.ProducerMessage),
		errs: make(chan *sarama.ProducerError)}
	go func() { // a producer that discards what it is given
		for range bp.in {
		}
	}()
	em := NewEmitter(bp, EmitterConfig{Topic: "receipts", QueueSize: 1 << 20})
	c, err := NewConsumer(ccfg, em)
	if err != nil {
		tb.Fatal(err)
	}
	return &recordPath{p: NewProducerInterceptor(pcfg), c: c, stop: func() { em.Close(); close(bp.in) }}
}

// one sends and consumes one record.
func (r *recordPath) one() {
	pm := &sarama.ProducerMessage{Topic: "orders", Value: sarama.StringEncoder(`{"order":1}`)}
	r.p.OnSend(pm)
	r.off++
	m := consumed("orders", 0, r.off, time.Now(), pm.Headers)
	r.c.Receive(m)
	r.c.Done(m)
}

// BenchmarkRecord is one record through the instrumentation with tracing off (the default).
func BenchmarkRecord(b *testing.B) {
	r := newRecordPath(b, ProducerConfig{Host: "p1"}, ConsumerConfig{Group: "g", Host: "c1"})
	defer r.stop()
	b.ReportAllocs()
	for b.Loop() {
		r.one()
	}
}
