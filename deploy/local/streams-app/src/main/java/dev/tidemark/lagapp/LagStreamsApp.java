package dev.tidemark.lagapp;

import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * A two-subtopology Kafka Streams application for Tidemark's real-broker tests, run as a streams group
 * (group.protocol=streams, KIP-1071).
 *
 * <p>Subtopology 0 reads INPUT and re-keys every record by its value, which writes the internal repartition topic
 * APP_ID-counts-repartition; subtopology 1 reads that topic, counts records per key in the store "counts" (changelog
 * APP_ID-counts-changelog) and writes the counts to OUTPUT. DELAY_MS, when &gt; 0, sleeps that long per input record,
 * so the group keeps a backlog while it runs.
 *
 * <p>Usage: LagStreamsApp BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR [DELAY_MS]. Prints "RUNNING" on stdout once the
 * application is running; SIGTERM closes it (leaving the group).
 */
public final class LagStreamsApp {
    private LagStreamsApp() {}

    public static void main(String[] args) throws InterruptedException {
        if (args.length < 5) {
            System.err.println("usage: LagStreamsApp BOOTSTRAP APP_ID INPUT OUTPUT STATE_DIR [DELAY_MS]");
            System.exit(2);
        }
        long delayMs = args.length > 5 ? Long.parseLong(args[5]) : 0;
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        p.put(StreamsConfig.GROUP_PROTOCOL_CONFIG, "streams");
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        p.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

        StreamsBuilder b = new StreamsBuilder();
        b.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
            .peek((k, v) -> pause(delayMs))
            .selectKey((k, v) -> v)
            .groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .mapValues(String::valueOf)
            .to(args[3], Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(10));
            done.countDown();
        }));
        streams.start();
        done.await();
    }

    private static void pause(long ms) {
        if (ms <= 0) {
            return;
        }
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
