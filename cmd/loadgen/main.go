// Command loadgen is the demo's load generator: instrumented producer hosts whose clocks are skewed by injected
// offsets, an instrumented consumer group whose members have their own skews and processing delays, and an offset
// reset to earliest halfway through, so Tidemark has real traffic across disagreeing clocks and a replay to measure.
// Skews are injected through the instrumentation's Clock (Go ignores faketime).
//
// Usage (deploy/demo/run.sh runs it):
//
//	loadgen --brokers 127.0.0.1:19092 --duration 110s --reset-at 55s \
//	  --producer p-ahead:+2500ms --producer p-behind:-800ms --producer p-exact:0 \
//	  --consumer c-1:-300ms:4ms --consumer c-2:+150ms:6ms:sync --timesync http://127.0.0.1:9300/v1/timesync \
//	  --otlp 127.0.0.1:4318
//
// With --otlp every host is a traced application: its own TracerProvider (service.name "producer-<host>" or
// "consumer-<host>") exports the send and process spans of latency/instrument over OTLP/HTTP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
	"github.com/tidemark/tidemark/latency/instrument"
)

// host is one simulated host: its name, its clock skew (host clock − true time), a processing delay for consumers,
// and whether it runs time sync with the collector.
type host struct {
	name  string
	skew  time.Duration
	delay time.Duration
	sync  bool
}

// parseHost parses name:skew[:delay][:sync], e.g. "p-ahead:+2500ms" or "c-2:+150ms:6ms:sync".
func parseHost(s string) (host, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 {
		return host{}, fmt.Errorf("host %q: want name:skew[:delay][:sync]", s)
	}
	h := host{name: parts[0]}
	var err error
	if h.skew, err = time.ParseDuration(strings.TrimPrefix(parts[1], "+")); err != nil {
		return host{}, fmt.Errorf("host %q skew: %w", s, err)
	}
	for _, p := range parts[2:] {
		if p == "sync" {
			h.sync = true
			continue
		}
		if h.delay, err = time.ParseDuration(p); err != nil {
			return host{}, fmt.Errorf("host %q delay: %w", s, err)
		}
	}
	return h, nil
}

type hostList []host

func (l *hostList) String() string { return fmt.Sprint(*l) }
func (l *hostList) Set(s string) error {
	h, err := parseHost(s)
	if err != nil {
		return err
	}
	*l = append(*l, h)
	return nil
}

