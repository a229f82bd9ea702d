package topicadmin

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestEnsureTopicReturnsAReadableTopic: a topic Ensure created is known, with a leader for every partition, to
// every broker the moment it returns, so that the caller's first read or produce (the collector reads its new
// replay-state topic right away) never meets UNKNOWN_TOPIC_OR_PARTITION. Each broker is asked once, on connections
// opened before the topic is created: nothing here gives the brokers extra time.
func TestEnsureTopicReturnsAReadableTopic(t *testing.T) {
	brokers := testenv.Kafka(t)
	sc := testenv.SaramaConfig(t)
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	bs := client.Brokers()
	for _, b := range bs {
		if err := b.Open(sc); err != nil && err != sarama.ErrAlreadyConnected {
			t.Fatal(err)
		}
		if ok, err := b.Connected(); !ok {
			t.Fatalf("broker %d: %v", b.ID(), err)
		}
	}
	adm := testenv.Admin(t)
	for i := range 10 {
		name := testenv.Name(t, "ensure")
		n, err := Ensure(brokers, sc, Spec{Name: name, Partitions: 6})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = adm.DeleteTopic(name) })
		for _, b := range bs {
			if err := topicLed(b, name, n); err != nil {
				t.Fatalf("topic %d (%s): broker %d right after Ensure: %v", i, name, b.ID(), err)
			}
		}
	}
}

// TestEnsureTopicSpreadsLeaders checks the probe topic's layout: one partition per broker, each broker the leader of
// one, LogAppendTime.
func TestEnsureTopicSpreadsLeaders(t *testing.T) {
	brokers := testenv.Kafka(t)
	name := testenv.Name(t, "spread")
	n, err := Ensure(brokers, testenv.SaramaConfig(t), Spec{Name: name, SpreadLeaders: true,
		Configs: map[string]string{"message.timestamp.type": "LogAppendTime"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testenv.Admin(t).DeleteTopic(name) })
	testenv.WaitTopicReady(t, name, n)
	prod, err := kafka.NewProducer(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	leaders, err := prod.Leaders(name)
	if err != nil {
		t.Fatal(err)
	}
	distinct := map[int32]bool{}
	for _, b := range leaders {
		distinct[b] = true
	}
	if int(n) != testenv.KafkaBrokerCount(t) || len(distinct) != int(n) {
		t.Fatalf("%d partitions led by %d distinct brokers, want one per broker (%d)", n, len(distinct), testenv.KafkaBrokerCount(t))
	}
	// Ensuring it again leaves it as it is.
	if again, err := Ensure(brokers, testenv.SaramaConfig(t), Spec{Name: name, SpreadLeaders: true}); err != nil || again != n {
		t.Fatalf("second ensure: %d, %v", again, err)
	}
}
