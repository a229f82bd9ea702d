// Package instrument is what a sarama application imports so that Tidemark can measure its messages exactly.
//
// Producers add [ProducerInterceptor] to sarama's Config.Producer.Interceptors: every record then carries a
// produce-time header ([HeaderProduceTime], encoded by [ProduceHeader.MarshalBinary]) with the producer host's id and,
// unless the application set one, a W3C `traceparent` header written through OpenTelemetry's propagation API.
//
// A producer that also reports its acknowledgements ([AckReporter], through [WrapAsyncProducer] or [WrapSyncProducer])
// sends, per acknowledged record, an [Ack]: send stamp, acknowledgement stamp, partition, offset and the broker's
// timestamp, with which the collector brackets the producer host's clock two-sided (send ≤ append ≤ ack).
//
// Consumers create a [Consumer] for their group, call [Consumer.Receive] when a record is handed to the application
// (or register the Consumer as a sarama ConsumerInterceptor to stamp fetch time) and [Consumer.Done] once processing
// has completed. Done stamps the processed time and queues a [Receipt]; a background [Emitter] batches receipts into
// Tidemark's receipts topic, keyed by source topic and partition so each source partition's receipts stay ordered.
// Done never blocks and never fails the application: when the bounded queue is full the receipt is dropped and
// counted ([Emitter.Stats]).
//
// Clocks: every component takes a Clock (func() time.Time) so that tests and the demo can give a host a skewed clock;
// Go programs read the wall clock through the vDSO and ignore faketime. A host may also run [TimeSync] against the
// collector's time-sync endpoint ([TimeSyncHandler]); the bracketed offset it measures travels in headers and receipts
// ([ClockOffset]).
//
// The wire formats (produce header v1, receipt v1, receipt batch v1, ack v1, ack batch v1, time-sync exchange) are documented in
// docs/instrumentation.md and on the Marshal/Unmarshal methods. Decoders reject anything they do not understand, and
// receipts holding values no consumer writes ([Receipt.Validate]: a negative offset, an empty topic, an offset beyond
// [MaxClockOffset]), with an error wrapping [ErrMalformed] or [ErrUnsupportedVersion]; they are fuzzed. [TraceParent]
// tells a malformed traceparent header ([ErrMalformedTraceParent]) from a missing one so callers can count it.
package instrument
