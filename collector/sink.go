package collector

import (
	"context"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
)

// Sink is the batched ClickHouse writer as the collector uses it (internal/store's Writer satisfies it).
type Sink interface {
	// Write hands rows to the writer. It blocks while the writer is full (backpressure) and returns ctx's error if
	// ctx ends first, in which case ack is never called. Otherwise ack is called exactly once, from any goroutine,
	// after ClickHouse acknowledged every row (nil) or when the writer gave up on them (non-nil). The writer may
	// keep rows.Latency (not a copy) until then: the caller must not modify those rows or reuse their memory.
	Write(ctx context.Context, rows store.Rows, ack store.Ack) error
}

// DeadLetters receives records that could not be decoded. Send returns once the dead-letter topic has them, so the
// source offsets may then be committed.
type DeadLetters interface {
	Send(ctx context.Context, path string, recs []kafka.Record, reasons []error) error
}

// clusterSink stamps its cluster's name on every row before handing them on: the cluster column of every table. The
// rows are the caller's, stamped in place (the same value on every write, so a re-read after a give-up is unchanged).
type clusterSink struct {
	FlushingSink
	cluster string
}

func (s clusterSink) Write(ctx context.Context, rows store.Rows, ack store.Ack) error {
	for i := range rows.Latency {
		rows.Latency[i].Cluster = s.cluster
	}
	for i := range rows.Probe {
		rows.Probe[i].Cluster = s.cluster
	}
	for i := range rows.Lag {
		rows.Lag[i].Cluster = s.cluster
	}
	for i := range rows.ClockOffsets {
		rows.ClockOffsets[i].Cluster = s.cluster
	}
	return s.FlushingSink.Write(ctx, rows, ack)
}
