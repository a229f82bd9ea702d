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
)

// ScopeName is the instrumentation scope of the spans this package creates (the tracer name).
const ScopeName = "github.com/tidemark/tidemark/latency/instrument"

// The span names and attributes follow the OpenTelemetry messaging semantic conventions for Kafka (semconv v1.43.0,
// docs/messaging/kafka.md and messaging-spans.md):
//
//   - the producer's span is "send <topic>", kind PRODUCER, messaging.operation.name "send", type "send";
//   - the consumer's span is "process <topic>", kind CONSUMER, messaging.operation.name "process", type "process",
//     with messaging.consumer.group.name, messaging.destination.partition.id and messaging.kafka.offset.
//
// A process span handles one message, so per the conventions it is parented to the message's creation context (the
// producer's send span, read from traceparent) and also links to it (a link is what the conventions require; the
// parent is what puts both in one trace).

// tracer is the tracer of one producer or consumer helper plus the attributes all its spans carry. nil means
// tracing is off: the helpers then never call into OpenTelemetry's span API at all.
type tracer struct {
	t      trace.Tracer
	common []attribute.KeyValue // messaging.system, the host id
}

func newTracer(tp trace.TracerProvider, host string) *tracer {
	if tp == nil {
		return nil
	}
	common := []attribute.KeyValue{semconv.MessagingSystemKafka}
	if host != "" {
		common = append(common, AttrHost.String(host))
	}
	return &tracer{t: tp.Tracer(ScopeName), common: common}
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
	attrs := make([]attribute.KeyValue, 0, len(t.common)+5)
	attrs = append(attrs, t.common...)
	attrs = append(attrs, semconv.MessagingOperationName("send"), semconv.MessagingOperationTypeSend,
		semconv.MessagingDestinationName(msg.Topic))
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
	_, span := t.t.Start(ctx, "send "+msg.Topic, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(at), trace.WithAttributes(attrs...))
	sc := span.SpanContext()
	span.End(trace.WithTimestamp(at))
	return sc
}

// process starts the consumer span of msg at the receive stamp: parented to and linked with the creation context
// from msg's traceparent when it is valid. A malformed or absent traceparent gives a root span (never a made-up
// parent). The caller ends it at Done.
func (t *tracer) process(msg *sarama.ConsumerMessage, group string, at time.Time) trace.Span {
	ctx := context.Background()
	var links []trace.Link
	if parent := extractConsumed(msg.Headers); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		links = []trace.Link{{SpanContext: parent}}
	}
	attrs := make([]attribute.KeyValue, 0, len(t.common)+6)
	attrs = append(attrs, t.common...)
	attrs = append(attrs, semconv.MessagingOperationName("process"), semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(msg.Topic), semconv.MessagingConsumerGroupName(group),
		semconv.MessagingDestinationPartitionID(strconv.Itoa(int(msg.Partition))), semconv.MessagingKafkaOffset(int(msg.Offset)))
	_, span := t.t.Start(ctx, "process "+msg.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(at), trace.WithLinks(links...), trace.WithAttributes(attrs...))
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
