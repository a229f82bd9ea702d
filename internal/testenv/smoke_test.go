package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestSmokeLogAppendTime proves the harness runs a real broker: on a LogAppendTime topic the broker overwrites the
// producer's timestamp with its own append time, which a fake (kfake) does not do.
func TestSmokeLogAppendTime(t *testing.T) {
	topic := testenv.CreateTopic(t, "smoke", testenv.Topic{
		Partitions: 1, Configs: map[string]string{"message.timestamp.type": "LogAppendTime"},
	})
	cfg := testenv.SaramaConfig(t)
	prod, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer prod.Close()

	past := time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC) // far in the past: must NOT come back
	before := time.Now().Add(-time.Second)
	_, offset, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x"), Timestamp: past})
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	after := time.Now().Add(time.Second)

	cons, err := sarama.NewConsumer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, 0, offset)
	if err != nil {
		t.Fatalf("consume partition: %v", err)
	}
	defer pc.Close()
	select {
	case msg := <-pc.Messages():
		if msg.Offset != offset {
			t.Fatalf("offset = %d, want %d", msg.Offset, offset)
		}
		if msg.Timestamp.Before(before) || msg.Timestamp.After(after) {
			t.Fatalf("timestamp = %v, want the broker's append time in [%v, %v] (producer sent %v)",
				msg.Timestamp, before, after, past)
		}
	case err := <-pc.Errors():
		t.Fatalf("consume: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no record within 20s")
	}
}

// TestSmokeGroupCommit commits an offset as a consumer group and reads it back through ListConsumerGroupOffsets.
func TestSmokeGroupCommit(t *testing.T) {
	topic := testenv.CreateTopic(t, "smoke", testenv.Topic{Partitions: 3})
	group := testenv.Name(t, "g")
	cfg := testenv.SaramaConfig(t)
	prod, err := sarama.NewSyncProducer(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer prod.Close()
	for i := 0; i < 10; i++ {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 1, Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}

	om, err := sarama.NewOffsetManagerFromClient(group, mustClient(t, cfg))
	if err != nil {
		t.Fatalf("offset manager: %v", err)
	}
	pom, err := om.ManagePartition(topic, 1)
	if err != nil {
		t.Fatalf("manage partition: %v", err)
	}
	pom.MarkOffset(7, "")
	om.Commit()
	if err := pom.Close(); err != nil {
		t.Fatalf("close partition offset manager: %v", err)
	}
	if err := om.Close(); err != nil {
		t.Fatalf("close offset manager: %v", err)
	}

	resp, err := testenv.Admin(t).ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		t.Fatalf("list group offsets: %v", err)
	}
	want := map[int32]int64{0: -1, 1: 7, 2: -1} // -1: Kafka's answer for "no commit"
	for p, w := range want {
		b := resp.GetBlock(topic, p)
		if b == nil {
			t.Fatalf("no block for partition %d", p)
		}
		if b.Err != sarama.ErrNoError {
			t.Fatalf("partition %d: %v", p, b.Err)
		}
		if b.Offset != w {
			t.Errorf("partition %d committed = %d, want %d", p, b.Offset, w)
		}
	}
}

func mustClient(t *testing.T, cfg *sarama.Config) sarama.Client {
	t.Helper()
	c, err := sarama.NewClient(testenv.Kafka(t), cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSmokeClickHouse batch-inserts 100k rows into the real server and reads back exact aggregates.
func TestSmokeClickHouse(t *testing.T) {
	_, conn := testenv.ClickHouseDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := conn.Exec(ctx, `CREATE TABLE smoke (d Date, k UInt32, v Int64, s String)
		ENGINE = MergeTree() PARTITION BY d ORDER BY k`); err != nil {
		t.Fatalf("create table: %v", err)
	}
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO smoke (d, k, v, s)")
	if err != nil {
		t.Fatalf("prepare batch: %v", err)
	}
	day := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	const n = 100_000
	for i := 0; i < n; i++ {
		s := "even"
		if i%2 == 1 {
			s = "odd"
		}
		if err := batch.Append(day, uint32(i), int64(i)-50_000, s); err != nil {
			t.Fatalf("append row %d: %v", i, err)
		}
	}
	if err := batch.Send(); err != nil {
		t.Fatalf("send batch: %v", err)
	}
	var (
		count    uint64
		sum      int64
		min, max int64
		odd      uint64
	)
	row := conn.QueryRow(ctx, "SELECT count(), sum(v), min(v), max(v), countIf(s = ?) FROM smoke", "odd")
	if err := row.Scan(&count, &sum, &min, &max, &odd); err != nil {
		t.Fatalf("aggregate: %v", err)
	}
	// sum of (i - 50000) for i in [0, 100000) = 100000*99999/2 - 100000*50000 = -50000.
	if count != n || sum != -50_000 || min != -50_000 || max != 49_999 || odd != n/2 {
		t.Fatalf("got count=%d sum=%d min=%d max=%d odd=%d; want 100000 -50000 -50000 49999 50000", count, sum, min, max, odd)
	}
}
