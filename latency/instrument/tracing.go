package instrument

import (
	"context"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of the spans this package creates (the tracer name).
const ScopeName = "github.com/tidemark/tidemark/latency/instrument"

// The span names and attributes follow the OpenTelemetry messaging semantic conventions for Kafka (semconv v1.43.0,
// https://github.com/open-telemetry/semantic-conventions/blob/v1.43.0/docs/messaging/kafka.md and messaging-spans.md):
//
//   - the producer's span is "send <topic>", kind PRODUCER, messaging.operation.name "send", type "send";
//   - the consumer's span is "process <topic>", kind CONSUMER, messaging.operation.name "process", type "process",
//     with messaging.consumer.group.name, messaging.destination.partition.id and messaging.kafka.offset.
//
// A process span handles one message, so per the conventions it is parented to the message's creation context (the
// producer's send span, read from traceparent) and also links to it (a link is what the conventions require; the
// parent is what puts both in one trace).

// tracer is the tracer of one producer or consumer helper. nil means tracing is off: the helpers then never call
// into OpenTelemetry's span API at all.
//
// A span starts with the attributes the conventions name for sampling decisions (messaging.system, operation name
// and type, destination, consumer group: "SHOULD be provided at span creation time"); the others are set only on a
// span that records, so a sampled-out record costs no more than it must.
type tracer struct {
	t    trace.Tracer
	host []attribute.KeyValue // tidemark.host, or none
}

func newTracer(tp trace.TracerProvider, host string) *tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		// OpenTelemetry's "tracing off": it would record nothing, yet building each span's attributes would cost
		// as much again as the rest of the helpers (BenchmarkTracingCost). Off, and the records behave the same.
		return nil
	}
	var h []attribute.KeyValue
	if host != "" {
		h = []attribute.KeyValue{AttrHost.String(host)}
	}
	return &tracer{t: tp.Tracer(ScopeName), host: h}
}

// AttrHost is the Tidemark host id (the clock the stamps were read on) of the component that made a span.
const AttrHost = attribute.Key("tidemark.host")

// send records the producer span of msg at the host clock's reading at, as a child of the trace context msg already
// carries (an application's span, written by InjectContext) or of nothing. The span covers the hand-over to sarama
// (sarama's interceptors see no acknowledgement); the hop that follows, produce → log append, is Tidemark's ingest
// span, built by the collector from the corrected stamps.
func (t *tracer) send(msg *sarama.ProducerMessage, at time.Time, prop propagation.TextMapPropagator) trace.SpanContext {
	c := producerCarrier{msg}
	ctx := prop.Extract(context.Background(), c)
	_, span := t.t.Start(ctx, "send "+msg.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(at),
		trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationName("send"),
			semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(msg.Topic)))
	sc := span.SpanContext()
	if span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 3)
		attrs = append(attrs, t.host...)
		if msg.Key != nil {
			if k, ok := msg.Key.(sarama.StringEncoder); ok {
				attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(k)))
			}
		}
		if msg.Value != nil {
			attrs = append(attrs, semconv.MessagingMessageBodySize(msg.Value.Length()))
		} else {
			attrs = append(attrs, semconv.MessagingKafkaMessageTombstone(true))
		}
		span.SetAttributes(attrs...)
	}
	span.End(trace.WithTimestamp(at))
	return sc
}

// process starts the consumer span of msg at the receive stamp: parented to and linked with the creation context
// from msg's traceparent when it is valid. A malformed or absent traceparent gives a root span (never a made-up
// parent). The caller ends it at Done; a span that records nothing (sampled out) is not returned (nil): ending it
// would do nothing, and keeping it would cost a map entry per record.
func (t *tracer) process(msg *sarama.ConsumerMessage, group string, at time.Time) trace.Span {
	ctx := context.Background()
	var links []trace.Link
	if parent := extractConsumed(msg.Headers); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		links = []trace.Link{{SpanContext: parent}}
	}
	_, span := t.t.Start(ctx, "process "+msg.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(at), trace.WithLinks(links...),
		trace.WithAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess, semconv.MessagingDestinationName(msg.Topic),
			semconv.MessagingConsumerGroupName(group)))
	if !span.IsRecording() {
		return nil
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, t.host...)
	attrs = append(attrs, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(msg.Partition))),
		semconv.MessagingKafkaOffset(int(msg.Offset)))
	span.SetAttributes(attrs...)
	return span
}

// extractConsumed returns the W3C trace context of consumed headers, or the invalid context when there is none or
// it is malformed.
func extractConsumed(hs []*sarama.RecordHeader) trace.SpanContext {
	v := header(hs, HeaderTraceParent)
	if len(v) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), consumerCarrier(hs)))
}

// attrRevoked marks a process span ended by Consumer.Forget: the partition was revoked before Done.
var attrRevoked = attribute.Bool("tidemark.revoked", true)
