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
	"producer_host", "broker_host", "consumer_host", "trace_id", "span_id", "cluster", "ver",
	"receipt_partition", "receipt_offset",
	"ingest_lo_ms", "ingest_hi_ms", "queue_lo_ms", "queue_hi_ms", "process_lo_ms", "process_hi_ms", "e2e_lo_ms", "e2e_hi_ms",
}

var probeColumns = []string{
	"record_time", "topic", "partition", "seq", "broker_id",
	"send_ts_ms", "append_ts_ms", "ack_ts_ms", "receive_ts_ms",
	"ingest_ms", "delivery_ms", "rtt_ms", "e2e_ms", "broker_offset_ms", "uncertainty_ms",
	"status", "duplicates", "flags", "trace_id", "instance", "cluster", "ver",
}

var lagColumns = []string{
	"at", "at_ms", "cluster", "consumer_group", "topic", "partition",
	"committed", "log_start", "end_offset", "lag", "expired", "time_lag_ms",
	"status", "partition_status", "flags", "group_type", "subtopology", "internal_topic", "ver",
}

var clockColumns = []string{"at", "at_ms", "host", "kind", "offset_ms", "uncertainty_ms", "samples",
	"lower_ms", "upper_ms", "estimate_ms", "min_delay_ms", "cluster", "ver"}

// latencyBatch is a batch's latency rows: the accepted Writes' own slices, in order, kept rather than copied (see
// Writer.Write).
type latencyBatch [][]LatencyRow
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
func (rs latencyBatch) len() int {
	n := 0
	for _, seg := range rs {
		n += len(seg)
	}
	return n
}

func (rs probeBatch) len() int { return len(rs) }
func (rs lagBatch) len() int   { return len(rs) }
func (rs clockBatch) len() int { return len(rs) }

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

// latencyCols is reusable column memory for encoding latency batches, the writer's one high-volume table. Columns
// are encoded one at a time through one buffer per Go type: clickhouse-go copies a column's values into its own
// block on Append, so the buffer is free again for the next column of that type at once. One buffer per type (nine
// slices, ~74 B per row) instead of one per column (29 slices, ~310 B per row), and one data block of
// insertBlockRows at a time, keep it under 1 MB: the pipeline runs under a soft memory limit where every live
// megabyte is paid in garbage collections (docs/performance.md). Reading the rows once per column costs ~29 strided passes over a batch, ~1 ms per 10k rows.
// Not safe for concurrent use.
type latencyCols struct {
	times []time.Time
	strs  []string
	i32   []int32
	i64   []int64
	i8    []int8
	f64   []float64
	u8    []uint8
	u32   []uint32
	u64   []uint64
}

// sized returns s resliced to n, reallocated only when its capacity is short.
func sized[V any](s []V, n int) []V {
	if cap(s) < n {
		return make([]V, n)
	}
	return s[:n]
}

// flat returns the rows in one slice (a copy unless there is one segment).
func (rs latencyBatch) flat() []LatencyRow {
	if len(rs) == 1 {
		return rs[0]
	}
	out := make([]LatencyRow, 0, rs.len())
	for _, seg := range rs {
		out = append(out, seg...)
	}
	return out
}

// slice returns rows [from, to) of rs, sharing its rows.
func (rs latencyBatch) slice(from, to int) latencyBatch {
	var out latencyBatch
	for _, seg := range rs {
		if from >= to {
			break
		}
		if from >= len(seg) {
			from, to = from-len(seg), to-len(seg)
			continue
		}
		end := min(to, len(seg))
		out = append(out, seg[from:end])
		from, to = 0, to-len(seg)
	}
	return out
}

// appendLatencyCol fills *buf with f of every row and appends it as column i of b.
func appendLatencyCol[V any](b driver.Batch, i int, buf *[]V, rs latencyBatch, f func(*LatencyRow) V) error {
	s := sized(*buf, rs.len())
	j := 0
	for _, seg := range rs {
		for k := range seg {
			s[j] = f(&seg[k])
			j++
		}
	}
	*buf = s
	if err := b.Column(i).Append(s); err != nil {
		return fmt.Errorf("append column %s.%s: %w", TableLatency, latencyColumns[i], err)
	}
	return nil
}

// release drops the string buffer's references, so reused memory does not keep a flushed batch's strings alive.
func (c *latencyCols) release() { clear(c.strs) }

