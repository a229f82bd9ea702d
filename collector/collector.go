package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// FlushingSink is a Sink that can wait for everything it accepted to be acknowledged, and tell when it is stuck
// (internal/store's Writer).
type FlushingSink interface {
	Sink
	Flush(ctx context.Context) error
	// Stalled returns an error, saying why, while rows wait and the sink has acknowledged nothing for its stall
	// timeout (the server down or frozen under a retry-forever policy, which never gives rows up); nil otherwise.
	Stalled() error
}

// Options are the collector's dependencies.
type Options struct {
	Kafka   kafka.ClientConfig
	Engine  *latency.Engine
	Sink    FlushingSink
	Metrics *Metrics
	Clock   func() time.Time // reference clock; nil is time.Now
	Logger  *slog.Logger
	// TracerProvider receives the hop spans (traces.go); nil turns them off.
	TracerProvider trace.TracerProvider
	// Cluster names the Kafka cluster (Kafka's brokers) in every row written to Sink: the cluster column. "" leaves
	// the rows' own value.
	Cluster string
	// SeedReceipts, if set, is called when the receipts path is assigned a partition, before any of its records is
	// read, with the receipts group's committed offset of it (0 without a commit): it tells the sink's dedup window
	// which rows ClickHouse already holds from that partition at or past the offset (store.Store.SeedReceiptKeys), so
	// the rows an earlier owner inserted after its last commit are not inserted (and rolled up) again. It returns
	// how many keys it added. An error is logged and the partition is read unseeded.
	SeedReceipts func(ctx context.Context, cluster string, partition int32, from int64) (int, error)
}

// Collector runs the enabled paths.
type Collector struct {
	cfg    Config
	opts   Options
	deps   *pathDeps
	bounds *commitBounds // nil when the tap is disabled
	// setup is the outcome of the latest start attempt; started is set once Run connected and the paths run.
	setup   health
	started atomic.Bool
}

