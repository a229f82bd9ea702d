package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// writerMetrics are the Writer's Prometheus metrics (docs/schema.md lists them). Tables are the label values.
type writerMetrics struct {
	rowsWritten   *prometheus.CounterVec   // rows ClickHouse acknowledged
	batches       *prometheus.CounterVec   // inserts ClickHouse acknowledged
	retries       *prometheus.CounterVec   // insert attempts that failed and were retried
	failures      *prometheus.CounterVec   // inserts given up (permanent error, retry budget, close deadline)
	rowsDropped   *prometheus.CounterVec   // rows of given-up inserts
	duplicates    *prometheus.CounterVec   // rows dropped by the dedup window
	insertSeconds *prometheus.HistogramVec // duration of one insert attempt
	bufferedRows  prometheus.Gauge         // rows held: buffered plus in flight
	bufferedBytes prometheus.Gauge         // estimated bytes held
	blockedSecs   prometheus.Counter       // time Write calls spent waiting for room (backpressure)
	unacked       prometheus.GaugeFunc     // seconds rows have waited without an acknowledgement (Writer.unacknowledged)
}

// newWriterMetrics makes the writer's metrics and registers them with reg (unless nil); unacked reads the writer's
// unacknowledged seconds at scrape time.
func newWriterMetrics(reg prometheus.Registerer, unacked func() float64) (*writerMetrics, error) {
	const ns, sub = "tidemark", "store_writer"
	table := []string{"table"}
	m := &writerMetrics{
		rowsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "rows_written_total", Help: "Rows ClickHouse acknowledged, by table."}, table),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "batches_total", Help: "Batch inserts ClickHouse acknowledged, by table."}, table),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retries_total", Help: "Failed insert attempts that were retried, by table."}, table),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "failed_batches_total", Help: "Batch inserts given up (permanent error, retry limit or shutdown), by table."}, table),
		rowsDropped: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dropped_rows_total", Help: "Rows of given-up batch inserts, by table; their writers' acks got the error."}, table),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "duplicate_rows_total", Help: "Rows dropped because the dedup window had accepted their key, by table."}, table),
		insertSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "insert_duration_seconds", Help: "Duration of one batch insert attempt, by table.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9)}, table),
		bufferedRows: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "buffered_rows", Help: "Rows held by the writer: buffered plus being inserted."}),
		bufferedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "buffered_bytes", Help: "Estimated bytes held by the writer."}),
		blockedSecs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "blocked_seconds_total", Help: "Time Write calls waited for room in the buffer (backpressure)."}),
		unacked: prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "unacknowledged_seconds", Help: "How long rows have waited with no batch acknowledged by ClickHouse (0 when none wait); /readyz fails from stall_timeout."},
			unacked),
	}
	for _, t := range []string{TableLatency, TableProbe, TableLag, TableClockOffsets} {
		// Pre-create the series so a table with no traffic yet reads 0 rather than being absent.
		m.rowsWritten.WithLabelValues(t)
		m.batches.WithLabelValues(t)
		m.retries.WithLabelValues(t)
		m.failures.WithLabelValues(t)
		m.rowsDropped.WithLabelValues(t)
		m.duplicates.WithLabelValues(t)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.rowsWritten, m.batches, m.retries, m.failures, m.rowsDropped,
		m.duplicates, m.insertSeconds, m.bufferedRows, m.bufferedBytes, m.blockedSecs, m.unacked} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register store writer metrics: %w", err)
		}
	}
	return m, nil
}
