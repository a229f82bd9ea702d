package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// tableBatch is one table's share of a flush: typed rows that append themselves column by column (clickhouse-go's
// columnar Append, far cheaper than a []any per row). ver is the batch's version: the writer's clock in Unix ms.
type tableBatch interface {
	table() string
	columns() []string
	len() int
	// appendTo appends the rows to b column by column; latency batches encode through cols when it is not nil.
	appendTo(b driver.Batch, ver uint64, cols *latencyCols) error
}

// insertSQL is the INSERT a batch is prepared with. The column list is required: without it ClickHouse 18.16
// answers with an empty header ("expected 0 arguments").
func insertSQL(tb tableBatch) string {
	return "INSERT INTO " + tb.table() + " (" + strings.Join(tb.columns(), ", ") + ")"
}

var latencyColumns = []string{
	"record_time", "observed_time", "consumer_group", "topic", "partition", "offset", "replay_class", "source",
	"event_ts_ms", "append_ts_ms", "receive_ts_ms", "processed_ts_ms",
	"ingest_naive_ms", "queue_naive_ms", "process_naive_ms", "e2e_naive_ms",
	"ingest_ms", "queue_ms", "process_ms", "e2e_ms", "uncertainty_ms", "valid", "flags",
	"producer_host", "broker_host", "consumer_host", "trace_id", "span_id", "ver",
}

var probeColumns = []string{
	"record_time", "topic", "partition", "seq", "broker_id",
	"send_ts_ms", "append_ts_ms", "ack_ts_ms", "receive_ts_ms",
	"ingest_ms", "delivery_ms", "rtt_ms", "e2e_ms", "broker_offset_ms", "uncertainty_ms",
	"status", "duplicates", "flags", "trace_id", "instance", "ver",
}

var lagColumns = []string{
	"at", "at_ms", "cluster", "consumer_group", "topic", "partition",
	"committed", "log_start", "end_offset", "lag", "expired", "time_lag_ms",
	"status", "partition_status", "flags", "group_type", "subtopology", "internal_topic", "ver",
}

var clockColumns = []string{"at", "at_ms", "host", "kind", "offset_ms", "uncertainty_ms", "samples",
	"lower_ms", "upper_ms", "estimate_ms", "min_delay_ms", "ver"}

type latencyBatch []LatencyRow
type probeBatch []ProbeRow
type lagBatch []LagRow
type clockBatch []ClockOffsetRow

func (latencyBatch) table() string     { return TableLatency }
func (probeBatch) table() string       { return TableProbe }
func (lagBatch) table() string         { return TableLag }
func (clockBatch) table() string       { return TableClockOffsets }
func (latencyBatch) columns() []string { return latencyColumns }
func (probeBatch) columns() []string   { return probeColumns }
func (lagBatch) columns() []string     { return lagColumns }
func (clockBatch) columns() []string   { return clockColumns }
func (rs latencyBatch) len() int       { return len(rs) }
func (rs probeBatch) len() int         { return len(rs) }
func (rs lagBatch) len() int           { return len(rs) }
func (rs clockBatch) len() int         { return len(rs) }

// col maps a row slice to one column's values.
func col[R, V any](rs []R, f func(*R) V) []V {
	out := make([]V, len(rs))
	for i := range rs {
		out[i] = f(&rs[i])
	}
	return out
}

// groupTypeValue is the group_type Enum8 value of t: classic for the zero value or anything unknown.
func groupTypeValue(t GroupType) int8 {
	if t < GroupClassic || t > GroupStreams {
		return int8(GroupClassic)
	}
	return int8(t)
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// enum8 clamps values outside an Enum8's defined range [0, n) to 0 ('unknown'): one bad value must not fail a whole
// batch of other rows.
func enum8(v int8, n int8) int8 {
	if v < 0 || v >= n {
		return 0
	}
	return v
}

func appendColumns(b driver.Batch, table string, names []string, cols []any) error {
	for i, c := range cols {
		if err := b.Column(i).Append(c); err != nil {
			return fmt.Errorf("append column %s.%s: %w", table, names[i], err)
		}
	}
	return nil
}

func vers(n int, ver uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = ver
	}
	return out
}

