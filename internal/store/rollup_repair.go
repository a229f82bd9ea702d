package store

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of RollupRepairer.
const (
	// DefaultRollupRepairInterval is how often the repairer checks: a day that closed is repaired within it.
	DefaultRollupRepairInterval = time.Hour
	// DefaultRollupRepairDays is how many closed days each check covers (yesterday and the day before): a row of
	// yesterday still arriving during the first check after midnight is caught by the next one.
	DefaultRollupRepairDays = 2
)

// RollupRepairer keeps closed days of the rollups exact: every Interval it compares, for each of the last Days
// closed UTC days, each tier's row count with latency_events FINAL's and rebuilds the days that differ
// (Store.RepairRollups). The writer's dedup window, seeded on assignment (SeedReceiptKeys), keeps re-read rows out
// of the rollups; this repairs what still slips through (a retried insert whose acknowledgement was lost, rows older
// than the seed's bound, a crash of the writer between insert and acknowledgement).
//
// Its metrics (docs/schema.md): tidemark_store_rollup_checks_total, tidemark_store_rollup_check_errors_total,
// tidemark_store_rollup_miscounted_rows{table} (rollup minus raw rows over the days of the last check, before its
// repair; a count of rows counted twice when positive) and tidemark_store_rollup_rebuilt_days_total.
type RollupRepairer struct {
	store    *Store
	interval time.Duration
	days     int
	now      func() time.Time
	log      *slog.Logger

	checks, errors, rebuilt prometheus.Counter
	miscounted              *prometheus.GaugeVec
}

// NewRollupRepairer returns a repairer of s's rollups checking days closed days every interval (0: the defaults),
// with its metrics registered with reg (unless nil).
func NewRollupRepairer(s *Store, interval time.Duration, days int, reg prometheus.Registerer, log *slog.Logger) (*RollupRepairer, error) {
	if interval <= 0 {
		interval = DefaultRollupRepairInterval
	}
	if days <= 0 {
		days = DefaultRollupRepairDays
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	const ns, sub = "tidemark", "store_rollup"
	r := &RollupRepairer{store: s, interval: interval, days: days, now: time.Now, log: log,
		checks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "checks_total",
			Help: "Checks of the closed days' rollup counts against latency_events FINAL."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "check_errors_total",
			Help: "Rollup checks or rebuilds that failed (retried at the next check)."}),
		rebuilt: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "rebuilt_days_total",
			Help: "Days whose rollups were rebuilt from latency_events FINAL because a tier's count differed."}),
		miscounted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "miscounted_rows",
			Help: "Rollup rows minus latency_events FINAL rows over the closed days of the last check, before its repair, by rollup table (> 0: rows counted twice)."},
			[]string{"table"}),
	}
	for _, t := range rollupTiers {
		r.miscounted.WithLabelValues(t.table)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{r.checks, r.errors, r.rebuilt, r.miscounted} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register rollup repair metrics: %w", err)
			}
		}
	}
	return r, nil
}

// Check runs one check (and the repairs it calls for) at the repairer's clock's now.
func (r *RollupRepairer) Check(ctx context.Context) error {
	r.checks.Inc()
	counts, rebuilt, err := r.store.RepairRollups(ctx, r.now(), r.days)
	miss := map[string]int64{}
	for _, c := range counts {
		miss[c.Table] += c.Rollup - c.Raw
	}
	for t, n := range miss {
		r.miscounted.WithLabelValues(t).Set(float64(n))
	}
	r.rebuilt.Add(float64(len(rebuilt)))
	for _, d := range rebuilt {
		r.log.Info("rollups rebuilt: their counts differed from latency_events", "day", d.Format(time.DateOnly), "miscounted", miss)
	}
	if err != nil {
		r.errors.Inc()
		return fmt.Errorf("rollup repair: %w", err)
	}
	return nil
}

// Run checks at once and then every interval until ctx ends; a failed check is logged and counted, and retried at
// the next one. It returns nil when ctx ends.
func (r *RollupRepairer) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		if err := r.Check(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("rollup repair", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