// New validates cfg (after defaults) and returns a collector; Run starts it.
func New(cfg Config, opts Options) (*Collector, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Kafka.Validate(); err != nil {
		return nil, err
	}
	if opts.Engine == nil || opts.Sink == nil {
		return nil, fmt.Errorf("collector: engine and sink are required")
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	if opts.Cluster != "" {
		opts.Sink = clusterSink{opts.Sink, opts.Cluster}
	}
	d := &pathDeps{engine: opts.Engine, hosts: newHosts(opts.Engine), sink: opts.Sink, metrics: opts.Metrics,
		clock: opts.Clock, log: opts.Logger, tracer: newHopTracer(opts.TracerProvider, cfg.Traces, cfg.ReferenceHost,
			opts.Engine.Config(), opts.Metrics), live: liveHistograms{max: cfg.MaxLiveSeries}}
	c := &Collector{cfg: cfg, opts: opts, deps: d}
	if cfg.Receipts.Enabled || cfg.Tap.Enabled {
		d.checkpoints = newReplayCheckpoints(cfg.ReplayStateTopic, opts.Logger)
	}
	if cfg.Tap.Enabled {
		own := map[string]bool{cfg.Receipts.Group: true, cfg.Probe.GroupID(): true, cfg.Tap.Group: true}
		c.bounds = newCommitBounds(d, &tapRing{}, func(g string) bool {
			// Every replica's probe group (probe.group-<instance id>) is Tidemark's own, not only this one's.
			return own[g] || strings.HasPrefix(g, cfg.Probe.Group+"-") || d.isInstrumented(g)
		})
	}
	return c, nil
}

// ObserveSnapshot feeds a lag-exporter snapshot, after its commits were given to the engine (Engine.ObserveCommit):
// the commits go into the replay checkpoints of the paths that have one, so a rewind is durable before any replayed
// receipt is handled (replayCheckpoints.committed); and for groups that send no receipts, records the tap saw
// between two successive commits of the group get a commit-bounded row (see commitBounds; not when the tap is
// disabled). Safe to call concurrently with Run.
func (c *Collector) ObserveSnapshot(ctx context.Context, s *lagexporter.Snapshot) error {
	if s == nil {
		return nil
	}
	if ck := c.deps.checkpoints; ck != nil {
		var obs []commitObservation
		for gi := range s.Groups {
			g := &s.Groups[gi]
			for pi := range g.Partitions {
				if p := &g.Partitions[pi]; p.HasCommit {
					obs = append(obs, commitObservation{pathKey{g.Group, p.Topic, p.Partition}, p.Committed, s.Time})
				}
			}
		}
		ck.committed(obs)
	}
	if c.bounds == nil {
		return nil
	}
	return c.bounds.observe(ctx, s)
}

// Run ensures the collector's topics, then runs every enabled path until ctx ends. While Kafka cannot be reached at
// start it retries with exponential backoff (0.5 s doubling to 30 s, jittered), logging each failed attempt; Ready
// reports the last failure meanwhile. On the way out each path stops reading, waits (up to DrainTimeout) for its
// rows to be acknowledged and commits their offsets. It returns the first path error, nil after a clean stop
// (including one during the start retries).
func (c *Collector) Run(ctx context.Context) error {
	conn, err := c.connectRetrying(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}
	defer conn.close()
	c.setup.ok()
	c.started.Store(true)
	c.deps.dlq = &KafkaDeadLetters{Producer: conn.prod, Topic: c.cfg.DeadLetterTopic}
	c.deps.meta = conn.meta
	c.deps.appends = conn.appends

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return conn.appends.Run(gctx) })
	if ck := c.deps.checkpoints; ck != nil {
		ck.setSender(func(_ context.Context, ms []kafka.Message) error { return conn.prod.SendAll(ms) })
		n := ck.restore(conn.state, c.opts.Engine, c.cfg.Receipts.Topic, conn.receiptEnds)
		c.opts.Logger.Info("replay trackers restored", "topic", c.cfg.ReplayStateTopic, "paths", n)
		g.Go(func() error { return ck.run(gctx) })
	}
	r := &pathRunner{c: c, g: g, ctx: gctx, conn: conn}
	if c.cfg.Receipts.Enabled {
		r.receipts()
	}
	if c.cfg.Probe.Enabled {
		r.probe()
	}
	if c.cfg.Spans.Enabled {
		r.spans()
	}
	r.otlp()
	if c.cfg.Tap.Enabled {
		t := newTap(c.deps, c.cfg.Tap.Group, c.cfg.Tap.SampleRate, c.cfg.ReferenceHost, c.bounds.ring)
		r.group(c.cfg.Tap.Group, c.cfg.Tap.Topics, c.cfg.Tap.FromBeginning, batching{}, t.HandleBatch, nil, nil)
	}
	g.Go(func() error { return c.writeClockOffsets(gctx) })
	g.Go(func() error { c.housekeep(gctx, conn.meta); return nil })
	return g.Wait()
}

// connectRetrying calls connect until it succeeds or ctx ends, with exponential backoff (0.5 s doubling to 30 s,
// jittered, no limit on the total), recording every failure for Ready and logging it. The error is ctx's once it
// ended.
func (c *Collector) connectRetrying(ctx context.Context) (*kafkaConn, error) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval, eb.MaxInterval, eb.Multiplier = 500*time.Millisecond, 30*time.Second, 2
	return backoff.Retry(ctx, func() (*kafkaConn, error) {
		k, err := c.connect(ctx)
		if err != nil {
			c.setup.failed(err, c.opts.Clock())
		}
		return k, err
	}, backoff.WithBackOff(eb), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		c.opts.Logger.Warn("collector cannot reach Kafka; retrying", "in", next.Round(time.Millisecond), "err", err)
	}))
}