// latencyCols is reusable column memory for encoding latency batches, the writer's one high-volume table: one pass
// over the rows fills every column (the rows are read once, in order), and the next batch reuses the slices instead
// of allocating ~15 MB of columns per 50k rows. clickhouse-go copies a column's values into its own block on
// Append, so the slices are free again as soon as appendTo returns. Not safe for concurrent use.
type latencyCols struct {
	recordTime, observedTime                                          []time.Time
	group, topic, producerHost, brokerHost, consumerHost, trace, span []string
	partition                                                         []int32
	offset, event, appendTs, receive, processed                       []int64
	ingestNaive, queueNaive, processNaive, e2eNaive                   []int64
	ingest, queue, process, e2e                                       []int64
	class, source                                                     []int8
	uncertainty                                                       []float64
	valid                                                             []uint8
	flags                                                             []uint32
	ver                                                               []uint64
}

// sized returns s resliced to n, reallocated only when its capacity is short.
func sized[V any](s []V, n int) []V {
	if cap(s) < n {
		return make([]V, n)
	}
	return s[:n]
}

func (c *latencyCols) fill(rs []LatencyRow, ver uint64) []any {
	n := len(rs)
	c.recordTime, c.observedTime = sized(c.recordTime, n), sized(c.observedTime, n)
	c.group, c.topic, c.producerHost = sized(c.group, n), sized(c.topic, n), sized(c.producerHost, n)
	c.brokerHost, c.consumerHost, c.trace, c.span = sized(c.brokerHost, n), sized(c.consumerHost, n), sized(c.trace, n), sized(c.span, n)
	c.partition = sized(c.partition, n)
	c.offset, c.event, c.appendTs = sized(c.offset, n), sized(c.event, n), sized(c.appendTs, n)
	c.receive, c.processed = sized(c.receive, n), sized(c.processed, n)
	c.ingestNaive, c.queueNaive, c.processNaive, c.e2eNaive = sized(c.ingestNaive, n), sized(c.queueNaive, n), sized(c.processNaive, n), sized(c.e2eNaive, n)
	c.ingest, c.queue, c.process, c.e2e = sized(c.ingest, n), sized(c.queue, n), sized(c.process, n), sized(c.e2e, n)
	c.class, c.source = sized(c.class, n), sized(c.source, n)
	c.uncertainty, c.valid, c.flags, c.ver = sized(c.uncertainty, n), sized(c.valid, n), sized(c.flags, n), sized(c.ver, n)
	for i := range rs {
		r := &rs[i]
		c.recordTime[i], c.observedTime[i] = r.RecordTime(), r.ObservedTime()
		c.group[i], c.topic[i], c.partition[i], c.offset[i] = r.Group, r.Topic, r.Partition, r.Offset
		c.class[i], c.source[i] = enum8(int8(r.Class), 5), enum8(int8(r.Source), 4)
		c.event[i], c.appendTs[i], c.receive[i], c.processed[i] = r.EventMs, r.AppendMs, r.ReceiveMs, r.ProcessedMs
		c.ingestNaive[i], c.queueNaive[i], c.processNaive[i], c.e2eNaive[i] = r.IngestNaiveMs, r.QueueNaiveMs, r.ProcessNaiveMs, r.E2ENaiveMs
		c.ingest[i], c.queue[i], c.process[i], c.e2e[i] = r.IngestMs, r.QueueMs, r.ProcessMs, r.E2EMs
		c.uncertainty[i], c.valid[i], c.flags[i] = r.UncertaintyMs, uint8(r.Valid), r.Flags
		c.producerHost[i], c.brokerHost[i], c.consumerHost[i] = r.ProducerHost, r.BrokerHost, r.ConsumerHost
		c.trace[i], c.span[i], c.ver[i] = r.TraceID, r.SpanID, ver
	}
	// The order of latencyColumns.
	return []any{c.recordTime, c.observedTime, c.group, c.topic, c.partition, c.offset, c.class, c.source,
		c.event, c.appendTs, c.receive, c.processed, c.ingestNaive, c.queueNaive, c.processNaive, c.e2eNaive,
		c.ingest, c.queue, c.process, c.e2e, c.uncertainty, c.valid, c.flags,
		c.producerHost, c.brokerHost, c.consumerHost, c.trace, c.span, c.ver}
}

// release drops the string columns' references, so reused memory does not keep a flushed batch's strings alive.
func (c *latencyCols) release() {
	for _, s := range [][]string{c.group, c.topic, c.producerHost, c.brokerHost, c.consumerHost, c.trace, c.span} {
		clear(s)
	}
}

// appendTo appends rs column by column, encoding through cols (nil allocates fresh columns).
func (rs latencyBatch) appendTo(b driver.Batch, ver uint64, cols *latencyCols) error {
	if cols == nil {
		cols = new(latencyCols)
	}
	defer cols.release()
	return appendColumns(b, TableLatency, latencyColumns, cols.fill(rs, ver))
}

