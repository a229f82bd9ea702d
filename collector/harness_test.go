package collector

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// The integration tests in this package run on the real Kafka brokers and ClickHouse server deploy/local starts.

// env is one test's world: unique topics and groups, a migrated ClickHouse database.
type env struct {
	t        *testing.T
	brokers  []string
	source   string // the application's topic (LogAppendTime, 3 partitions)
	cfg      Config
	db       string
	chAddr   string
	conn     driver.Conn
	logLevel slog.Level
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := newEnvOn(t, testenv.Kafka(t))
	adm := testenv.Admin(t)
	t.Cleanup(func() {
		for _, topic := range []string{e.cfg.DeadLetterTopic, e.cfg.Receipts.Topic, e.cfg.Probe.Topic, e.cfg.ReplayStateTopic} {
			_ = adm.DeleteTopic(topic)
		}
	})
	return e
}

// newEnvOn is newEnv on the cluster reachable through brokers (the shared stack's, or a test's private one).
func newEnvOn(t *testing.T, brokers []string) *env {
	t.Helper()
	e := &env{t: t, brokers: brokers, chAddr: testenv.ClickHouseAddr(t), logLevel: slog.LevelWarn}
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		e.logLevel = slog.LevelDebug
	}
	e.source = e.createTopic("src", 3, map[string]string{"message.timestamp.type": "LogAppendTime"})
	e.cfg = Config{
		DeadLetterTopic:  testenv.Name(t, "dlq"),
		ReplayStateTopic: testenv.Name(t, "rs"),
		Receipts:         ReceiptsConfig{Enabled: true, Topic: testenv.Name(t, "rc"), Group: testenv.Name(t, "rcg"), Partitions: 3},
		Probe:            ProbeConfig{Enabled: true, Topic: testenv.Name(t, "pr"), Group: testenv.Name(t, "prg"), Interval: 200 * time.Millisecond, LossTimeout: 5 * time.Second},
		MaxWait:          50 * time.Millisecond,
		DrainTimeout:     5 * time.Second,
	}
	e.db, e.conn = testenv.ClickHouseDB(t)
	s := e.openStore(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	return e
}

// createTopic creates a uniquely named topic on e's cluster, deleted when the test ends, and waits until it is ready.
func (e *env) createTopic(prefix string, partitions int32, configs map[string]string) string {
	e.t.Helper()
	name := testenv.Name(e.t, prefix)
	entries := map[string]*string{}
	for k, v := range configs {
		entries[k] = &v
	}
	adm, err := sarama.NewClusterAdmin(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
		e.t.Fatalf("create topic %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		if adm, err := sarama.NewClusterAdmin(e.brokers, testenv.SaramaConfig(e.t)); err == nil {
			_ = adm.DeleteTopic(name)
			_ = adm.Close()
		}
	})
	e.waitTopicReady(name, partitions)
	return name
}

