package collector

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
)

// errNotKafka marks a span that is not a Kafka messaging span (an HTTP span of the same application, a database
// call): it is skipped and counted, never dead-lettered.
var errNotKafka = errors.New("not a kafka messaging span")

// errBatchSpan marks a Kafka span about many records at once (a receive span over a poll, a batch process span):
// it names no single record, so it yields no stamp; skipped and counted.
var errBatchSpan = errors.New("kafka span about a batch of records")

// errMalformedSpan marks a Kafka span that claims to be about one record but lacks what a stamp needs (its topic,
// partition, offset, consumer group, host or times): counted and dead-lettered.
var errMalformedSpan = errors.New("malformed kafka span")

// errMalformedOTLP marks a spans-topic record that is not an OTLP ExportTraceServiceRequest: dead-lettered.
var errMalformedOTLP = errors.New("malformed OTLP trace request")

// spanSide says which end of a record's trip a span stamps.
type spanSide uint8

const (
	sideProducer spanSide = iota + 1
	sideConsumer
)

// kafkaSpan is what one OpenTelemetry Kafka messaging span says about one record.
type kafkaSpan struct {
	side      spanSide
	topic     string
	partition int32
	offset    int64
	group     string // consumer spans only
	// start and end are the span's times in ns since the epoch on the emitting host's clock: for a producer span
	// the send call and the broker's acknowledgement; for a consumer span the hand-off to the application and, when
	// covers is set, the end of its processing.
	start, end int64
	// covers is set when the consumer span ends when processing ends (a process span); a receive span ends when the
	// record is handed over, so its end is the receive moment and the processed moment is unknown.
	covers  bool
	host    string
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
	// noOffset is set for a producer span that does not name its record's offset (Python's confluent-kafka
	// instrumentation): it is joined through the consumer spans' refs, and learns its record from them.
	noOffset bool
	// refs are, for a consumer span, the spans that may be its record's producer span: its parent and its links.
	refs []spanRef
}

// Attribute names of both messaging semantic-convention generations, as the OpenTelemetry agents emit them (the
// Java agent's kafka-clients instrumentation emits messaging.destination.partition.id and, depending on
// otel.semconv-stability.opt-in, messaging.kafka.message.offset or messaging.kafka.offset; older agents emit
// messaging.kafka.destination.partition / messaging.kafka.source.partition / messaging.kafka.partition and
// messaging.destination / messaging.source.name).
var (
	attrTopic     = []string{"messaging.destination.name", "messaging.destination", "messaging.source.name"}
	attrPartition = []string{"messaging.destination.partition.id", "messaging.kafka.destination.partition",
		"messaging.kafka.source.partition", "messaging.kafka.partition"}
	attrOffset    = []string{"messaging.kafka.offset", "messaging.kafka.message.offset"}
	attrGroup     = []string{"messaging.consumer.group.name", "messaging.kafka.consumer.group"}
	attrOperation = []string{"messaging.operation.type", "messaging.operation", "messaging.operation.name"}
	attrBatch     = []string{"messaging.batch.message_count"}
	attrHost      = []string{"host.name", "service.instance.id", "service.name"}
)

// classifySpan reads one span (with its resource's attributes) as a Kafka messaging span. A consumer span that
// names no consumer group takes groups[its resource's service.name] (spans.consumer_groups). It returns errNotKafka
// for spans of other systems, errBatchSpan for spans about many records, and an error wrapping errMalformedSpan,
// saying what is missing, for a Kafka span about one record that cannot be stamped. A pure function.
func classifySpan(resource pcommon.Map, sp ptrace.Span, groups map[string]string) (kafkaSpan, error) {
	attrs := sp.Attributes()
	if sys, ok := attrs.Get("messaging.system"); !ok || sys.Str() != "kafka" {
		return kafkaSpan{}, errNotKafka
	}
	ks := kafkaSpan{traceID: sp.TraceID(), spanID: sp.SpanID()}
	op, _ := firstStr(attrs, attrOperation)
	var err error
	if ks.side, err = sideOf(sp.Kind(), op); err != nil {
		return kafkaSpan{}, err
	}
	if n, ok := firstInt(attrs, attrBatch); ok && n != 1 {
		return kafkaSpan{}, errBatchSpan
	}
	if ks.side == sideConsumer {
		// A process span covers processing (the Java agent's default per-record span ends when the application asks
		// for the next record); a receive/poll span ends at the hand-over.
		ks.covers = op == "process" || op == "deliver" || op == ""
	}
	var ok bool
	if ks.topic, ok = firstStr(attrs, attrTopic); !ok || ks.topic == "" {
		return kafkaSpan{}, fmt.Errorf("%w: no topic (%s)", errMalformedSpan, attrTopic[0])
	}
	if err := spanRecord(attrs, sp, &ks); err != nil {
		return kafkaSpan{}, err
	}
	if ks.side == sideConsumer {
		if ks.group = spanGroup(resource, attrs, groups); ks.group == "" {
			return kafkaSpan{}, fmt.Errorf("%w: consumer span without a consumer group (%s, nor spans.consumer_groups for its service.name)", errMalformedSpan, attrGroup[0])
		}
	}
	if ks.host, ok = firstStr(resource, attrHost); !ok || ks.host == "" {
		return kafkaSpan{}, fmt.Errorf("%w: no host (resource %s, %s or %s)", errMalformedSpan, attrHost[0], attrHost[1], attrHost[2])
	}
	ks.start, ks.end = int64(sp.StartTimestamp()), int64(sp.EndTimestamp())
	if ks.start <= 0 || ks.end < ks.start || ks.end-ks.start > int64(24*time.Hour) {
		return kafkaSpan{}, fmt.Errorf("%w: span times %d..%d ns are not a span", errMalformedSpan, ks.start, ks.end)
	}
	if sp.TraceID().IsEmpty() || sp.SpanID().IsEmpty() {
		return kafkaSpan{}, fmt.Errorf("%w: no trace or span id", errMalformedSpan)
	}
	if ks.side == sideConsumer {
		ks.refs = spanRefs(sp)
	}
	return ks, nil
}

