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

	"github.com/IBM/sarama"
	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/kafkaconfig/awsmsk"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/tracing"
	"github.com/tidemark/tidemark/lagexporter"
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
(/metrics, /healthz, /readyz, ` + instrument.TimeSyncPath + `). Without a clickhouse block it runs as a pure lag
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
				out, err := dumpConfig(cfg)
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

// run wires and runs everything until ctx ends. The HTTP server comes first, so that /healthz (alive) and /metrics
// answer while dependencies are still unreachable; /readyz is 503 with the reason until everything runs. Then the
// store and writer (ClickHouse), then the collector and the lag exporter (Kafka); each dependency is retried with
// exponential backoff until it answers or ctx ends (a signal during the retries is a clean stop). Stop order is the
// reverse: consumers stop (each path drains its rows into the writer and commits), the lag exporter stops, the
// writer flushes and closes, ClickHouse closes, and the HTTP server shuts down within http.shutdown_timeout.
func run(ctx context.Context, cfg *runConfig, log *slog.Logger) (err error) {
	defer func() {
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil // stopped by a signal while starting: a clean stop, not a failure
		}
	}()
	if cfg.MemoryLimitMB > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimitMB) << 20 * 9 / 10)
	}
	awsmsk.Enable(&cfg.Kafka) // AWS_MSK_IAM signs with AWS's signer module
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var st readiness
	st.set("starting")
	mux := http.NewServeMux()
	var metrics metricsEndpoint // the registry until the lag exporter runs, then its snapshot too
	metrics.set(metricsHandler(reg))
	mux.Handle("/metrics", &metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := st.notReady(); why != "" {
			http.Error(w, "not ready: "+why+"\n", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.Handle(instrument.TimeSyncPath, instrument.TimeSyncHandler(time.Now))
	if cfg.HTTP.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTP.Listen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	httpDone := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			httpDone <- err
		}
		close(httpDone)
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	defer func() { // last: the HTTP server outlives everything else
		hctx, hcancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
		defer hcancel()
		if herr := srv.Shutdown(hctx); herr != nil {
			err = errors.Join(err, fmt.Errorf("http shutdown: %w", herr))
		}
		log.Info("stopped")
	}()
	// A dependency that is down at start is waited for, not a reason to exit; the HTTP server failing is.
	sctx, cancelStart := context.WithCancelCause(ctx)
	defer cancelStart(nil)
	go func() {
		select {
		case err := <-httpDone:
			if err != nil {
				cancelStart(fmt.Errorf("http server: %w", err))
			}
		case <-sctx.Done():
		}
	}()

	if !cfg.clickHouse {
		return runLagExporter(ctx, sctx, cfg, log, &st, reg, &metrics)
	}
	st.set("connecting to ClickHouse")
	db, err := retryDependency(sctx, log, &st, "ClickHouse", func() (*store.Store, error) {
		db, err := store.Open(sctx, cfg.ClickHouse)
		if err != nil {
			return nil, err
		}
		if *cfg.Migrate {
			res, err := db.Migrate(sctx)
			if err != nil {
				_ = db.Close()
				return nil, err
			}
			log.Info("schema ready", "result", fmt.Sprintf("%+v", res))
		} else if err := db.CheckSchema(sctx); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("check schema (run `tidemark migrate`): %w", err)
		}
		return db, nil
	})
	if err != nil {
		return startErr(sctx, err)
	}
	defer db.Close()
	writer, err := store.NewWriter(db, store.WriterOptions{Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	engine, err := latency.NewEngine(cfg.engineConfig())
	if err != nil {
		return err
	}
	var tp trace.TracerProvider // nil: no hop spans
	if cfg.Tracing.Enabled {
		prov, err := tracing.NewProvider(cfg.Tracing, reg, log)
		if err != nil {
			return err
		}
		tp = prov
		defer func() { // after the writer closed: the paths' last spans are queued by then
			tctx, tcancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
			defer tcancel()
			if terr := prov.Shutdown(tctx); terr != nil {
				log.Warn("span export did not finish before the shutdown timeout; the rest are dropped", "err", terr)
			}
		}()
		log.Info("exporting hop spans over OTLP", "protocol", cfg.Tracing.Protocol, "endpoint", cfg.Tracing.Endpoint)
	}
	col, err := collector.New(cfg.Collector, collector.Options{
		Kafka: cfg.Kafka, Engine: engine, Sink: writer, Metrics: collector.NewMetrics(reg, cfg.Collector.SLOThresholds...), Logger: log,
		TracerProvider: tp,
	})
	if err != nil {
		return err
	}

	var loop *lagexporter.Loop
	var lagMetrics *promexport.Handler
	activity := lagexporter.NewActivity(cfg.Lag.Election.Enabled)
	if *cfg.LagEnabled {
		var cluster *kafka.ClusterReader
		if loop, cluster, err = startLag(sctx, cfg, log, &st); err != nil {
			return err
		}
		defer cluster.Close()
		// A LogAppendTime is its broker's clock: the collector's probes know each probed broker's offset from ours.
		loop.SetBrokerClocks(col.BrokerOffset)
		// A standby replica (lag.election) serves the health series only: ActiveSource hides its snapshots.
		lagMetrics = promexport.NewHandler(promexport.NewCollector(&cfg.Lag, lagexporter.ActiveSource{Loop: loop, Activity: activity}), reg)
		metrics.set(lagMetrics)
	}

	g, gctx := errgroup.WithContext(sctx)
	g.Go(func() error { return col.Run(gctx) })
	if loop != nil {
		snaps, cancelSub := loop.Subscribe(4)
		defer cancelSub()
		rendered, cancelRender := loop.Subscribe(1)
		defer cancelRender()
		g.Go(func() error { return loop.Run(gctx) })
		g.Go(func() error { return col.FollowLag(gctx, snaps, activity) })
		g.Go(func() error { lagMetrics.Follow(gctx, rendered); return nil })
		if cfg.Lag.Election.Enabled {
			g.Go(func() error { return runLease(gctx, cfg, activity, log) })
		}
	}
	// The collector connects to Kafka in its Run (retrying); until it does, and while its sink fails, it says why.
	st.setCheck(col.Ready)
	log.Info("tidemark running", "brokers", cfg.Kafka.Brokers, "kafka_security", cfg.Kafka.Describe(), "clickhouse", cfg.ClickHouse.Addr)

	runErr := g.Wait() // consumers have stopped and drained
	if cause := context.Cause(sctx); ctx.Err() == nil && cause != nil {
		runErr = errors.Join(runErr, cause) // the HTTP server failed
	}
	st.set("stopping")
	log.Info("stopping: flushing the writer")
	fctx, cancel := context.WithTimeout(context.Background(), cfg.ClickHouse.Writer.InsertTimeout+cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := writer.Close(fctx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("close writer: %w", err))
	}
	return runErr
}

// metricsEndpoint is /metrics: the handler set last (metricsHandler until the lag exporter runs, then its
// promexport.Handler, which serves the pre-rendered snapshot together with the registry's metrics).
type metricsEndpoint struct{ h atomic.Pointer[http.Handler] }

func (m *metricsEndpoint) set(h http.Handler) { m.h.Store(&h) }

func (m *metricsEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*m.h.Load()).ServeHTTP(w, r)
}

// startLag connects the lag exporter to Kafka, retrying like every dependency, and returns its loop and the reader
// the caller closes.
func startLag(sctx context.Context, cfg *runConfig, log *slog.Logger, st *readiness) (*lagexporter.Loop, *kafka.ClusterReader, error) {
	st.set("connecting to Kafka (lag exporter)")
	cluster, err := retryDependency(sctx, log, st, "Kafka (lag exporter)", func() (*kafka.ClusterReader, error) {
		// Resolved at every attempt: a corrected password or secret file is picked up without a restart.
		kc, err := cfg.Kafka.Resolve()
		if err != nil {
			return nil, err
		}
		if err := kc.Check(sctx); err != nil {
			return nil, err
		}
		r, err := kafka.NewClusterReader(kc.Brokers(), kc.Sarama())
		if r != nil {
			r.Logger = log // a broker that cannot answer a group RPC is logged once
		}
		return r, err
	})
	if err != nil {
		return nil, nil, startErr(sctx, err)
	}
	loop, err := lagexporter.NewLoop(&cfg.Lag, cluster, time.Now)
	if err != nil {
		_ = cluster.Close()
		return nil, nil, err
	}
	return loop, cluster, nil
}

// runLagExporter is `tidemark run` without a clickhouse block: the lag exporter alone, like kminion. /metrics serves
// its pre-rendered snapshot and the process's own metrics; /readyz needs no database (lagReady).
func runLagExporter(ctx, sctx context.Context, cfg *runConfig, log *slog.Logger, st *readiness, reg *prometheus.Registry,
	metrics *metricsEndpoint) error {
	loop, cluster, err := startLag(sctx, cfg, log, st)
	if err != nil {
		return err
	}
	defer cluster.Close()
	activity := lagexporter.NewActivity(cfg.Lag.Election.Enabled)
	h := promexport.NewHandler(promexport.NewCollector(&cfg.Lag, lagexporter.ActiveSource{Loop: loop, Activity: activity}), reg)
	metrics.set(h)
	snaps, cancelSub := loop.Subscribe(1)
	defer cancelSub()
	g, gctx := errgroup.WithContext(sctx)
	g.Go(func() error { return loop.Run(gctx) })
	g.Go(func() error { h.Follow(gctx, snaps); return nil })
	if cfg.Lag.Election.Enabled {
		g.Go(func() error { return runLease(gctx, cfg, activity, log) })
	}
	st.setCheck(lagReady(loop, &cfg.Lag, time.Now))
	log.Info("tidemark running as a lag exporter (no clickhouse block, so no collector)", "brokers", cfg.Kafka.Brokers)
	err = g.Wait()
	if cause := context.Cause(sctx); ctx.Err() == nil && cause != nil {
		err = errors.Join(err, cause) // the HTTP server failed
	}
	st.set("stopping")
	return err
}

// lagReady is a lag exporter's readiness: ready once a cycle has published a snapshot, and not ready while no cycle
// has succeeded for three poll intervals plus a cycle timeout (the lag served is then stale; the reason says since
// when).
func lagReady(loop *lagexporter.Loop, cfg *lagexporter.Config, now func() time.Time) func() error {
	return func() error {
		h := loop.Health()
		if h.LastSuccess.IsZero() {
			return errors.New("lag exporter: no poll cycle has completed yet")
		}
		if age := now().Sub(h.LastSuccess); age > 3*cfg.PollInterval+cfg.CycleTimeout {
			return fmt.Errorf("lag exporter: no successful poll cycle for %s", age.Round(time.Second))
		}
		return nil
	}
}

// startErr is the error to return when a dependency's retries ended: the HTTP server's failure if that ended them,
// else err (context.Canceled after a signal, which run treats as a clean stop).
func startErr(sctx context.Context, err error) error {
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// retryDependency calls connect until it succeeds or ctx ends, with exponential backoff (0.5 s doubling to 30 s,
// jittered, no limit), logging each failed attempt once and publishing it as the /readyz reason.
func retryDependency[T any](ctx context.Context, log *slog.Logger, st *readiness, what string, connect func() (T, error)) (T, error) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval, eb.MaxInterval, eb.Multiplier = 500*time.Millisecond, 30*time.Second, 2
	return backoff.Retry(ctx, func() (T, error) {
		v, err := connect()
		if err != nil {
			st.set(fmt.Sprintf("connecting to %s: %v", what, err))
		}
		return v, err
	}, backoff.WithBackOff(eb), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		log.Warn("cannot reach "+what+"; retrying", "in", next.Round(time.Millisecond), "err", err)
	}))
}