func (rs probeBatch) appendTo(b driver.Batch, ver uint64, _ *latencyCols) error {
	return appendColumns(b, TableProbe, probeColumns, []any{
		col(rs, func(r *ProbeRow) time.Time { return r.RecordTime() }),
		col(rs, func(r *ProbeRow) string { return r.Topic }),
		col(rs, func(r *ProbeRow) int32 { return r.Partition }),
		col(rs, func(r *ProbeRow) uint64 { return r.Seq }),
		col(rs, func(r *ProbeRow) int32 { return r.BrokerID }),
		col(rs, func(r *ProbeRow) int64 { return r.SendMs }),
		col(rs, func(r *ProbeRow) int64 { return r.AppendMs }),
		col(rs, func(r *ProbeRow) int64 { return r.AckMs }),
		col(rs, func(r *ProbeRow) int64 { return r.ReceiveMs }),
		col(rs, func(r *ProbeRow) int64 { return r.IngestMs }),
		col(rs, func(r *ProbeRow) int64 { return r.DeliveryMs }),
		col(rs, func(r *ProbeRow) int64 { return r.RTTMs }),
		col(rs, func(r *ProbeRow) int64 { return r.E2EMs }),
		col(rs, func(r *ProbeRow) float64 { return r.BrokerOffsetMs }),
		col(rs, func(r *ProbeRow) float64 { return r.UncertaintyMs }),
		col(rs, func(r *ProbeRow) int8 { return enum8(int8(r.Status), 3) }),
		col(rs, func(r *ProbeRow) uint32 { return r.Duplicates }),
		col(rs, func(r *ProbeRow) uint32 { return r.Flags }),
		col(rs, func(r *ProbeRow) string { return r.TraceID }),
		col(rs, func(r *ProbeRow) string { return r.Instance }),
		vers(len(rs), ver),
	})
}

func (rs lagBatch) appendTo(b driver.Batch, ver uint64, _ *latencyCols) error {
	return appendColumns(b, TableLag, lagColumns, []any{
		col(rs, func(r *LagRow) time.Time { return r.At.UTC().Truncate(time.Second) }),
		col(rs, func(r *LagRow) int64 { return r.At.UnixMilli() }),
		col(rs, func(r *LagRow) string { return r.Cluster }),
		col(rs, func(r *LagRow) string { return r.Group }),
		col(rs, func(r *LagRow) string { return r.Topic }),
		col(rs, func(r *LagRow) int32 { return r.Partition }),
		col(rs, func(r *LagRow) int64 { return r.Committed }),
		col(rs, func(r *LagRow) int64 { return r.LogStart }),
		col(rs, func(r *LagRow) int64 { return r.End }),
		col(rs, func(r *LagRow) int64 { return r.Lag }),
		col(rs, func(r *LagRow) int64 { return r.Expired }),
		col(rs, func(r *LagRow) int64 { return r.TimeLagMs }),
		col(rs, func(r *LagRow) int8 { return enum8(int8(r.Status), 7) }),
		col(rs, func(r *LagRow) int8 { return enum8(int8(r.PartitionStatus), 7) }),
		col(rs, func(r *LagRow) uint32 { return r.Flags }),
		col(rs, func(r *LagRow) int8 { return groupTypeValue(r.GroupType) }),
		col(rs, func(r *LagRow) string { return r.Subtopology }),
		col(rs, func(r *LagRow) uint8 { return b2u8(r.Internal) }),
		vers(len(rs), ver),
	})
}

func (rs clockBatch) appendTo(b driver.Batch, ver uint64, _ *latencyCols) error {
	return appendColumns(b, TableClockOffsets, clockColumns, []any{
		col(rs, func(r *ClockOffsetRow) time.Time { return r.At.UTC().Truncate(time.Second) }),
		col(rs, func(r *ClockOffsetRow) int64 { return r.At.UnixMilli() }),
		col(rs, func(r *ClockOffsetRow) string { return r.Host }),
		col(rs, func(r *ClockOffsetRow) int8 { return enum8(int8(r.Kind), 4) }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.OffsetMs }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.UncertaintyMs }),
		col(rs, func(r *ClockOffsetRow) uint32 { return r.Samples }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.LowerMs }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.UpperMs }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.EstimateMs }),
		col(rs, func(r *ClockOffsetRow) float64 { return r.MinDelayMs }),
		vers(len(rs), ver),
	})
}