func main() {
	var (
		producers, consumers hostList
		brokers              = flag.String("brokers", os.Getenv("TIDEMARK_KAFKA_BROKERS"), "bootstrap brokers")
		topic                = flag.String("topic", "demo-orders", "instrumented topic (created with LogAppendTime)")
		partitions           = flag.Int("partitions", 6, "partitions of the topic when created")
		receipts             = flag.String("receipts-topic", instrument.DefaultReceiptsTopic, "receipts topic")
		group                = flag.String("group", "demo-app", "consumer group of the consumer hosts")
		rate                 = flag.Float64("rate", 100, "records per second per producer host")
		duration             = flag.Duration("duration", 110*time.Second, "how long to produce")
		resetAt              = flag.Duration("reset-at", 55*time.Second, "when to reset the group to earliest (0: never)")
		syncURL              = flag.String("timesync", "", "collector time-sync URL for hosts marked sync")
		injected             = flag.String("injected", "", "write the injected clock offsets (host<TAB>ms lines) to this file")
		extraTopics          = flag.String("extra-topics", "", "comma-separated topics the consumers also read (e.g. the kcat producer's)")
		otlp                 = flag.String("otlp", "", "OTLP/HTTP endpoint (host:port) the hosts export their spans to; empty: no spans")
	)
	flag.Var(&producers, "producer", "producer host name:skew (repeatable)")
	flag.Var(&consumers, "consumer", "consumer host name:skew:delay[:sync] (repeatable)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if *brokers == "" || len(producers) == 0 || len(consumers) == 0 {
		fmt.Fprintln(os.Stderr, "loadgen: --brokers, at least one --producer and one --consumer are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &gen{brokers: strings.Split(*brokers, ","), topic: *topic, receipts: *receipts, group: *group, rate: *rate,
		syncURL: *syncURL, otlp: *otlp, log: log}
	if *extraTopics != "" {
		g.extra = strings.Split(*extraTopics, ",")
	}
	if *injected != "" {
		if err := writeInjected(*injected, producers, consumers); err != nil {
			log.Error("write injected offsets", "err", err)
			os.Exit(1)
		}
	}
	err := g.run(ctx, producers, consumers, int32(*partitions), *duration, *resetAt)
	g.shutdownTracing()
	if err != nil {
		log.Error("loadgen", "err", err)
		os.Exit(1)
	}
}

// tracerProvider returns the TracerProvider of one simulated host (an application exporting its own spans), or nil
// without --otlp.
func (g *gen) tracerProvider(service string) trace.TracerProvider {
	if g.otlp == "" {
		return nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(g.otlp), otlptracehttp.WithInsecure())
	if err != nil {
		g.log.Error("otlp exporter", "err", err)
		return nil
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	g.mu.Lock()
	g.providers = append(g.providers, tp)
	g.mu.Unlock()
	return tp
}

// shutdownTracing flushes every host's spans (bounded).
func (g *gen) shutdownTracing() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range g.providers {
		if err := tp.Shutdown(ctx); err != nil {
			g.log.Warn("flush spans", "err", err)
		}
	}
}

func writeInjected(path string, hs ...hostList) error {
	var b strings.Builder
	for _, l := range hs {
		for _, h := range l {
			fmt.Fprintf(&b, "%s\t%g\n", h.name, float64(h.skew)/float64(time.Millisecond))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

type gen struct {
	brokers                []string
	topic, receipts, group string
	extra                  []string
	rate                   float64
	syncURL                string
	otlp                   string
	log                    *slog.Logger
	mu                     sync.Mutex // guards providers
	providers              []*sdktrace.TracerProvider
	produced, processed    atomic.Int64
	emitters               []*instrument.Emitter
	rcs                    []*instrument.Consumer
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = "tidemark-loadgen"
	return c
}

func (g *gen) run(ctx context.Context, producers, consumers hostList, partitions int32, duration, resetAt time.Duration) error {
	if _, err := topicadmin.Ensure(g.brokers, saramaConfig(), topicadmin.Spec{Name: g.topic, Partitions: partitions,
		Configs: map[string]string{"message.timestamp.type": "LogAppendTime"}}); err != nil {
		return err
	}
	if _, err := topicadmin.Ensure(g.brokers, saramaConfig(), topicadmin.Spec{Name: g.receipts, Partitions: 6}); err != nil {
		return err
	}
	for _, t := range g.extra { // written by outside producers (kcat): CreateTime, so the record carries their clock
		if _, err := topicadmin.Ensure(g.brokers, saramaConfig(), topicadmin.Spec{Name: t, Partitions: 3}); err != nil {
			return err
		}
	}
	pctx, stopProducers := context.WithTimeout(ctx, duration)
	defer stopProducers()
	var pwg sync.WaitGroup
	for _, h := range producers {
		em, err := g.newEmitter(h.name)
		if err != nil {
			return err
		}
		g.emitters = append(g.emitters, em)
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			if err := g.produce(pctx, h, em); err != nil {
				g.log.Error("producer", "host", h.name, "err", err)
			}
		}()
	}
	for _, h := range consumers {
		if err := g.newConsumerHost(ctx, h); err != nil {
			return err
		}
	}
	// Consumers run in rounds: the reset stops them, rewinds the group, and starts them again.
	cctx, stopConsumers := context.WithCancel(ctx)
	cwg := g.startConsumers(cctx, consumers)
	start := time.Now()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	var resetTimer <-chan time.Time
	if resetAt > 0 {
		resetTimer = time.After(resetAt)
	}
	done := pctx.Done()
	for done != nil {
		select {
		case <-done:
			done = nil
		case <-tick.C:
			g.progress(start)
		case <-resetTimer:
			g.log.Info("resetting the group to earliest (a replay)", "group", g.group)
			stopConsumers()
			cwg.Wait()
			if err := g.resetToEarliest(); err != nil {
				g.log.Error("reset", "err", err)
			}
			cctx, stopConsumers = context.WithCancel(ctx)
			cwg = g.startConsumers(cctx, consumers)
		}
	}
	pwg.Wait()
	// Let the consumers drain what was produced (bounded), then stop.
	drainUntil := time.Now().Add(20 * time.Second)
	for time.Now().Before(drainUntil) && ctx.Err() == nil {
		if lag, err := g.groupLag(); err == nil && lag == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	stopConsumers()
	cwg.Wait()
	for _, e := range g.emitters {
		e.Close()
	}
	g.progress(start)
	return nil
}

func (g *gen) progress(start time.Time) {
	var sent, dropped, acks, acksDropped uint64
	for _, e := range g.emitters {
		st := e.Stats()
		sent += st.Sent
		dropped += st.Dropped + st.Failed
		acks += st.Acks.Sent
		acksDropped += st.Acks.Dropped + st.Acks.Failed
	}
	fmt.Printf("loadgen %5.0fs  produced %7d  processed %7d  receipts sent %7d  dropped %d  acks sent %7d  dropped %d\n",
		time.Since(start).Seconds(), g.produced.Load(), g.processed.Load(), sent, dropped, acks, acksDropped)
}

func (g *gen) offsetSource(ctx context.Context, h host, clock instrument.Clock) instrument.OffsetSource {
	if !h.sync || g.syncURL == "" {
		return nil
	}
	ts := instrument.NewTimeSync(g.syncURL, clock, nil, 8)
	go ts.Run(ctx, 10*time.Second)
	return ts
}

// produce runs producer host h until ctx ends; its acknowledgements go out through em (the host's own emitter), so
// the collector brackets its clock with send <= append <= ack.
func (g *gen) produce(ctx context.Context, h host, em *instrument.Emitter) error {
	clock := instrument.OffsetClock(time.Now, h.skew)
	c := saramaConfig()
	c.Producer.Interceptors = []sarama.ProducerInterceptor{instrument.NewProducerInterceptor(instrument.ProducerConfig{
		Host: h.name, Clock: clock, Offsets: g.offsetSource(ctx, h, clock), TracerProvider: g.tracerProvider("producer-" + h.name)})}
	c.Producer.Return.Errors = true
	c.Producer.Return.Successes = true // the acknowledgements the AckReporter brackets the host's clock with
	c.Producer.Flush.Frequency = 5 * time.Millisecond
	ap, err := sarama.NewAsyncProducer(g.brokers, c)
	if err != nil {
		return fmt.Errorf("producer %s: %w", h.name, err)
	}
	p := instrument.WrapAsyncProducer(ap, instrument.NewAckReporter(instrument.AckConfig{Host: h.name, Clock: clock}, em), false)
	go func() {
		for err := range p.Errors() {
			g.log.Warn("produce", "host", h.name, "err", err)
		}
	}()
	defer p.Close()
	interval := time.Duration(float64(time.Second) / g.rate)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Input() <- &sarama.ProducerMessage{Topic: g.topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("order-%d", rand.IntN(1000))),
				Value: sarama.StringEncoder(`{"order":"demo"}`)}
			g.produced.Add(1)
		}
	}
}

// newEmitter makes host's emitter of receipts and acknowledgements, on an idempotent producer of its own.
func (g *gen) newEmitter(host string) (*instrument.Emitter, error) {
	c := saramaConfig()
	c.Producer.Idempotent = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Net.MaxOpenRequests = 1
	c.Producer.Return.Successes = true
	ap, err := sarama.NewAsyncProducer(g.brokers, c)
	if err != nil {
		return nil, fmt.Errorf("receipt producer %s: %w", host, err)
	}
	return instrument.NewEmitter(ap, instrument.EmitterConfig{Topic: g.receipts}), nil
}

// newConsumerHost makes the host's receipt emitter and consumer helper (kept across the reset rounds).
func (g *gen) newConsumerHost(ctx context.Context, h host) error {
	clock := instrument.OffsetClock(time.Now, h.skew)
	em, err := g.newEmitter(h.name)
	if err != nil {
		return err
	}
	rc, err := instrument.NewConsumer(instrument.ConsumerConfig{Group: g.group, Host: h.name, Clock: clock,
		Offsets: g.offsetSource(ctx, h, clock), TracerProvider: g.tracerProvider("consumer-" + h.name)}, em)
	if err != nil {
		return err
	}
	g.emitters = append(g.emitters, em)
	g.rcs = append(g.rcs, rc)
	return nil
}

func (g *gen) startConsumers(ctx context.Context, consumers hostList) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, h := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.consume(ctx, h, g.rcs[i]); err != nil {
				g.log.Error("consumer", "host", h.name, "err", err)
			}
		}()
	}
	return &wg
}

