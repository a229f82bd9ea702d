package dev.tidemark.otelapp;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicLongArray;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Produces N records to TOPIC, then consumes them as GROUP, processing each for PROC_MS. It knows nothing of
 * Tidemark or OpenTelemetry: the agent, if attached, instruments it. For each record it prints, on its own clock,
 * the truth a test compares Tidemark's stages with:
 *
 * <pre>SENT partition offset send_ms ack_ms
 * DONE partition offset receive_ms processed_ms</pre>
 *
 * Usage: SpansApp BOOTSTRAP TOPIC GROUP N PROC_MS
 */
public final class SpansApp {
  public static void main(String[] args) throws Exception {
    String bootstrap = args[0], topic = args[1], group = args[2];
    int n = Integer.parseInt(args[3]);
    long procMs = Long.parseLong(args[4]);

    Properties pp = new Properties();
    pp.put("bootstrap.servers", bootstrap);
    pp.put("acks", "all");
    pp.put("linger.ms", "0");
    pp.put("key.serializer", StringSerializer.class.getName());
    pp.put("value.serializer", StringSerializer.class.getName());
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
      // The first send() waits for the topic's metadata before the client (and the agent's span) starts sending:
      // fetch it first, so each printed send time is when the send itself began.
      producer.partitionsFor(topic);
      AtomicLongArray acked = new AtomicLongArray(n);
      for (int i = 0; i < n; i++) {
        final int idx = i;
        long sent = System.currentTimeMillis();
        Future<RecordMetadata> f = producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i),
            (md, err) -> acked.set(idx, System.currentTimeMillis()));
        RecordMetadata md = f.get();
        System.out.printf("SENT %d %d %d %d%n", md.partition(), md.offset(), sent, acked.get(idx));
        Thread.sleep(20); // spread the sends: each is its own round trip
      }
    }

    Properties cp = new Properties();
    cp.put("bootstrap.servers", bootstrap);
    cp.put("group.id", group);
    cp.put("auto.offset.reset", "earliest");
    cp.put("enable.auto.commit", "false");
    cp.put("key.deserializer", StringDeserializer.class.getName());
    cp.put("value.deserializer", StringDeserializer.class.getName());
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
      consumer.subscribe(List.of(topic));
      int seen = 0;
      long deadline = System.currentTimeMillis() + 120_000;
      while (seen < n && System.currentTimeMillis() < deadline) {
        ConsumerRecords<String, String> recs = consumer.poll(Duration.ofMillis(500));
        // The agent's per-record process span runs from the iterator's hand-over to the next call.
        for (ConsumerRecord<String, String> r : recs) {
          long recv = System.currentTimeMillis();
          Thread.sleep(procMs);
          long done = System.currentTimeMillis();
          System.out.printf("DONE %d %d %d %d%n", r.partition(), r.offset(), recv, done);
          seen++;
        }
        consumer.commitSync();
      }
    }
    System.out.println("FINISHED");
  }
}