// readiness is what /readyz answers: a fixed reason while starting or stopping, else a check's error. The zero
// value is ready.
type readiness struct {
	mu     sync.Mutex // guards reason, check
	reason string
	check  func() error
}

func (r *readiness) set(reason string) {
	r.mu.Lock()
	r.reason, r.check = reason, nil
	r.mu.Unlock()
}

func (r *readiness) setCheck(check func() error) {
	r.mu.Lock()
	r.reason, r.check = "", check
	r.mu.Unlock()
}

// notReady returns why the process is not ready, "" when it is.
func (r *readiness) notReady() string {
	r.mu.Lock()
	reason, check := r.reason, r.check
	r.mu.Unlock()
	if reason != "" {
		return reason
	}
	if check != nil {
		if err := check(); err != nil {
			return err.Error()
		}
	}
	return ""
}

// runLease runs the lag exporter's election (lag.election) until ctx ends, recording its outcome in activity.
// The kafka: block is resolved like the collector's (TLS, SASL), and retried while a file it names cannot be read
// (a Secret not mounted yet): the replica stays standby meanwhile.
func runLease(ctx context.Context, cfg *runConfig, activity *lagexporter.Activity, log *slog.Logger) error {
	var sc *sarama.Config
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		var err error
		if sc, err = cfg.Kafka.Sarama(); err == nil {
			break
		}
		log.Warn("lag exporter election cannot resolve the kafka block; retrying", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	e := cfg.Lag.Election
	defer activity.Set(false)
	return kafka.RunLease(ctx, kafka.LeaseConfig{Brokers: cfg.Kafka.Brokers, Sarama: sc, Group: e.Group, Topic: e.Topic,
		SessionTimeout: e.SessionTimeout, OnChange: activity.Set, Logger: log})
}