// pathRunner starts the paths' consumer groups and background loops in one errgroup, on one connection.
type pathRunner struct {
	c    *Collector
	g    *errgroup.Group
	ctx  context.Context // the errgroup's: ends when any of them fails
	conn *kafkaConn
}

// batching is how a path's consumer cuts batches beyond max_batch and max_wait: records buffered per partition
// (0: sarama's default) and, with weight set, the weight at which a batch is handed over (kafka.GroupConfig).
type batching struct {
	buffer    int
	weight    func(*kafka.Record) int
	maxWeight int
}

// group runs consumer group name over topics with handler h (kafka.RunGroup): from the oldest offset when the
// group has no commit and oldest is set, batches cut by max_batch, max_wait and b, onAssigned and prepare called on
// every assignment (nil: none), and every session's commit preceded by the collector's drain.
func (r *pathRunner) group(name string, topics []string, oldest bool, b batching, h kafka.BatchHandler,
	onAssigned func(map[string][]int32), prepare func(context.Context, map[string][]int32) error) {
	c, conn := r.c, r.conn
	r.g.Go(func() error {
		return kafka.RunGroup(r.ctx, kafka.GroupConfig{
			Brokers: conn.client.Brokers(), Sarama: conn.client.Sarama(), Group: name, Topics: topics, Oldest: oldest,
			MaxBatch: c.cfg.MaxBatch, MaxWait: c.cfg.MaxWait, Logger: c.opts.Logger,
			ChannelBuffer: b.buffer, Weight: b.weight, MaxWeight: b.maxWeight,
			OnAssigned: onAssigned, Prepare: prepare, BeforeCommit: c.drain, Now: c.opts.Clock,
		}, h)
	})
}

// ReceiptsBatchRows bounds the receipts in one batch of the receipts path, beside max_batch's bound on its records:
// one streamed INSERT block's worth. A batch's rows live until ClickHouse acknowledges them, and max_batch full
// receipt records (256 receipts each) make a batch of 256,000 rows; such batches kept the heap at memory_limit_mb,
// where the garbage collector took a third of the CPU (docs/performance.md, "figures:collector-batches").
const ReceiptsBatchRows = 8192

// ReceiptsChannelBuffer is how many receipt records sarama buffers per partition ahead of the receipts handler: two
// batches of records of the emitter's default 256 receipts (instead of sarama's 256 records, 65,536 receipts).
const ReceiptsChannelBuffer = 2 * ReceiptsBatchRows / 256

// ReceiptsWeight is the receipts path's record weight: the receipts the record declares, 1 for a value that is not
// a receipt batch (the path dead-letters it).
func ReceiptsWeight(r *kafka.Record) int {
	if n, ok := instrument.ReceiptBatchLen(r.Value); ok {
		return n
	}
	return 1
}

// receipts runs the receipts path's group; every assignment moves the replay state with its partitions first.
func (r *pathRunner) receipts() {
	c := r.c
	b := batching{buffer: ReceiptsChannelBuffer, weight: ReceiptsWeight, maxWeight: ReceiptsBatchRows}
	r.group(c.cfg.Receipts.Group, []string{c.cfg.Receipts.Topic}, true, b, newReceipts(r.ctx, c.deps).HandleBatch, nil,
		func(ctx context.Context, claims map[string][]int32) error {
			return c.receiptsAssigned(ctx, r.conn.client, claims)
		})
}

