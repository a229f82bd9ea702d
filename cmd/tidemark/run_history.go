package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/readiness"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/tracing"
)

// history is the ClickHouse side of `tidemark run`: the store, its writer, the span exporter and every cluster's
// collector, started together in one goroutine (startHistory) while the lag exporters already run.
type history struct {
	done chan struct{}   // closed when the start ended: the fields below are then set (or left nil when it failed)
	st   readiness.State // why the store is not up yet ("connecting to ClickHouse: ..."), "" once it is

	db         *store.Store
	writer     *store.Writer
	stopRepair context.CancelFunc // stops the rollup repairer
	repaired   chan struct{}      // closed when the rollup repairer has returned
	prov       *tracing.Provider
}

// startHistory connects to ClickHouse (retrying like every dependency, see openStore), then builds the writer, the
// span exporter and each cluster's collector, and closes h.done. A failure other than ctx ending (a bad tracing
// block, a collector config the engine refuses) ends the run through fail.
func startHistory(ctx context.Context, cfg *runConfig, clusters []*clusterRun, reg prometheus.Registerer,
	log *slog.Logger, fail context.CancelCauseFunc) *history {
	h := &history{done: make(chan struct{})}
	h.st.Set("connecting to ClickHouse")
	cfg.ClickHouse.Cluster = clusters[0].cfg.Name // the rows stored before migration 0006 were this cluster's
	go func() {
		defer close(h.done)
		err := func() error {
			db, err := openStore(ctx, cfg, log, &h.st)
			if err != nil {
				return err
			}
			h.db = db
			if h.writer, err = store.NewWriter(db, store.WriterOptions{Registerer: reg, Logger: log}); err != nil {
				return err
			}
			if h.prov, err = startTracing(cfg, reg, log); err != nil {
				return err
			}
			var tp trace.TracerProvider // nil: no hop spans
			if h.prov != nil {
				tp = h.prov
			}
			for _, cr := range clusters {
				if err := cr.newCollector(cfg, h.db, h.writer, tp, reg); err != nil {
					return err
				}
			}
			// closed days whose rollups count some row twice (or miss one) are rebuilt from latency_events
			repair, err := store.NewRollupRepairer(db, 0, 0, reg, log)
			if err != nil {
				return err
			}
			rctx, stop := context.WithCancel(ctx)
			h.stopRepair, h.repaired = stop, make(chan struct{})
			go func() { defer close(h.repaired); _ = repair.Run(rctx) }()
			return nil
		}()
		if err != nil {
			for _, cr := range clusters {
				cr.col = nil // none of them runs: the run ends
			}
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		h.st.SetCheck(nil)
	}()
	return h
}

// collector returns the cluster's collector once the store has started, nil while it has not (or never will: the
// start failed or ctx ended first). ok reports whether the start has ended.
func (h *history) collector(cr *clusterRun) (col *collector.Collector, ok bool) {
	select {
	case <-h.done:
		return cr.col, true
	default:
		return nil, false
	}
}

// close waits for the start to end (ctx has ended by then), flushes and closes the writer, exports the queued spans
// (the paths' last spans are queued once the writer closed) and closes ClickHouse.
func (h *history) close(cfg *runConfig, log *slog.Logger) error {
	<-h.done
	if h.repaired != nil {
		h.stopRepair()
		<-h.repaired
	}
	var err error
	if h.writer != nil {
		log.Info("stopping: flushing the writer")
		fctx, cancel := context.WithTimeout(context.Background(), cfg.ClickHouse.Writer.InsertTimeout+cfg.HTTP.ShutdownTimeout)
		defer cancel()
		if werr := h.writer.Close(fctx); werr != nil {
			err = fmt.Errorf("close writer: %w", werr)
		}
	}
	if h.prov != nil {
		stopTracing(h.prov, cfg, log)
	}
	if h.db != nil {
		_ = h.db.Close()
	}
	return err
}

// openStore connects to ClickHouse, retrying like every dependency, and migrates the schema (migrate: true) or
// checks that it is current.
func openStore(sctx context.Context, cfg *runConfig, log *slog.Logger, st *readiness.State) (*store.Store, error) {
	st.Set("connecting to ClickHouse")
	db, err := readiness.Retry(sctx, readiness.DependencyBackoff(), log, st, "ClickHouse", func() (*store.Store, error) {
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
		return nil, readiness.StartError(sctx, err)
	}
	return db, nil
}

// startTracing returns the OTLP span exporter of the collectors' hop spans, nil when tracing is off.
func startTracing(cfg *runConfig, reg prometheus.Registerer, log *slog.Logger) (*tracing.Provider, error) {
	if !cfg.Tracing.Enabled {
		return nil, nil
	}
	prov, err := tracing.NewProvider(cfg.Tracing, reg, log)
	if err != nil {
		return nil, err
	}
	log.Info("exporting hop spans over OTLP", "protocol", cfg.Tracing.Protocol, "endpoint", cfg.Tracing.Endpoint)
	return prov, nil
}

// stopTracing exports the queued spans within http.shutdown_timeout; the rest are dropped.
func stopTracing(prov *tracing.Provider, cfg *runConfig, log *slog.Logger) {
	tctx, tcancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer tcancel()
	if terr := prov.Shutdown(tctx); terr != nil {
		log.Warn("span export did not finish before the shutdown timeout; the rest are dropped", "err", terr)
	}
}