func (g *gen) consume(ctx context.Context, h host, rc *instrument.Consumer) error {
	c := saramaConfig()
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.AutoCommit.Interval = 500 * time.Millisecond
	cg, err := sarama.NewConsumerGroup(g.brokers, g.group, c)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", h.name, err)
	}
	defer cg.Close()
	topics := append([]string{g.topic}, g.extra...)
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, topics, &handler{g: g, h: h, rc: rc}); err != nil && !errors.Is(err, sarama.ErrClosedConsumerGroup) {
			g.log.Warn("consume", "host", h.name, "err", err)
			time.Sleep(time.Second)
		}
	}
	return nil
}

type handler struct {
	g  *gen
	h  host
	rc *instrument.Consumer
}

func (*handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (hd *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	defer hd.rc.Forget(claim.Topic(), claim.Partition())
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			hd.rc.Receive(m)
			time.Sleep(hd.h.delay) // the "processing"
			hd.rc.Done(m)
			sess.MarkMessage(m, "")
			hd.g.processed.Add(1)
		}
	}
}

// resetToEarliest commits the log start offset of every partition for the (now empty) group: the operator's
// "reset offsets to earliest", a committed-offset decrease the lag exporter and the latency engine see as a rewind.
func (g *gen) resetToEarliest() error {
	client, err := sarama.NewClient(g.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	om, err := sarama.NewOffsetManagerFromClient(g.group, client)
	if err != nil {
		return err
	}
	defer om.Close()
	var poms []sarama.PartitionOffsetManager
	for _, t := range append([]string{g.topic}, g.extra...) {
		parts, err := client.Partitions(t)
		if err != nil {
			return err
		}
		for _, p := range parts {
			start, err := client.GetOffset(t, p, sarama.OffsetOldest)
			if err != nil {
				return err
			}
			pom, err := om.ManagePartition(t, p)
			if err != nil {
				return err
			}
			pom.ResetOffset(start, "reset-to-earliest")
			poms = append(poms, pom)
		}
	}
	om.Commit()
	for _, pom := range poms {
		pom.AsyncClose()
	}
	return nil
}

// groupLag is the group's total lag on the main topic (for the final drain).
func (g *gen) groupLag() (int64, error) {
	client, err := sarama.NewClient(g.brokers, saramaConfig())
	if err != nil {
		return 0, err
	}
	defer client.Close()
	adm, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return 0, err
	}
	parts, err := client.Partitions(g.topic)
	if err != nil {
		return 0, err
	}
	resp, err := adm.ListConsumerGroupOffsets(g.group, map[string][]int32{g.topic: parts})
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, p := range parts {
		end, err := client.GetOffset(g.topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		if b := resp.GetBlock(g.topic, p); b != nil && b.Offset >= 0 {
			lag += max(0, end-b.Offset)
		} else {
			lag += end
		}
	}
	return lag, nil
}