// probe runs the probe path: its group, its sender and, when the topic admin is open, the probe topic planner.
func (r *pathRunner) probe() {
	c, conn := r.c, r.conn
	p := newProbe(c.deps, c.cfg.Probe.Topic, c.cfg.Probe.InstanceID, c.cfg.Probe.Interval, c.cfg.Probe.LossTimeout, conn.prod)
	// From the oldest offset when the group has no commits: a group starting "at the end" resolves the end
	// after its assignment, so the first probe, sent on assignment, could land before that end and never be
	// read (a false loss, seen in TestTwoReplicasOwnTheirProbes). The skipped backlog is at most the probe
	// topic's hour of retention, of records that are not in flight here.
	r.group(c.cfg.Probe.GroupID(), []string{c.cfg.Probe.Topic}, true, batching{}, p.HandleBatch, p.Assigned, nil)
	r.g.Go(func() error { return p.RunSender(r.ctx) })
	if conn.admin != nil {
		pl := &probePlanner{admin: conn.admin, topic: c.cfg.Probe.Topic, rf: c.cfg.Probe.Replication,
			interval: c.cfg.Probe.ReconcileInterval, settle: min(30*time.Second, c.cfg.Probe.ReconcileInterval/2),
			metrics: c.opts.Metrics, log: c.opts.Logger, added: p.rejoin, assigned: p.ensureAssigned}
		r.g.Go(func() error { return pl.run(r.ctx) })
	}
}

// spans runs the spans path's group and its join sweeper.
func (r *pathRunner) spans() {
	c := r.c
	s := newSpans(c.deps, c.cfg.Spans, &clusterAppends{r: r.conn.records})
	r.group(c.cfg.Spans.Group, []string{c.cfg.Spans.Topic}, true, batching{}, s.HandleBatch, nil, nil)
	r.g.Go(func() error { return s.Run(r.ctx) })
}

// otlp serves OTLP over HTTP and gRPC on the configured addresses (none: not served), into the spans topic.
func (r *pathRunner) otlp() {
	c := r.c
	rcv := &otlpReceiver{topic: c.cfg.Spans.Topic, send: r.conn.prod.SendAll, log: c.opts.Logger}
	if addr := c.cfg.Spans.OTLPHTTPListen; addr != "" {
		r.g.Go(func() error { return serveOTLP(r.ctx, addr, rcv, c.opts.Logger) })
	}
	if addr := c.cfg.Spans.OTLPGRPCListen; addr != "" {
		r.g.Go(func() error { return serveOTLPGRPC(r.ctx, addr, rcv, c.opts.Logger) })
	}
}

