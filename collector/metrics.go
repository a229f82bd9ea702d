package collector

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/latency/instrument"
)

// Metrics are the collector's own counters. Names follow Prometheus conventions; docs/collector.md lists them.
type Metrics struct {
	Records      *prometheus.CounterVec   // path
	Rows         *prometheus.CounterVec   // path
	RowsAcked    *prometheus.CounterVec   // path
	SinkErrors   *prometheus.CounterVec   // path
	SinkBlocked  *prometheus.CounterVec   // path: seconds spent blocked in Sink.Write (backpressure)
	SinkWaiting  *prometheus.GaugeVec     // path: partitions of the path waiting in Sink.Write right now
	DeadLetters  *prometheus.CounterVec   // path, reason
	Classes      *prometheus.CounterVec   // path, class (live, replay, redelivery, backfill)
	Skewed       *prometheus.CounterVec   // path
	ProbeSent    *prometheus.CounterVec   // broker
	ProbeLost    *prometheus.CounterVec   // broker
	ProbeDup     *prometheus.CounterVec   // broker
	ProbeLatency *prometheus.HistogramVec // broker, stage (ingest, delivery, rtt)
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered, e.g. in tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &Metrics{
		Records:     cv("tidemark_collector_records_total", "Kafka records consumed by a collector path.", "path"),
		Rows:        cv("tidemark_collector_rows_total", "Rows handed to the ClickHouse writer.", "path"),
		RowsAcked:   cv("tidemark_collector_rows_acked_total", "Rows ClickHouse acknowledged (their offsets may then be committed).", "path"),
		SinkErrors:  cv("tidemark_collector_sink_errors_total", "Batches the writer gave up on (their offsets are not committed).", "path"),
		SinkBlocked: cv("tidemark_collector_sink_blocked_seconds_total", "Time a path waited for the writer (backpressure).", "path"),
		SinkWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidemark_collector_sink_waiting",
			Help: "Partitions of a path waiting for the writer right now (consumption of them is paused)."}, []string{"path"}),
		DeadLetters: cv("tidemark_collector_dead_letters_total", "Records sent to the dead-letter topic.", "path", "reason"),
		Classes:     cv("tidemark_collector_processings_total", "Processings by replay class.", "path", "class"),
		Skewed:      cv("tidemark_collector_skew_suspected_total", "Rows kept out of percentiles because a clock offset was unknown or inconsistent.", "path"),
		ProbeSent:   cv("tidemark_probe_sent_total", "Probe records sent.", "broker"),
		ProbeLost:   cv("tidemark_probe_lost_total", "Probe records not received within the loss timeout.", "broker"),
		ProbeDup:    cv("tidemark_probe_duplicates_total", "Extra deliveries of probe records.", "broker"),
		ProbeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_probe_latency_seconds",
			Help:    "Probe latency per broker: ingest (send to corrected append), delivery (corrected append to receive), rtt (send to ack).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"broker", "stage"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.Records, m.Rows, m.RowsAcked, m.SinkErrors, m.SinkBlocked, m.SinkWaiting,
			m.DeadLetters, m.Classes, m.Skewed, m.ProbeSent, m.ProbeLost, m.ProbeDup, m.ProbeLatency} {
			reg.MustRegister(c)
		}
	}
	return m
}

// reason names a decode error for the dead-letter counter's label.
func reason(err error) string {
	switch {
	case errors.Is(err, instrument.ErrUnsupportedVersion):
		return "unsupported_version"
	case errors.Is(err, instrument.ErrMalformed):
		return "malformed"
	}
	return "other"
}