// sideOf says whether a span of kind with messaging operation op is a producer's or a consumer's. CLIENT (the
// newer conventions' kind for send and receive calls), or an unset kind, leaves it to the operation; an error
// wrapping errMalformedSpan when that names neither side.
func sideOf(kind ptrace.SpanKind, op string) (spanSide, error) {
	switch kind {
	case ptrace.SpanKindProducer:
		return sideProducer, nil
	case ptrace.SpanKindConsumer:
		return sideConsumer, nil
	}
	switch op {
	case "publish", "send", "create":
		return sideProducer, nil
	case "receive", "process", "deliver", "poll":
		return sideConsumer, nil
	}
	return 0, fmt.Errorf("%w: span kind %s with operation %q names neither side", errMalformedSpan, kind, op)
}

// spanRecord sets the partition and offset of the record ks (side and topic set) is about, from the messaging
// attributes or, for Python's confluent-kafka instrumentation, messaging.message.id "<topic>.<partition>.<offset>".
// A producer span without them (that instrumentation's, when the record is not acknowledged yet) is kept with
// noOffset; a receive span without them is about a poll of several partitions (errBatchSpan); any other span
// without them, or with values that are no partition or offset, is an error wrapping errMalformedSpan.
func spanRecord(attrs pcommon.Map, sp ptrace.Span, ks *kafkaSpan) error {
	part, okPart := firstInt(attrs, attrPartition)
	off, okOff := firstInt(attrs, attrOffset)
	if !okPart || !okOff {
		if p, o, ok := parseMessageID(attrs, ks.topic); ok {
			part, off, okPart, okOff = p, o, true, true
		}
	}
	okPart = okPart && part >= 0 && part <= 1<<31-1
	okOff = okOff && off >= 0
	_, hasPart := firstStr(attrs, attrPartition)
	_, hasOff := firstStr(attrs, attrOffset)
	garbled := (hasPart && !okPart) || (hasOff && !okOff) // present but not a partition or offset
	switch {
	case okPart && okOff:
		ks.partition, ks.offset = int32(part), off
	case ks.side == sideConsumer && !ks.covers:
		return errBatchSpan // a receive span over a poll of several partitions
	case ks.side == sideProducer && !garbled && sp.Status().Code() != ptrace.StatusCodeError:
		ks.noOffset, ks.partition, ks.offset = true, -1, -1
	case !okPart:
		return fmt.Errorf("%w: no partition (%s)", errMalformedSpan, attrPartition[0])
	default:
		return fmt.Errorf("%w: no offset (%s)", errMalformedSpan, attrOffset[0])
	}
	return nil
}

// spanGroup is a consumer span's consumer group: its own attribute, else groups[its resource's service.name]
// (Python's confluent-kafka instrumentation puts no group on its process span); "" when neither names one.
func spanGroup(resource, attrs pcommon.Map, groups map[string]string) string {
	if g, ok := firstStr(attrs, attrGroup); ok && g != "" {
		return g
	}
	if svc, found := resource.Get("service.name"); found {
		return groups[svc.AsString()]
	}
	return ""
}

// spanRefs are the spans a consumer span may be joined through: its parent, then its links, at most maxSpanRefs.
func spanRefs(sp ptrace.Span) []spanRef {
	var refs []spanRef
	if parent := sp.ParentSpanID(); !parent.IsEmpty() {
		refs = append(refs, spanRef{sp.TraceID(), parent})
	}
	for i := 0; i < sp.Links().Len() && len(refs) < maxSpanRefs; i++ {
		l := sp.Links().At(i)
		refs = append(refs, spanRef{l.TraceID(), l.SpanID()})
	}
	return refs
}

// maxSpanRefs bounds the parent and links a consumer span is joined through.
const maxSpanRefs = 4