// housekeep enforces the collector's bounds until ctx ends: every tenth of collector.idle_ttl (1 s to 30 s) it
// deletes the live series, engine paths and host clocks idle for idle_ttl and forgets groups that stopped sending
// receipts; every second it publishes the sizes it bounds (engine paths and hosts, unknown topics) as gauges.
func (c *Collector) housekeep(ctx context.Context, meta *kafka.Metadata) {
	ttl := c.cfg.IdleTTL
	period := min(max(ttl/10, time.Second), 30*time.Second)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	m, d := c.opts.Metrics, c.deps
	var evicted, hostsEvicted uint64
	var swept time.Time
	for {
		if now := c.opts.Clock(); now.Sub(swept) >= period {
			swept = now
			m.LiveEvicted.Add(float64(d.live.sweep(m, now, ttl)))
			c.opts.Engine.EvictIdle(now, ttl)
			d.checkpoints.trim(c.opts.Engine.Has)
			cut := now.Add(-ttl).Unix()
			d.instrumented.Range(func(g, seen any) bool {
				if seen.(*atomic.Int64).Load() < cut {
					d.instrumented.Delete(g)
				}
				return true
			})
		}
		paths, total := c.opts.Engine.PathStats()
		m.EnginePaths.Set(float64(paths))
		m.EnginePathsEvicted.Add(float64(total - evicted))
		evicted = total
		hosts, hostsTotal := c.opts.Engine.HostStats()
		m.EngineHosts.Set(float64(hosts))
		m.EngineHostsEvicted.Add(float64(hostsTotal - hostsEvicted))
		hostsEvicted = hostsTotal
		m.UnknownTopics.Set(float64(meta.Stats().Unknown))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// kafkaConn is what Run needs from Kafka before the paths start.
type kafkaConn struct {
	client *kafkaconfig.Client // every consumer and producer's sarama config comes from it
	prod   *kafka.Producer
	meta   *kafka.Metadata
	admin  *topicadmin.Admin // nil unless the probe topic planner runs
	// records reads records' append times by offset (nil unless the spans path runs).
	records *lagread.ClusterReader
	// appends places offsets in leader epochs: whose clock stamped a LogAppendTime.
	appends *kafka.AppendLeaders
	// state is the replay-state topic as read at start, receiptEnds the receipts topic's high watermarks then.
	state       []kafka.Record
	receiptEnds map[int32]int64
}

// close closes what the connection opened (nil fields were not opened), the append-leader tracker first and the
// producer last.
func (k *kafkaConn) close() {
	if k.appends != nil {
		k.appends.Close()
	}
	if k.records != nil {
		k.records.Close()
	}
	if k.admin != nil {
		k.admin.Close()
	}
	if k.meta != nil {
		k.meta.Close()
	}
	k.prod.Close()
}

// connect resolves the kafka: block (re-reading its password, secret and certificate files, so a corrected file
// needs no restart), checks that a bootstrap broker accepts the connection (a refused login or certificate is one
// error naming the broker and mechanism), ensures the collector's topics and opens the producer and the metadata
// cache: one start attempt.
func (c *Collector) connect(ctx context.Context) (*kafkaConn, error) {
	kc, err := c.opts.Kafka.Resolve()
	if err != nil {
		return nil, err // a file that is missing now may be mounted by the next attempt
	}
	if err := kc.Check(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureTopics(kc); err != nil {
		return nil, err
	}
	var state []kafka.Record
	var receiptEnds map[int32]int64
	if c.deps.checkpoints != nil {
		if state, receiptEnds, err = c.readReplayState(ctx, kc); err != nil {
			return nil, err
		}
	}
	if c.cfg.Probe.Enabled {
		if _, err := topicadmin.Ensure(kc.Brokers(), kc.Sarama(), topicadmin.Spec{Name: c.cfg.Probe.Topic, Partitions: c.cfg.Probe.Partitions,
			SpreadLeaders: true, Configs: map[string]string{"message.timestamp.type": "LogAppendTime", "retention.ms": "3600000"}}); err != nil {
			return nil, fmt.Errorf("ensure probe topic: %w", err)
		}
	}
	conn, err := c.open(kc)
	if err != nil {
		return nil, err
	}
	conn.state, conn.receiptEnds = state, receiptEnds
	return conn, nil
}

// ensureTopics creates the dead-letter topic and, for the paths that use them, the receipts and spans topics,
// where they do not exist.
func (c *Collector) ensureTopics(kc *kafkaconfig.Client) error {
	brokers, sc := kc.Brokers(), kc.Sarama()
	if _, err := topicadmin.Ensure(brokers, sc, topicadmin.Spec{Name: c.cfg.DeadLetterTopic, Partitions: 1}); err != nil {
		return fmt.Errorf("ensure dead-letter topic: %w", err)
	}
	if c.cfg.Receipts.Enabled {
		if _, err := topicadmin.Ensure(brokers, sc, topicadmin.Spec{Name: c.cfg.Receipts.Topic, Partitions: c.cfg.Receipts.Partitions}); err != nil {
			return fmt.Errorf("ensure receipts topic: %w", err)
		}
	}
	if c.cfg.Spans.Enabled || c.cfg.Spans.OTLPHTTPListen != "" || c.cfg.Spans.OTLPGRPCListen != "" {
		if _, err := topicadmin.Ensure(brokers, sc, topicadmin.Spec{Name: c.cfg.Spans.Topic, Partitions: c.cfg.Spans.Partitions}); err != nil {
			return fmt.Errorf("ensure spans topic: %w", err)
		}
	}
	return nil
}

// readReplayState ensures the compacted replay-state topic, names the checkpoints' owner (the receipts group and
// the cluster's id: checkpoints are this deployment's), and reads what the trackers are restored from before any
// record is read: the state topic to its end, and the receipts topic's high watermarks (a checkpoint beyond one is
// of an earlier incarnation of the topic; nil when the receipts path is off).
func (c *Collector) readReplayState(ctx context.Context, kc *kafkaconfig.Client) ([]kafka.Record, map[int32]int64, error) {
	brokers := kc.Brokers()
	if _, err := topicadmin.Ensure(brokers, kc.Sarama(), topicadmin.Spec{Name: c.cfg.ReplayStateTopic, Partitions: 1,
		Configs: map[string]string{"cleanup.policy": "compact"}}); err != nil {
		return nil, nil, fmt.Errorf("ensure replay state topic: %w", err)
	}
	id, err := kafka.ClusterID(brokers, kc.Sarama())
	if err != nil {
		return nil, nil, err
	}
	c.deps.checkpoints.setOwner(c.cfg.Receipts.Group, id)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	state, err := kafka.ReadTopic(rctx, brokers, kc.Sarama(), c.cfg.ReplayStateTopic)
	cancel()
	if err != nil {
		return nil, nil, fmt.Errorf("read replay state: %w", err)
	}
	var ends map[int32]int64
	if c.cfg.Receipts.Enabled {
		if ends, err = kafka.EndOffsets(brokers, kc.Sarama(), c.cfg.Receipts.Topic); err != nil {
			return nil, nil, fmt.Errorf("read receipts topic ends: %w", err)
		}
	}
	return state, ends, nil
}

// open opens the connection's clients: the producer, the metadata cache, the append-leader tracker, and, for the
// paths that use them, the record reader (spans) and the topic admin (the probe topic planner). On an error it
// closes what it opened.
func (c *Collector) open(kc *kafkaconfig.Client) (*kafkaConn, error) {
	brokers := kc.Brokers()
	prod, err := kafka.NewProducer(brokers, kc.Sarama())
	if err != nil {
		return nil, err
	}
	conn := &kafkaConn{client: kc, prod: prod}
	if conn.meta, err = kafka.NewMetadata(brokers, kc.Sarama(), c.cfg.Metadata.kafka()); err != nil { // its own copy: NewMetadata bounds its timeouts
		conn.close()
		return nil, err
	}
	if conn.appends, err = kafka.NewAppendLeaders(brokers, kc.Sarama(), 100*time.Millisecond, 2*time.Second, c.opts.Logger); err != nil {
		conn.close()
		return nil, err
	}
	if c.cfg.Spans.Enabled {
		if conn.records, err = lagread.NewClusterReader(brokers, kc.Sarama()); err != nil {
			conn.close()
			return nil, err
		}
	}
	if c.cfg.Probe.Enabled && c.cfg.Probe.ReconcileInterval > 0 {
		if conn.admin, err = topicadmin.NewAdmin(brokers, kc.Sarama()); err != nil {
			conn.close()
			return nil, err
		}
	}
	return conn, nil
}

// BrokerOffset returns broker's clock offset from the collector's (broker − collector) at at, as the probe path
// brackets it, and its uncertainty (the bracket's half-width, drift included); ok is false unless the probes bracket
// that broker (lagexporter.BrokerClocks: the lag exporter corrects LogAppendTime record stamps with it).
func (c *Collector) BrokerOffset(broker int32, at time.Time) (offset, uncertainty time.Duration, ok bool) {
	o, err := c.opts.Engine.Offset(c.deps.hosts.id(brokerHost(broker)), at)
	if err != nil || o.Kind != latency.KindBracketed || o.Suspect {
		return 0, 0, false
	}
	return o.Offset, o.Uncertainty, true
}

// Ready returns nil while the collector runs and its sink acknowledges rows; else why not: still connecting to
// Kafka at start (with the last error), or the sink failing or stalled (SinkHealth).
func (c *Collector) Ready() error {
	if !c.started.Load() {
		if err := c.setup.check(); err != nil {
			return fmt.Errorf("connecting to Kafka: %w", err)
		}
		return errors.New("connecting to Kafka")
	}
	return c.SinkHealth()
}

// receiptsAssigned moves the per-path replay state with the receipts partitions at the start of every receipts
// session (replayCheckpoints.reassigned): paths of partitions another replica now holds are dropped, paths of
// partitions newly held are restored from the state topic as a restarted process restores them, before any of
// their receipts is read.
func (c *Collector) receiptsAssigned(ctx context.Context, kc *kafkaconfig.Client, claims map[string][]int32) error {
	c.seedReceipts(ctx, kc, claims[c.cfg.Receipts.Topic])
	ck := c.deps.checkpoints
	if ck == nil {
		return nil
	}
	read := func(ctx context.Context) ([]kafka.Record, map[int32]int64, error) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		state, err := kafka.ReadTopic(rctx, kc.Brokers(), kc.Sarama(), c.cfg.ReplayStateTopic)
		if err != nil {
			return nil, nil, err
		}
		ends, err := kafka.EndOffsets(kc.Brokers(), kc.Sarama(), c.cfg.Receipts.Topic)
		return state, ends, err
	}
	gained, lost, err := ck.reassigned(ctx, c.cfg.Receipts.Topic, claims[c.cfg.Receipts.Topic], c.opts.Engine, read)
	if err != nil {
		return err
	}
	if gained > 0 || lost > 0 {
		c.opts.Logger.Info("replay trackers moved with the receipts partitions", "partitions", claims[c.cfg.Receipts.Topic],
			"restored", gained, "dropped", lost)
	}
	return nil
}

// seedReceipts seeds the sink's dedup window with the rows ClickHouse holds from each newly claimed receipts
// partition at or past the group's committed offset (Options.SeedReceipts); failures are logged, not fatal.
func (c *Collector) seedReceipts(ctx context.Context, kc *kafkaconfig.Client, parts []int32) {
	if c.opts.SeedReceipts == nil || len(parts) == 0 {
		return
	}
	committed, err := kafka.CommittedOffsets(kc.Brokers(), kc.Sarama(), c.cfg.Receipts.Group, c.cfg.Receipts.Topic, parts)
	if err != nil {
		c.opts.Logger.Warn("dedup window not seeded: committed offsets unreadable", "err", err)
		return
	}
	total := 0
	for _, p := range parts {
		n, err := c.opts.SeedReceipts(ctx, c.opts.Cluster, p, committed[p])
		if err != nil {
			c.opts.Logger.Warn("dedup window not seeded", "partition", p, "from", committed[p], "err", err)
			continue
		}
		total += n
	}
	c.opts.Logger.Info("dedup window seeded with the rows stored past the receipts group's commits", "partitions", parts, "keys", total)
}

// drain waits for the sink to acknowledge what it accepted and publishes the replay checkpoints of what it
// acknowledged, so the ending session's commit includes it.
func (c *Collector) drain() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
	defer cancel()
	if err := c.opts.Sink.Flush(ctx); err != nil {
		c.opts.Logger.Warn("drain before commit", "err", err)
	}
	if ck := c.deps.checkpoints; ck != nil {
		if err := ck.publish(ctx); err != nil {
			c.opts.Logger.Warn("drain before commit: replay checkpoints", "err", err)
		}
	}
}

// writeClockOffsets writes the engine's offset estimates every ClockOffsetInterval, and refreshes the engine
// metrics (tidemark_clock_offset_*, tidemark_latency_*) from the same reading.
func (c *Collector) writeClockOffsets(ctx context.Context) error {
	t := time.NewTicker(c.cfg.ClockOffsetInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.opts.Metrics.engine.update(c.opts.Engine, c.opts.Clock())
		rows := clockRows(c.opts.Metrics.engine.snap.Load().offsets)
		if len(rows) == 0 {
			continue
		}
		if err := c.opts.Sink.Write(ctx, store.Rows{ClockOffsets: rows}, nil); err != nil {
			return nil // ctx ended
		}
	}
}
