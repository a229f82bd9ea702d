package kafka

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
)

// unstartedMetadata connects a cache to the real cluster without starting its refresher, so a test can queue
// lookups first and then start it (m.start()) and count the requests exactly.
func unstartedMetadata(t *testing.T, cfg MetadataConfig) *Metadata {
	t.Helper()
	cfg.SetDefaults()
	sc := testenv.SaramaConfig(t)
	client, err := sarama.NewClient(testenv.Kafka(t), sc)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	m := newMetadata(client, admin, cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func awaitAll(t *testing.T, m *Metadata, names []string) {
	t.Helper()
	for _, n := range names {
		select {
		case <-m.Await(n):
		case <-time.After(30 * time.Second):
			t.Fatalf("lookup of %s did not settle in 30s", n)
		}
	}
}

// TestMetadataLooksUpInTheBackground: on the real broker, a lookup never blocks (first answer TopicPending), all
// names queued meanwhile go in one Metadata request per BatchTopics names (300 names, two requests,
// not a synchronous refresh of about a second per unknown name), existing topics get their leaders, epochs and
// timestamp type, and missing ones are answered from the negative cache without a further request.
func TestMetadataLooksUpInTheBackground(t *testing.T) {
	lat := testenv.CreateTopic(t, "lat", testenv.Topic{Partitions: 3, Configs: map[string]string{"message.timestamp.type": "LogAppendTime"}})
	ct := testenv.CreateTopic(t, "ct", testenv.Topic{Partitions: 1})
	m := unstartedMetadata(t, MetadataConfig{BatchTopics: 200, TTL: time.Hour})
	names := []string{lat, ct}
	for i := range 298 {
		names = append(names, testenv.Name(t, fmt.Sprintf("nosuch%d", i)))
	}
	for _, n := range names {
		if v := m.Topic(n); v.State != TopicPending {
			t.Fatalf("first lookup of %s: %v, want pending", n, v.State)
		}
	}
	m.start()
	awaitAll(t, m, names)
	// One request lists the cluster's topics at start, two look the 300 names up.
	if st := m.Stats(); st.Requests != 3 || st.Topics != 300 || st.Unknown != 298 {
		t.Fatalf("stats %+v, want 1 + 2 requests for 300 names, 298 unknown", st)
	}
	v := m.Topic(lat)
	if v.State != TopicKnown || v.TimestampType != TimestampLogAppend || len(v.Partitions) != 3 {
		t.Fatalf("LogAppendTime topic: %+v", v)
	}
	for p := range int32(3) {
		if v.Leader(p) < 0 || v.Partitions[p].LeaderEpoch < 0 {
			t.Fatalf("partition %d: %+v, want a leader and its epoch", p, v.Partitions[p])
		}
	}
	if v.Leader(3) != -1 {
		t.Fatalf("partition 3 of a 3-partition topic has leader %d, want -1", v.Leader(3))
	}
	if v := m.Topic(ct); v.State != TopicKnown || v.TimestampType != TimestampCreate {
		t.Fatalf("CreateTime topic: %+v", v)
	}
	for _, n := range names[2:] {
		if v := m.Topic(n); v.State != TopicMissing {
			t.Fatalf("%s: %v, want missing", n, v.State)
		}
	}
	if got := m.Stats().Requests; got != 3 {
		t.Fatalf("%d requests after answering from the cache, want still 3", got)
	}
	// Looking names up never creates them, whatever the broker's auto.create.topics.enable.
	adm := testenv.Admin(t)
	topics, err := adm.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := topics[names[2]]; ok {
		t.Fatalf("looking up %s created it", names[2])
	}
}

// TestMetadataBoundsUnknownNames: past MaxUnknown names not known to exist, a new name answers TopicOverflow at
// once without a request or an entry, unless the cluster's topic list holds it (a flood of made-up names must not
// keep a real topic from being looked up); once the negative answers expire (MissingTTL on the cache's clock) they
// are pruned and new names are looked up again. Illegal names are never sent to a broker.
func TestMetadataBoundsUnknownNames(t *testing.T) {
	existing := testenv.CreateTopic(t, "real", testenv.Topic{Partitions: 2})
	var mu sync.Mutex
	now := time.Now()
	m := unstartedMetadata(t, MetadataConfig{MaxUnknown: 50, MissingTTL: time.Minute, TTL: time.Hour})
	m.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var names []string
	for i := range 50 {
		names = append(names, testenv.Name(t, fmt.Sprintf("nosuch%d", i)))
		m.Topic(names[i])
	}
	extra := testenv.Name(t, "one-too-many")
	v := m.Topic(extra)
	if v.State != TopicOverflow || !errors.Is(v.Err, ErrTooManyUnknownTopics) {
		t.Fatalf("51st unknown name: %+v, want overflow", v)
	}
	if v := m.Topic("bad topic!"); v.State != TopicMissing || v.Err == nil {
		t.Fatalf("illegal name: %+v, want missing with the reason", v)
	}
	m.start()
	awaitAll(t, m, names)
	if st := m.Stats(); st.Topics != 50 || st.Unknown != 50 || st.Overflows != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v: want 50 names tracked, 1 overflow, 2 requests (the list, the lookup)", st)
	}
	if v := m.Topic(extra); v.State != TopicOverflow {
		t.Fatalf("while the negative answers stand: %v, want overflow", v.State)
	}
	if v := m.Topic(existing); v.State != TopicPending {
		t.Fatalf("a listed topic while the bound is full: %v, want pending (looked up)", v.State)
	}
	awaitAll(t, m, []string{existing})
	if v := m.Topic(existing); v.State != TopicKnown || len(v.Partitions) != 2 {
		t.Fatalf("listed topic: %+v, want known with 2 partitions", v)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute) // every missing answer has expired
	mu.Unlock()
	if v := m.Topic(extra); v.State != TopicPending {
		t.Fatalf("after the negative answers expired: %v, want pending (looked up)", v.State)
	}
	if st := m.Stats(); st.Topics != 2 || st.Unknown != 1 {
		t.Fatalf("stats %+v: want the expired names pruned (the real topic and the new name left)", st)
	}
}

// TestMetadataCloseReleasesWaiters: Close closes every pending name's channel, so no caller parked on Await is left
// behind, and a lookup after Close answers failed without queueing anything.
func TestMetadataCloseReleasesWaiters(t *testing.T) {
	m := unstartedMetadata(t, MetadataConfig{})
	name := testenv.Name(t, "never-looked-up")
	m.Topic(name)
	ch := m.Await(name)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Await's channel still open after Close")
	}
	for _, n := range []string{name, testenv.Name(t, "after-close")} {
		if v := m.Topic(n); v.State != TopicFailed {
			t.Fatalf("%s after Close: %v, want failed", n, v.State)
		}
	}
}