// appendTo appends rs column by column in latencyColumns' order, encoding through cols (nil allocates fresh buffers).
func (rs latencyBatch) appendTo(b driver.Batch, ver uint64, c *latencyCols) error {
	if c == nil {
		c = new(latencyCols)
	}
	defer c.release()
	r := rs
	str := func(i int, f func(*LatencyRow) string) error { return appendLatencyCol(b, i, &c.strs, r, f) }
	i64 := func(i int, f func(*LatencyRow) int64) error { return appendLatencyCol(b, i, &c.i64, r, f) }
	for _, fill := range [...]func() error{
		func() error { return appendLatencyCol(b, 0, &c.times, r, (*LatencyRow).RecordTime) },
		func() error { return appendLatencyCol(b, 1, &c.times, r, (*LatencyRow).ObservedTime) },
		func() error { return str(2, func(r *LatencyRow) string { return r.Group }) },
		func() error { return str(3, func(r *LatencyRow) string { return r.Topic }) },
		func() error {
			return appendLatencyCol(b, 4, &c.i32, r, func(r *LatencyRow) int32 { return r.Partition })
		},
		func() error { return i64(5, func(r *LatencyRow) int64 { return r.Offset }) },
		func() error {
			return appendLatencyCol(b, 6, &c.i8, r, func(r *LatencyRow) int8 { return enum8(int8(r.Class), 5) })
		},
		func() error {
			return appendLatencyCol(b, 7, &c.i8, r, func(r *LatencyRow) int8 { return enum8(int8(r.Source), 4) })
		},
		func() error { return i64(8, func(r *LatencyRow) int64 { return r.EventMs }) },
		func() error { return i64(9, func(r *LatencyRow) int64 { return r.AppendMs }) },
		func() error { return i64(10, func(r *LatencyRow) int64 { return r.ReceiveMs }) },
		func() error { return i64(11, func(r *LatencyRow) int64 { return r.ProcessedMs }) },
		func() error { return i64(12, func(r *LatencyRow) int64 { return r.IngestNaiveMs }) },
		func() error { return i64(13, func(r *LatencyRow) int64 { return r.QueueNaiveMs }) },
		func() error { return i64(14, func(r *LatencyRow) int64 { return r.ProcessNaiveMs }) },
		func() error { return i64(15, func(r *LatencyRow) int64 { return r.E2ENaiveMs }) },
		func() error { return i64(16, func(r *LatencyRow) int64 { return r.IngestMs }) },
		func() error { return i64(17, func(r *LatencyRow) int64 { return r.QueueMs }) },
		func() error { return i64(18, func(r *LatencyRow) int64 { return r.ProcessMs }) },
		func() error { return i64(19, func(r *LatencyRow) int64 { return r.E2EMs }) },
		func() error {
			return appendLatencyCol(b, 20, &c.f64, r, func(r *LatencyRow) float64 { return r.UncertaintyMs })
		},
		func() error {
			return appendLatencyCol(b, 21, &c.u8, r, func(r *LatencyRow) uint8 { return uint8(r.Valid) })
		},
		func() error { return appendLatencyCol(b, 22, &c.u32, r, func(r *LatencyRow) uint32 { return r.Flags }) },
		func() error { return str(23, func(r *LatencyRow) string { return r.ProducerHost }) },
		func() error { return str(24, func(r *LatencyRow) string { return r.BrokerHost }) },
		func() error { return str(25, func(r *LatencyRow) string { return r.ConsumerHost }) },
		func() error { return str(26, func(r *LatencyRow) string { return r.TraceID }) },
		func() error { return str(27, func(r *LatencyRow) string { return r.SpanID }) },
		func() error { return str(28, func(r *LatencyRow) string { return r.Cluster }) },
		func() error { return appendLatencyCol(b, 29, &c.u64, r, func(*LatencyRow) uint64 { return ver }) },
		func() error {
			return appendLatencyCol(b, 30, &c.i32, r, func(r *LatencyRow) int32 { p, _ := r.receiptSource(); return p })
		},
		func() error { return i64(31, func(r *LatencyRow) int64 { _, o := r.receiptSource(); return o }) },
	} {
		if err := fill(); err != nil {
			return err
		}
	}
	for i := range 4 {
		if err := appendLatencyCol(b, 32+2*i, &c.f64, r, func(r *LatencyRow) float64 { lo, _ := r.StageBound(i); return lo }); err != nil {
			return err
		}
		if err := appendLatencyCol(b, 33+2*i, &c.f64, r, func(r *LatencyRow) float64 { _, hi := r.StageBound(i); return hi }); err != nil {
			return err
		}
	}
	return nil
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
		col(rs, func(r *ProbeRow) string { return r.Cluster }),
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
		col(rs, func(r *ClockOffsetRow) string { return r.Cluster }),
		vers(len(rs), ver),
	})
}
