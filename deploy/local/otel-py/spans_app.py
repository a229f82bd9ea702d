"""Produces N records to TOPIC, then consumes them as GROUP, processing each for PROC_MS.

It knows nothing of Tidemark: OpenTelemetry's confluent-kafka instrumentation wraps its producer and consumer and the
SDK exports the spans over OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. For each record it prints, on its own
wall clock, the truth a test compares Tidemark's stages with:

    SENT partition offset send_ms ack_ms
    DONE partition offset receive_ms processed_ms

then FINISHED, and exits once the tracer provider has flushed its spans.

Usage: spans_app.py BOOTSTRAP TOPIC GROUP N PROC_MS
Env: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_SERVICE_NAME (otel-py-app), HOST_NAME (the resource's host.name).
"""

import os
import socket
import sys
import time

from confluent_kafka import Consumer, Producer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def now_ms():
    return int(time.time() * 1000)


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: spans_app.py BOOTSTRAP TOPIC GROUP N PROC_MS")
    bootstrap, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    n, proc_ms = int(sys.argv[4]), int(sys.argv[5])

    resource = Resource.create({
        "service.name": os.environ.get("OTEL_SERVICE_NAME", "otel-py-app"),
        "host.name": os.environ.get("HOST_NAME") or socket.gethostname(),
    })
    provider = TracerProvider(resource=resource)
    # The exporter reads OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; a short batch delay gets the spans out promptly.
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=200))

    inst = ConfluentKafkaInstrumentor()
    producer = inst.instrument_producer(
        Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0}), tracer_provider=provider)
    # The first produce waits for the topic's metadata: fetch it first, so each send time is the send itself.
    producer.original_producer().list_topics(topic, timeout=30)
    for i in range(n):
        acked = {}

        def delivered(err, msg, acked=acked):
            if err is not None:
                raise SystemExit(f"delivery failed: {err}")
            acked["ms"] = now_ms()
            acked["partition"], acked["offset"] = msg.partition(), msg.offset()

        sent = now_ms()
        producer.produce(topic, value=f"v{i}".encode(), key=f"k{i}".encode(), on_delivery=delivered)
        producer.flush(30)  # serves the delivery callback: one round trip per record
        if "ms" not in acked:
            sys.exit(f"record {i} not acknowledged within 30 s")
        print(f"SENT {acked['partition']} {acked['offset']} {sent} {acked['ms']}", flush=True)
        time.sleep(0.02)  # spread the sends: each is its own round trip

    consumer = inst.instrument_consumer(Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }), tracer_provider=provider)
    consumer.subscribe([topic])
    done, deadline = 0, time.monotonic() + 120
    while done < n:
        if time.monotonic() > deadline:
            sys.exit(f"consumed {done} of {n} records within 120 s")
        msg = consumer.poll(1.0)  # one record per poll: the instrumentation's process span ends at the next poll
        if msg is None:
            continue
        if msg.error():
            sys.exit(f"consume failed: {msg.error()}")
        received = now_ms()
        time.sleep(proc_ms / 1000)
        processed = now_ms()
        print(f"DONE {msg.partition()} {msg.offset()} {received} {processed}", flush=True)
        done += 1
    consumer.commit(asynchronous=False)
    consumer.close()  # ends the last process span
    print("FINISHED", flush=True)
    provider.shutdown()  # flushes the spans


if __name__ == "__main__":
    main()