// parseMessageID reads messaging.message.id as "<topic>.<partition>.<offset>" for the span's topic.
func parseMessageID(attrs pcommon.Map, topic string) (partition, offset int64, ok bool) {
	v, found := attrs.Get("messaging.message.id")
	if !found {
		return 0, 0, false
	}
	rest, cut := strings.CutPrefix(v.AsString(), topic+".")
	if !cut {
		return 0, 0, false
	}
	ps, os, cut := strings.Cut(rest, ".")
	if !cut {
		return 0, 0, false
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	return p, o, err1 == nil && err2 == nil
}

// firstStr returns the first of names present in m, as a string (ints are formatted).
func firstStr(m pcommon.Map, names []string) (string, bool) {
	for _, n := range names {
		if v, ok := m.Get(n); ok {
			return v.AsString(), true
		}
	}
	return "", false
}

// firstInt returns the first of names present in m as an integer: an int attribute, or a string of decimal digits
// (messaging.destination.partition.id is a string).
func firstInt(m pcommon.Map, names []string) (int64, bool) {
	for _, n := range names {
		v, ok := m.Get(n)
		if !ok {
			continue
		}
		switch v.Type() {
		case pcommon.ValueTypeInt:
			return v.Int(), true
		case pcommon.ValueTypeStr:
			i, err := strconv.ParseInt(v.Str(), 10, 64)
			return i, err == nil
		case pcommon.ValueTypeDouble:
			f := v.Double()
			return int64(f), f == float64(int64(f))
		}
		return 0, false
	}
	return 0, false
}

// decodedSpans is one spans-topic record read: its Kafka spans, what else it held, and its malformed spans as an
// OTLP request of their own for the dead-letter topic.
type decodedSpans struct {
	spans               []kafkaSpan
	notKafka, batch     int
	malformed           int
	firstErr            error
	malformedRequestOut []byte // an ExportTraceServiceRequest of the malformed spans only (nil when none)
}

// decodeSpans decodes one spans-topic record value (a protobuf ExportTraceServiceRequest, as the OpenTelemetry
// Collector's Kafka exporter writes it with encoding otlp_proto) and classifies its spans. It fails, wrapping
// errMalformedOTLP, only when the value is not such a request; malformed spans inside a good request are reported
// in the result. maxSpans bounds the Kafka spans kept from one record (the rest count as malformed); groups is
// spans.consumer_groups (classifySpan).
func decodeSpans(value []byte, maxSpans int, groups map[string]string) (decodedSpans, error) {
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(value); err != nil {
		return decodedSpans{}, fmt.Errorf("%w: %w", errMalformedOTLP, err)
	}
	var out decodedSpans
	var (
		bad    ptrace.Traces
		hasBad bool
	)
	rss := req.Traces().ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := rs.Resource().Attributes()
		var (
			badRS    ptrace.ResourceSpans
			hasBadRS bool
		)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			var (
				badSS    ptrace.ScopeSpans
				hasBadSS bool
			)
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				ks, err := classifySpan(res, sp, groups)
				if err == nil && len(out.spans) >= maxSpans {
					err = fmt.Errorf("%w: more than %d kafka spans in one request", errMalformedSpan, maxSpans)
				}
				switch {
				case err == nil:
					out.spans = append(out.spans, ks)
					continue
				case errors.Is(err, errNotKafka):
					out.notKafka++
					continue
				case errors.Is(err, errBatchSpan):
					out.batch++
					continue
				}
				out.malformed++
				if out.firstErr == nil {
					out.firstErr = err
				}
				if !hasBad {
					bad, hasBad = ptrace.NewTraces(), true
				}
				if !hasBadRS {
					badRS, hasBadRS = bad.ResourceSpans().AppendEmpty(), true
					rs.Resource().CopyTo(badRS.Resource())
				}
				if !hasBadSS {
					badSS, hasBadSS = badRS.ScopeSpans().AppendEmpty(), true
					ss.Scope().CopyTo(badSS.Scope())
				}
				sp.CopyTo(badSS.Spans().AppendEmpty())
			}
		}
	}
	if out.malformed > 0 {
		b, err := ptraceotlp.NewExportRequestFromTraces(bad).MarshalProto()
		if err != nil {
			return out, fmt.Errorf("encode malformed spans for the dead-letter topic: %w", err)
		}
		out.malformedRequestOut = b
	}
	return out, nil
}

// splitByTrace splits an OTLP request into one request per trace id, so that a spans topic keyed by trace id puts
// a producer span and the consumer spans of its record (one trace: the consumer's span is the producer's child or
// link) in one partition, and one collector replica joins them. It returns the requests with their trace ids as
// keys. A pure function.
func splitByTrace(td ptrace.Traces) (keys [][]byte, reqs []ptrace.Traces) {
	byTrace := map[pcommon.TraceID]int{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			spans := ss.Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				n, ok := byTrace[sp.TraceID()]
				if !ok {
					n = len(reqs)
					byTrace[sp.TraceID()] = n
					id := sp.TraceID()
					keys = append(keys, append([]byte(nil), id[:]...))
					reqs = append(reqs, ptrace.NewTraces())
				}
				// One resource and scope per span in the split request: simple, and the requests are small.
				nrs := reqs[n].ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(nrs.Resource())
				nss := nrs.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(nss.Scope())
				sp.CopyTo(nss.Spans().AppendEmpty())
			}
		}
	}
	return keys, reqs
}