// brokerCount returns how many brokers e's cluster has now.
func (e *env) brokerCount() int {
	e.t.Helper()
	client, err := sarama.NewClient(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer client.Close()
	return len(client.Brokers())
}

// partitions returns how many partitions topic has now.
func (e *env) partitions(topic string) int {
	e.t.Helper()
	client, err := sarama.NewClient(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer client.Close()
	if err := client.RefreshMetadata(topic); err != nil {
		e.t.Fatal(err)
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(parts)
}

// waitTopicReady waits (up to 30 s) until topic has n partitions on e's cluster, each with a leader.
func (e *env) waitTopicReady(topic string, n int32) {
	e.t.Helper()
	client, err := sarama.NewClient(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer client.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := client.RefreshMetadata(topic)
		var parts []int32
		if err == nil {
			parts, err = client.Partitions(topic)
		}
		if err == nil && int32(len(parts)) != n {
			err = fmt.Errorf("%d of %d partitions", len(parts), n)
		}
		for _, p := range parts {
			if err == nil {
				_, err = client.Leader(topic, p)
			}
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("topic %s not ready after 30s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: e.logLevel}))
}

// openStore opens the test database, optionally through another address (a proxy).
func (e *env) openStore(addr []string) *store.Store {
	e.t.Helper()
	if addr == nil {
		addr = []string{e.chAddr}
	}
	cfg := store.Config{Addr: addr, Database: e.db, DialTimeout: time.Second}
	cfg.Writer.FlushInterval = 200 * time.Millisecond
	cfg.Writer.RetryMax = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Open(ctx, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// running is a collector started by start.
type running struct {
	cancel  context.CancelFunc
	done    chan error
	writer  *store.Writer
	st      *store.Store
	metrics *Metrics
	col     *Collector
	engine  *latency.Engine
}

// start runs a collector writing through a store at addr (nil: the server itself) with writer settings mod.
func (e *env) start(addr []string, mod func(*store.WriterConfig)) *running {
	e.t.Helper()
	st := e.openStore(addr)
	if mod != nil {
		cfg := st.Config()
		mod(&cfg.Writer)
		st.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		if st, err = store.Open(ctx, cfg); err != nil {
			e.t.Fatal(err)
		}
	}
	w, err := store.NewWriter(st, store.WriterOptions{Logger: e.logger()})
	if err != nil {
		e.t.Fatal(err)
	}
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		e.t.Fatal(err)
	}
	m := NewMetrics(nil)
	c, err := New(e.cfg, Options{Kafka: kafka.ClientConfig{Brokers: e.brokers}, Engine: eng, Sink: w, Metrics: m, Logger: e.logger()})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), writer: w, st: st, metrics: m, col: c, engine: eng}
	go func() { r.done <- c.Run(ctx) }()
	// Run creates the receipts topic first thing; applications started before that would lose receipts.
	e.waitTopicReady(e.cfg.Receipts.Topic, e.cfg.Receipts.Partitions)
	return r
}

// stop stops the collector gracefully: consumers stop, the sink drains, offsets commit, the writer closes.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("collector run: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("collector did not stop within 60s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.writer.Close(ctx); err != nil {
		t.Errorf("close writer: %v", err)
	}
	_ = r.st.Close()
}

// app produces n instrumented records to the source topic (producer host p1 with clock skew pSkew) and consumes them
// as group "app" on host c1 (skew cSkew), processing each for procDelay and emitting receipts to the receipts topic.
func (e *env) app(n int, pSkew, cSkew, procDelay time.Duration) {
	e.appOn(e.source, n, pSkew, cSkew, procDelay)
}

// appOn is app on another source topic (3 partitions).
func (e *env) appOn(source string, n int, pSkew, cSkew, procDelay time.Duration) {
	e.t.Helper()
	e.produceApp(source, n, pSkew)
	e.consumeApp(source, 3, sarama.OffsetOldest, n, cSkew, procDelay)
}

// produceApp produces n instrumented records to source (producer host p1 with clock skew pSkew).
func (e *env) produceApp(source string, n int, pSkew time.Duration) {
	e.t.Helper()
	e.produceWith(source, n, instrument.ProducerConfig{Host: "p1", Clock: instrument.OffsetClock(time.Now, pSkew)})
}

// exactClock is an instrument.OffsetSource for a producer whose clock is the collector's (the test process's): its
// offset is 0, known to 0.1 ms.
type exactClock struct{}

func (exactClock) ClockOffset() instrument.ClockOffset {
	return instrument.ClockOffset{Uncertainty: 100 * time.Microsecond, Valid: true}
}

// produceWith produces n records to source through a producer interceptor configured by pcfg.
func (e *env) produceWith(source string, n int, pcfg instrument.ProducerConfig) {
	e.t.Helper()
	pc := testenv.SaramaConfig(e.t)
	pc.Producer.Interceptors = []sarama.ProducerInterceptor{instrument.NewProducerInterceptor(pcfg)}
	prod, err := sarama.NewSyncProducer(e.brokers, pc)
	if err != nil {
		e.t.Fatal(err)
	}
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: source, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder("order")}
	}
	if err := prod.SendMessages(msgs); err != nil {
		e.t.Fatal(err)
	}
	_ = prod.Close()
}

// consumeApp consumes n records of source's first partitions partitions, from offset from (sarama.OffsetOldest: the
// start) on, as group "app" on host c1 (clock skew cSkew), processing each for procDelay and emitting receipts to
// the receipts topic.
func (e *env) consumeApp(source string, partitions int32, from int64, n int, cSkew, procDelay time.Duration) {
	e.t.Helper()
	e.consumeAppAt(source, partitions, func(int32) int64 { return from }, n, cSkew, procDelay)
}

// partitionEnds returns the end offset of each of topic's partitions now.
func (e *env) partitionEnds(topic string) map[int32]int64 {
	e.t.Helper()
	client, err := sarama.NewClient(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		e.t.Fatal(err)
	}
	ends := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if ends[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			e.t.Fatal(err)
		}
	}
	return ends
}

