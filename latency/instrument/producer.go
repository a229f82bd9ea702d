package instrument

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// OffsetSource reports the host's current clock offset against the collector; [TimeSync] implements it.
type OffsetSource interface {
	ClockOffset() ClockOffset
}

// ProducerConfig configures a [ProducerInterceptor].
type ProducerConfig struct {
	// Host identifies this producer host (its clock). Required: the collector estimates one offset per host id.
	Host string
	// Clock reads this host's wall clock; nil means time.Now.
	Clock Clock
	// Unit is the produce stamp's resolution; 0 means UnitMicros.
	Unit Unit
	// Offsets, when set, supplies a measured clock offset that travels in the header.
	Offsets OffsetSource
	// Propagator writes trace context; nil means W3C Trace Context (propagation.TraceContext).
	Propagator propagation.TextMapPropagator
	// TracerProvider is the application's OpenTelemetry tracer provider: every record then gets a "send <topic>"
	// span (kind PRODUCER) whose context is what its traceparent carries. nil (the default) turns spans off: the
	// interceptor never calls OpenTelemetry's span API and records get a fresh sampled trace id, as before, so that
	// rows stay correlatable and the collector's hop spans have a trace to join.
	TracerProvider trace.TracerProvider
}

// ProducerInterceptor is a sarama.ProducerInterceptor that stamps every record with the [HeaderProduceTime] header
// and, when the record carries no trace context yet, a new W3C traceparent (a fresh sampled trace whose root is the
// produce). Applications with a live span call [InjectContext] before sending; the interceptor then keeps that
// context. A record that already has a produce-time header (a retry through another producer, a mirror) keeps it:
// the first produce is the one measured.
type ProducerInterceptor struct {
	cfg     ProducerConfig
	tracer  *tracer // nil: tracing off
	encErrs atomic.Uint64
}

var _ sarama.ProducerInterceptor = (*ProducerInterceptor)(nil)

// NewProducerInterceptor returns an interceptor for cfg. Add it to sarama's Config.Producer.Interceptors.
func NewProducerInterceptor(cfg ProducerConfig) *ProducerInterceptor {
	if cfg.Propagator == nil {
		cfg.Propagator = propagation.TraceContext{}
	}
	if cfg.Unit == 0 {
		cfg.Unit = UnitMicros
	}
	return &ProducerInterceptor{cfg: cfg, tracer: newTracer(cfg.TracerProvider, cfg.Host)}
}

// OnSend implements sarama.ProducerInterceptor. It never fails the send: a header it cannot encode (a host id over
// 255 bytes) is skipped and counted in EncodeErrors.
//
// With a TracerProvider, the send span is recorded on the host's clock (ProducerConfig.Clock), as an SDK on that
// host would record it; it is the child of the context the record already carries (InjectContext), and a record that
// already has a produce-time header (a retry through another producer) gets no second span.
func (p *ProducerInterceptor) OnSend(msg *sarama.ProducerMessage) {
	c := producerCarrier{msg}
	if c.Get(HeaderProduceTime) == "" {
		now := p.cfg.Clock.now()
		h := ProduceHeader{Time: now, Unit: p.cfg.Unit, Host: p.cfg.Host}
		if p.cfg.Offsets != nil {
			h.Offset = p.cfg.Offsets.ClockOffset().sane()
		}
		v, err := h.MarshalBinary()
		if err != nil {
			p.encErrs.Add(1)
		} else {
			msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(HeaderProduceTime), Value: v})
		}
		if p.tracer != nil {
			if sc := p.tracer.send(msg, now, p.cfg.Propagator); sc.IsValid() {
				p.cfg.Propagator.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
				return
			}
			// A provider that records nothing (a noop provider) and a record without a parent: mint one below.
		}
	}
	if c.Get(HeaderTraceParent) == "" {
		ctx := trace.ContextWithSpanContext(context.Background(), newRootSpanContext())
		p.cfg.Propagator.Inject(ctx, c)
	}
}

// EncodeErrors returns how many records were sent without a produce-time header because it could not be encoded.
func (p *ProducerInterceptor) EncodeErrors() uint64 { return p.encErrs.Load() }

// InjectContext writes the span context of ctx into msg's headers as W3C traceparent (and tracestate), so a
// producer's own span links to the records it sends. A ctx without a valid span context writes nothing.
func InjectContext(ctx context.Context, msg *sarama.ProducerMessage) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, producerCarrier{msg})
}

// newRootSpanContext returns a sampled span context with random non-zero ids (W3C requires non-zero).
func newRootSpanContext() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// TraceFromHeaders extracts the W3C trace context from consumed record headers. ok is false when there is none or it
// is malformed; use [TraceParent] to tell the two apart.
func TraceFromHeaders(hs []*sarama.RecordHeader) (traceID [16]byte, spanID [8]byte, ok bool) {
	traceID, spanID, err := TraceParent(header(hs, HeaderTraceParent))
	return traceID, spanID, err == nil
}

// ParseTraceParent parses a W3C traceparent header value through OpenTelemetry's propagator. ok is false when v is
// empty or not a valid traceparent; use [TraceParent] to tell the two apart.
func ParseTraceParent(v []byte) (traceID [16]byte, spanID [8]byte, ok bool) {
	traceID, spanID, err := TraceParent(v)
	return traceID, spanID, err == nil
}

// TraceParent parses a W3C traceparent header value (W3C Trace Context §3.2) through OpenTelemetry's propagator.
// An empty or nil v (no header, or an empty value) returns [ErrNoTraceParent]; a value that is present but not a
// valid traceparent (wrong field lengths, non-hex, version ff, all-zero trace or span id) returns an error wrapping
// [ErrMalformedTraceParent] that quotes the value (at most 64 bytes of it). Callers count the second and ignore the
// first.
func TraceParent(v []byte) (traceID [16]byte, spanID [8]byte, err error) {
	sc, err := SpanContextOf(v)
	return sc.TraceID(), sc.SpanID(), err
}

// SpanContextOf is [TraceParent] returning the whole remote span context (ids and trace flags: IsSampled tells
// whether the producer's trace is recorded), with the same errors.
func SpanContextOf(v []byte) (trace.SpanContext, error) {
	if len(v) == 0 {
		return trace.SpanContext{}, ErrNoTraceParent
	}
	carrier := propagation.MapCarrier{HeaderTraceParent: string(v)}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	if !sc.IsValid() {
		return trace.SpanContext{}, fmt.Errorf("traceparent %q: %w", v[:min(len(v), 64)], ErrMalformedTraceParent)
	}
	return sc, nil
}
