package kafka

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestEnsureTopicReturnsAReadableTopic: a topic EnsureTopic created is known, with a leader for every partition, to
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
		n, err := EnsureTopic(brokers, sc, TopicSpec{Name: name, Partitions: 6})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = adm.DeleteTopic(name) })
		for _, b := range bs {
			if err := topicLed(b, name, n); err != nil {
				t.Fatalf("topic %d (%s): broker %d right after EnsureTopic: %v", i, name, b.ID(), err)
			}
		}
	}
}