// consumeAppAt is consumeApp reading each partition p from from(p).
func (e *env) consumeAppAt(source string, partitions int32, from func(int32) int64, n int, cSkew, procDelay time.Duration) {
	e.t.Helper()
	ec := testenv.SaramaConfig(e.t)
	ec.Producer.Idempotent = true
	ec.Net.MaxOpenRequests = 1
	ec.Producer.RequiredAcks = sarama.WaitForAll
	ap, err := sarama.NewAsyncProducer(e.brokers, ec)
	if err != nil {
		e.t.Fatal(err)
	}
	// Small receipt batches (32 per record) so that a backlog spans many records, as under steady traffic.
	em := instrument.NewEmitter(ap, instrument.EmitterConfig{Topic: e.cfg.Receipts.Topic, Linger: 20 * time.Millisecond, MaxBatch: 32})
	rc, err := instrument.NewConsumer(instrument.ConsumerConfig{Group: "app", Host: "c1", Clock: instrument.OffsetClock(time.Now, cSkew)}, em)
	if err != nil {
		e.t.Fatal(err)
	}
	cons, err := sarama.NewConsumer(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cons.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for p := int32(0); p < partitions; p++ {
		pcons, err := cons.ConsumePartition(source, p, from(p))
		if err != nil {
			e.t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pcons.Close()
			deadline := time.After(30 * time.Second)
			for {
				mu.Lock()
				done := got >= n
				mu.Unlock()
				if done {
					return
				}
				select {
				case m := <-pcons.Messages():
					rc.Receive(m)
					time.Sleep(procDelay)
					rc.Done(m)
					mu.Lock()
					got++
					mu.Unlock()
				case <-deadline:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	em.Close()
	if st := em.Stats(); st.Sent != uint64(n) || got != n {
		e.t.Fatalf("app consumed %d of %d, emitter %+v", got, n, st)
	}
}

// produceRaw writes raw values to a topic (garbage for the dead-letter tests).
func (e *env) produceRaw(topic string, values ...[]byte) {
	e.t.Helper()
	prod, err := sarama.NewSyncProducer(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer prod.Close()
	for _, v := range values {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(v)}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// produceWithHeader writes one record carrying the given header.
func (e *env) produceWithHeader(topic, key string, value []byte) {
	e.t.Helper()
	prod, err := sarama.NewSyncProducer(e.brokers, testenv.SaramaConfig(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	defer prod.Close()
	if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x"),
		Headers: []sarama.RecordHeader{{Key: []byte(key), Value: value}}}); err != nil {
		e.t.Fatal(err)
	}
}

// topicEnd returns the sum of the topic's high watermarks.
func (e *env) topicEnd(topic string) int64 {
	e.t.Helper()
	var sum int64
	for _, off := range e.partitionEnds(topic) {
		sum += off
	}
	return sum
}

// query runs a single-value query on the test database.
func (e *env) count(q string, args ...any) uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n uint64
	if err := e.conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// waitCount polls q until it returns want or the timeout passes; it returns the last value.
func (e *env) waitCount(want uint64, timeout time.Duration, q string, args ...any) uint64 {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var n uint64
	for time.Now().Before(deadline) {
		if n = e.count(q, args...); n >= want {
			return n
		}
		time.Sleep(250 * time.Millisecond)
	}
	return n
}

// waitFor polls f until it returns at least want or the timeout passes; it returns the last value.
func waitFor(want int64, timeout time.Duration, f func() int64) int64 {
	deadline := time.Now().Add(timeout)
	for {
		v := f()
		if v >= want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// produceReceipts writes n receipts of group "app" on topic "orders" (3 source partitions), source offsets from/3 to
// (from+n)/3 on each, to the receipts topic in records of 50 keyed by source partition as the instrumentation's
// emitter keys them.
func (e *env) produceReceipts(from, n int) {
	e.t.Helper()
	if _, err := topicadmin.Ensure(e.brokers, testenv.SaramaConfig(e.t), topicadmin.Spec{Name: e.cfg.Receipts.Topic, Partitions: e.cfg.Receipts.Partitions}); err != nil {
		e.t.Fatal(err)
	}
	e.waitTopicReady(e.cfg.Receipts.Topic, e.cfg.Receipts.Partitions)
	pc := testenv.SaramaConfig(e.t)
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	prod, err := sarama.NewSyncProducer(e.brokers, pc)
	if err != nil {
		e.t.Fatal(err)
	}
	defer prod.Close()
	now := time.Now()
	var msgs []*sarama.ProducerMessage
	for p := int32(0); p < 3; p++ {
		for first := int64(from / 3); first < int64((from+n)/3); first += 50 {
			rs := make([]instrument.Receipt, 50)
			for j := range rs {
				off := first + int64(j)
				rs[j] = instrument.Receipt{Group: "app", Topic: "orders", Partition: p, Offset: off,
					ProcessedNs: now.Add(time.Duration(off) * time.Millisecond).UnixNano(), Host: "c1"}
			}
			v, err := instrument.AppendReceiptBatch(nil, rs)
			if err != nil {
				e.t.Fatal(err)
			}
			msgs = append(msgs, &sarama.ProducerMessage{Topic: e.cfg.Receipts.Topic, Partition: p % e.cfg.Receipts.Partitions, Value: sarama.ByteEncoder(v)})
		}
	}
	if err := prod.SendMessages(msgs); err != nil {
		e.t.Fatal(err)
	}
}

// waitGroupMembers waits (up to 60 s) until the consumer group has n members.
func (e *env) waitGroupMembers(group string, n int) {
	e.t.Helper()
	adm := testenv.Admin(e.t)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ds, err := adm.DescribeConsumerGroups([]string{group})
		if err == nil && len(ds) == 1 && len(ds[0].Members) == n && ds[0].State == "Stable" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("group %s: not %d stable members after 60s (%v)", group, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
