package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/election"
	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/kafkaconfig/awsmsk"
	"github.com/tidemark/tidemark/internal/readiness"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/lagapi"
	"github.com/tidemark/tidemark/lagexporter/promexport"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

func init() { subcommands = append(subcommands, newRunCmd) }

func newRunCmd() *cobra.Command {
	var path string
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the collector, the lag exporter and the HTTP endpoints until interrupted",
		Long: `Run the collector (probe, receipts and tap paths into ClickHouse), the lag exporter and the HTTP server
(/metrics, /healthz, /readyz, ` + instrument.TimeSyncPath + `, and the lag API: /api/v1/lag and Burrow's /v3/kafka,
docs/api.md). Without a clickhouse block it runs as a pure lag
exporter: no database, no collector.

Configuration: the YAML file given with --config, then TIDEMARK_* environment variables (a key's dots written as
double underscores, e.g. TIDEMARK_COLLECTOR__TAP__SAMPLE_RATE; TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR are
accepted as written by the local stack), then flags. docs/collector.md lists every key.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, cmd.Flags(), nil)
			if err != nil {
				return err
			}
			if printConfig {
				out, err := dumpRunConfig(cfg)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			return run(cmd.Context(), cfg, newLogger(cfg.Log, os.Stderr))
		},
	}
	f := cmd.Flags()
	f.StringVar(&path, "config", "", "YAML configuration file")
	f.BoolVar(&printConfig, "print-config", false, "print the effective configuration (file, environment, flags, defaults; secrets redacted) and exit")
	f.StringSlice("kafka.brokers", nil, "Kafka bootstrap addresses (host:port,...)")
	registerKafkaFlags(f)
	f.StringSlice("clickhouse.addr", nil, "ClickHouse native-protocol addresses (host:port,...)")
	f.String("clickhouse.database", "", "ClickHouse database")
	f.String("http.listen", "", "address of /metrics, /healthz, /readyz and the time-sync endpoint")
	f.String("log.level", "", "debug, info, warn or error")
	f.StringSlice("collector.tap.topics", nil, "topics the tap path reads")
	return cmd
}

func newLogger(c logConfig, w *os.File) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// metricsHandler serves reg's metrics. OpenMetrics is negotiated when the scraper asks for it (Prometheus does),
// because only that format carries exemplars: the trace ids on tidemark_e2e_latency_seconds.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})
}

// gcPercent is the garbage collector's target that `tidemark run` sets unless the GOGC environment variable is set:
// the heap may grow to 1.75 times what survives a collection instead of Go's default 2 times. The daemon's memory
// is mostly long-lived state (lag windows, snapshots, renderings), so the default headroom is mostly idle RSS, while
// the lag exporter's CPU per cycle is small (docs/performance.md); a little more collection for less memory is the
// trade, and the setting Prometheus' server makes (it sets GOGC 75 when the variable is unset). memory_limit_mb caps the heap further.
const gcPercent = 75

// run wires and runs everything until ctx ends. The HTTP server comes first (startHTTP), so that /healthz (alive)
// and /metrics answer while dependencies are still unreachable; /readyz is 503 with the reason until everything
// runs. Then, with a clickhouse block, the store, writer, span exporter and collectors start in their own goroutine
// (startHistory) while every cluster runs (clusterRun.run), each in its own goroutines: its lag exporter connects to
// its Kafka at once, its collector once the store is up (a lag exporter never waits for its history store); each
// dependency is retried with exponential backoff until it answers or ctx ends (a signal during the retries is a
// clean stop), so one cluster or ClickHouse being down delays nothing of the others. Stop order is the reverse:
// consumers stop (each path drains its rows into the writer and commits), the lag exporters stop, the writer flushes
// and closes, ClickHouse closes, and the HTTP server shuts down within http.shutdown_timeout.
func run(ctx context.Context, cfg *runConfig, log *slog.Logger) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil // stopped by a signal while starting: a clean stop, not a failure
		}
	}()
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if cfg.MemoryLimitMB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMB) << 20 * 9 / 10)
	}
	for _, w := range cfg.warnings {
		log.Warn(w)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	clusters := newClusterRuns(cfg, log)
	ready := &readiness.Process{Summary: startSummary(cfg)}
	for _, cr := range clusters {
		ready.Entries = append(ready.Entries, readiness.Entry{Name: cr.cfg.Name, State: &cr.ready})
	}
	ready.State.Set("starting")
	var metrics http.Handler = metricsHandler(reg)
	var lagMetrics *promexport.Handler // every cluster's lag series, pre-rendered, and reg's metrics
	if cfg.lagEnabled() {
		lagMetrics = promexport.NewHandler(nil, reg)
		metrics = lagMetrics
	}
	mux := newMux(cfg, metrics, ready)
	if cfg.lagEnabled() {
		host, _ := os.Hostname()
		api := lagapi.NewHandler(host) // /api/v1/lag and Burrow's /v3/kafka, from the snapshots /metrics serves
		for _, cr := range clusters {
			if !*cr.cfg.Lag.Enabled {
				continue // no lag exporter, no snapshots: the API names only the clusters whose lag it serves
			}
			api.Add(lagapi.Cluster{Name: cr.cfg.Name, Brokers: cr.cfg.Kafka.Brokers, PollInterval: cr.cfg.Lag.PollInterval,
				Source: &cr.loop})
		}
		mux.Handle("/api/v1/lag", api)
		mux.Handle("/v3/", api)
	}
	sctx, stopHTTP, err := startHTTP(ctx, cfg, mux, log)
	if err != nil {
		return err
	}
	defer stopHTTP(&err) // last: the HTTP server outlives everything else

	// The store starts in its own goroutine: the lag exporters must not wait for their history store. The collector
	// paths, and the lag feed into lag_snapshots, wait for it (clusterRun.run); /readyz names them as waiting.
	rctx, failRun := context.WithCancelCause(sctx)
	defer failRun(nil)
	var hist *history
	if cfg.clickHouse {
		hist = startHistory(rctx, cfg, clusters, reg, log, failRun)
	}

	runErr := runClusters(rctx, clusters, lagMetrics, hist, func() {
		ready.State.SetCheck(nil) // from now on each cluster says for itself
		log.Info("tidemark running", "runs", ready.Summary)
	}, log) // consumers have stopped and drained
	if cause := context.Cause(rctx); ctx.Err() == nil && cause != nil {
		runErr = errors.Join(runErr, cause) // the HTTP server or the store's start failed
	}
	ready.State.Set("stopping")
	if hist != nil {
		runErr = errors.Join(runErr, hist.close(cfg, log))
	}
	return runErr
}

// runClusters runs every cluster until ctx ends (started is called once they are all started) and returns the
// clusters' errors, joined. Kafka being down is retried inside a cluster and never ends it; a cluster that ends with
// an error anyway (a lease topic of several partitions, a defect) stops alone: it is logged, its /readyz entry says
// why until the process restarts, and the other clusters go on. runClusters returns when every cluster has ended, so
// a process watching one cluster exits with that cluster's error.
func runClusters(ctx context.Context, clusters []*clusterRun, lagMetrics *promexport.Handler, hist *history,
	started func(), log *slog.Logger) error {
	errs := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, cr := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cr.run(ctx, *cr.cfg.Lag.Enabled, lagMetrics, hist)
			if err == nil || ctx.Err() != nil {
				return
			}
			errs[i] = fmt.Errorf("cluster %s: %w", cr.cfg.Name, err)
			cr.ready.Set(fmt.Sprintf("stopped after an error (restart tidemark to start it again): %v", err))
			if len(clusters) > 1 {
				log.Error("cluster stopped after an error; the other clusters go on", "cluster", cr.cfg.Name, "err", err)
			}
		}()
	}
	started()
	wg.Wait()
	return errors.Join(errs...)
}

// newMux routes the HTTP endpoints: /metrics (metrics), /healthz (alive), /readyz (ready; ?cluster=NAME for one
// cluster), the time-sync endpoint and, with http.pprof, Go's profiles.
func newMux(cfg *runConfig, metrics http.Handler, ready *readiness.Process) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.Handle("/readyz", ready)
	mux.Handle(instrument.TimeSyncPath, instrument.TimeSyncHandler(time.Now))
	if cfg.HTTP.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// startHTTP listens on http.listen and serves h. It returns the context the start-up runs under (ctx, also ended
// with the server's error as its cause when the server fails: a dependency that is down at start is waited for, not
// a reason to exit; the HTTP server failing is) and the function that stops the server within
// http.shutdown_timeout, joining its error into *err.
func startHTTP(ctx context.Context, cfg *runConfig, h http.Handler, log *slog.Logger) (context.Context, func(err *error), error) {
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			httpDone <- err
		}
		close(httpDone)
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	sctx, cancelStart := context.WithCancelCause(ctx)
	go func() {
		select {
		case err := <-httpDone:
			if err != nil {
				cancelStart(fmt.Errorf("http server: %w", err))
			}
		case <-sctx.Done():
		}
	}()
	return sctx, func(err *error) {
		cancelStart(nil)
		hctx, hcancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
		defer hcancel()
		if herr := srv.Shutdown(hctx); herr != nil {
			*err = errors.Join(*err, fmt.Errorf("http shutdown: %w", herr))
		}
		log.Info("stopped")
	}, nil
}

// clusterRun is one cluster's part of `tidemark run`: its collector (with a clickhouse block) and its lag exporter,
// run in their own goroutines, with their own /readyz entry and their own series (every one labelled cluster).
type clusterRun struct {
	cfg   *clusterConfig
	log   *slog.Logger
	col   *collector.Collector // nil without a clickhouse block
	ready readiness.State
	loop  loopSource // the lag exporter's loop once connected, for the lag API
}

// loopSource is a cluster's lag exporter loop once it exists. A standby replica (lag.election) polls too, so the lag
// API answers from any replica behind a Service, while /metrics hides a standby's lag series.
type loopSource struct {
	p atomic.Pointer[lagexporter.Loop]
}

// Latest is the loop's latest snapshot, nil before the loop exists or has completed a cycle.
func (s *loopSource) Latest() *lagexporter.Snapshot {
	if l := s.p.Load(); l != nil {
		return l.Latest()
	}
	return nil
}

func newClusterRuns(cfg *runConfig, log *slog.Logger) []*clusterRun {
	var out []*clusterRun
	for _, cl := range cfg.clusterList() {
		awsmsk.Enable(&cl.Kafka) // AWS_MSK_IAM signs with AWS's signer module
		cr := &clusterRun{cfg: cl, log: log.With("cluster", cl.Name)}
		cr.ready.Set("starting")
		out = append(out, cr)
	}
	return out
}

// newCollector builds the cluster's collector and its own latency engine; its metrics carry the cluster label.
func (cr *clusterRun) newCollector(cfg *runConfig, db *store.Store, w *store.Writer, tp trace.TracerProvider, reg prometheus.Registerer) error {
	engine, err := latency.NewEngine(cfg.engineConfig(cr.cfg))
	if err != nil {
		return err
	}
	creg := prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cr.cfg.Name}, reg)
	cr.col, err = collector.New(cr.cfg.Collector, collector.Options{
		Kafka: cr.cfg.Kafka, Engine: engine, Sink: w, Metrics: collector.NewMetrics(creg, cr.cfg.Collector.SLOThresholds...),
		Logger: cr.log, TracerProvider: tp, Cluster: cr.cfg.Name,
		SeedReceipts: func(ctx context.Context, cluster string, partition int32, from int64) (int, error) {
			return db.SeedReceiptKeys(ctx, w, cluster, partition, from, time.Now().Add(-store.SeedLookback))
		},
	})
	return err
}

// run runs the cluster's collector and lag exporter (when lag is on; its series go to lagMetrics) until ctx ends. The
// lag exporter starts at once; the collector, and the lag feed into lag_snapshots, start when hist (nil: no
// clickhouse block) has started the store, and the snapshots taken meanwhile wait for them (at most
// lagFeedBuffer; later ones are not written).
func (cr *clusterRun) run(ctx context.Context, lag bool, lagMetrics *promexport.Handler, hist *history) error {
	g, gctx := errgroup.WithContext(ctx)
	if hist != nil {
		// The collector connects to Kafka in its Run (retrying); until it does, and while its sink fails, it says why.
		g.Go(func() error {
			if col := cr.awaitCollector(gctx, hist); col != nil {
				return col.Run(gctx)
			}
			return nil
		})
	}
	if !lag {
		cr.ready.SetCheck(cr.collectorCheck(hist))
		return g.Wait()
	}
	g.Go(func() error {
		loop, reader, err := cr.startLag(gctx)
		if err != nil {
			return err
		}
		defer reader.Close()
		cr.loop.p.Store(loop)
		if hist != nil {
			// A LogAppendTime is its broker's clock: the collector's probes know each probed broker's offset from
			// ours, once the collector runs.
			loop.SetBrokerClocks(func(broker int32, at time.Time) (time.Duration, time.Duration, bool) {
				if col, _ := hist.collector(cr); col != nil {
					return col.BrokerOffset(broker, at)
				}
				return 0, 0, false
			})
		}
		// lag.election: one active replica per cluster (lease group tidemark-lag-exporter-<cluster> by default); a
		// standby serves the health series only (ActiveSource hides its snapshots) and writes no lag_snapshots rows.
		activity := lagexporter.NewActivity(cr.cfg.Lag.Election.Enabled)
		lagMetrics.Add(promexport.NewCollector(&cr.cfg.Lag, lagexporter.ActiveSource{Loop: loop, Activity: activity}))
		lg, lctx := errgroup.WithContext(gctx)
		rendered, cancelRender := loop.Subscribe(1)
		defer cancelRender()
		if hist != nil {
			snaps, cancelSub := loop.Subscribe(lagFeedBuffer)
			defer cancelSub()
			var backfill time.Duration // a new holder writes the standby snapshots of the failover's gap
			if cr.cfg.Lag.Election.Enabled {
				backfill = cr.cfg.Lag.Election.SessionTimeout + cr.cfg.Lag.PollInterval
			}
			lg.Go(func() error {
				if col := cr.awaitCollector(lctx, hist); col != nil {
					return col.FollowLag(lctx, snaps, activity, backfill)
				}
				return nil
			})
		}
		lg.Go(func() error { return loop.Run(lctx) })
		lg.Go(func() error { lagMetrics.Follow(lctx, rendered); return nil })
		if cr.cfg.Lag.Election.Enabled {
			lg.Go(func() error { return runLease(lctx, cr.cfg, activity, cr.log) })
		}
		cr.ready.SetCheck(cr.check(loop, hist))
		cr.log.Info("cluster running", "brokers", cr.cfg.Kafka.Brokers, "kafka_security", cr.cfg.Kafka.Describe(),
			"collector", hist != nil)
		return lg.Wait()
	})
	return g.Wait()
}

// lagFeedBuffer is how many lag snapshots wait for the collector's lag feed while ClickHouse is not up yet: with the
// default poll interval (30 s), the first 8 minutes.
const lagFeedBuffer = 16

// awaitCollector waits until hist's start has ended and returns the cluster's collector, or nil when ctx ended first
// or the start failed (the run then ends with that error).
func (cr *clusterRun) awaitCollector(ctx context.Context, hist *history) *collector.Collector {
	select {
	case <-ctx.Done():
		return nil
	case <-hist.done:
		col, _ := hist.collector(cr)
		return col
	}
}

// collectorCheck is the readiness of the cluster's collector: nil without one (hist nil), waiting for ClickHouse
// while the store is not up, then the collector's own (connected to Kafka, sink healthy).
func (cr *clusterRun) collectorCheck(hist *history) func() error {
	return func() error {
		if hist == nil {
			return nil
		}
		col, started := hist.collector(cr)
		if !started {
			return fmt.Errorf("collector waits for ClickHouse (%s)", hist.st.NotReady())
		}
		if col == nil {
			return errors.New("collector did not start")
		}
		return col.Ready()
	}
}

// check is the cluster's readiness once its lag exporter runs: its collector's (collectorCheck), then its lag
// exporter's (a poll cycle succeeded recently, so a cluster whose brokers went away says so; readiness.Cluster).
func (cr *clusterRun) check(loop *lagexporter.Loop, hist *history) func() error {
	return readiness.Cluster(cr.collectorCheck(hist), readiness.Lag(loop, &cr.cfg.Lag, time.Now))
}

// startLag connects the cluster's lag exporter to its Kafka, retrying like every dependency, and returns its loop and
// the reader the caller closes.
func (cr *clusterRun) startLag(ctx context.Context) (*lagexporter.Loop, *lagread.ClusterReader, error) {
	cr.ready.Set("connecting to Kafka (lag exporter)")
	reader, err := readiness.Retry(ctx, readiness.DependencyBackoff(), cr.log, &cr.ready, "Kafka (lag exporter)", func() (*lagread.ClusterReader, error) {
		// Resolved at every attempt: a corrected password or secret file is picked up without a restart.
		kc, err := cr.cfg.Kafka.Resolve()
		if err != nil {
			return nil, err
		}
		if err := kc.Check(ctx); err != nil {
			return nil, err
		}
		r, err := lagread.NewClusterReader(kc.Brokers(), kc.Sarama())
		if r != nil {
			r.Logger = cr.log // a broker that cannot answer a group RPC is logged once
		}
		return r, err
	})
	if err != nil {
		return nil, nil, readiness.StartError(ctx, err)
	}
	loop, err := lagexporter.NewLoop(&cr.cfg.Lag, reader, time.Now)
	if err != nil {
		_ = reader.Close()
		return nil, nil, err
	}
	return loop, reader, nil
}

// runLease runs the cluster's lag exporter election (lag.election) on its kafka: block until ctx ends, recording its
// outcome in activity (standby once it returns).
func runLease(ctx context.Context, cl *clusterConfig, activity *lagexporter.Activity, log *slog.Logger) error {
	e := cl.Lag.Election
	defer activity.Set(false)
	return election.Run(ctx, election.Config{Kafka: cl.Kafka, Group: e.Group, Topic: e.Topic,
		SessionTimeout: e.SessionTimeout, OnChange: activity.Set, Logger: log})
}
