package store

import (
	"fmt"
	"math"
	"time"
)

// ReplayClass says whether a processing is live traffic, a replay or a backfill (docs/architecture.md, replay
// correction). Only live rows enter latency percentiles. Values match the Enum8 in latency_events.replay_class.
type ReplayClass int8

// Replay classes.
const (
	ClassUnknown  ReplayClass = 0
	ClassLive     ReplayClass = 1
	ClassReplay   ReplayClass = 2 // processed again after the group's committed offset decreased
	ClassBackfill ReplayClass = 3 // a new group's first pass over old data
	// ClassRedelivery: processed again below the group's processed position but at or above its highest commit: the
	// uncommitted tail handed to the next owner after a rebalance (at-least-once), neither live nor a replay.
	ClassRedelivery ReplayClass = 4
)

// Source is the collector path a latency row came from (latency_events.source).
type Source int8

// Sources.
const (
	SourceUnknown Source = 0
	SourceProbe   Source = 1
	SourceReceipt Source = 2
	SourceTap     Source = 3
)

// StageBits is latency_events.valid: bits 0–3 say a corrected stage is valid (usable in percentiles), bits 4–7 that
// the naive stage could be computed (both raw stamps present).
type StageBits uint8

// Stage validity bits.
const (
	ValidIngest  StageBits = 1 << 0
	ValidQueue   StageBits = 1 << 1
	ValidProcess StageBits = 1 << 2
	ValidE2E     StageBits = 1 << 3
	NaiveIngest  StageBits = 1 << 4
	NaiveQueue   StageBits = 1 << 5
	NaiveProcess StageBits = 1 << 6
	NaiveE2E     StageBits = 1 << 7
)

// ProbeStatus is probe_events.status.
type ProbeStatus int8

// Probe statuses.
const (
	ProbeUnknown ProbeStatus = 0
	ProbeOK      ProbeStatus = 1
	ProbeLost    ProbeStatus = 2 // not received within the loss timeout
)

// LagStatus is a Burrow-style status (lag_snapshots.status and partition_status).
type LagStatus int8

// Lag statuses.
const (
	StatusUnknown LagStatus = 0
	StatusOK      LagStatus = 1
	StatusWarn    LagStatus = 2
	StatusStall   LagStatus = 3
	StatusStop    LagStatus = 4
	StatusErr     LagStatus = 5
	StatusRewind  LagStatus = 6
)

// ClockKind is how a clock offset was estimated (clock_offsets.kind).
type ClockKind int8

// Clock-offset estimate kinds.
const (
	ClockUnknown   ClockKind = 0
	ClockBracketed ClockKind = 1 // probe round trip brackets the broker's append stamp
	ClockSynced    ClockKind = 2 // round-trip time sync with the collector
	ClockEnvelope  ClockKind = 3 // causality envelope of observed stage differences
)

// LatencyRow is one processing of (Group, Topic, Partition, Offset): a row of latency_events. Stamps are Unix
// milliseconds on the clock of the host that took them, -1 (or 0) when unknown; stages are milliseconds, naive
// (raw stamp differences) and corrected (on the reference clock). docs/schema.md defines every field.
type LatencyRow struct {
	// Cluster is the Kafka cluster the row is about (the cluster column; the writer stores "" as written).
	Cluster   string
	Group     string
	Topic     string
	Partition int32
	Offset    int64
	Class     ReplayClass
	Source    Source

	EventMs, AppendMs, ReceiveMs, ProcessedMs int64 // raw stamps, Unix ms

	// ObservedMs is when the processing happened on the reference clock (corrected processed time, else receive
	// time), Unix ms; it picks the rollup minute. 0 means ProcessedMs, else ReceiveMs, else the record time.
	ObservedMs int64

	IngestNaiveMs, QueueNaiveMs, ProcessNaiveMs, E2ENaiveMs int64
	IngestMs, QueueMs, ProcessMs, E2EMs                     int64
	UncertaintyMs                                           float64 // ± bound of the correction
	// LowerMs and UpperMs are, per stage (indexed by BoundIngest, BoundQueue, BoundProcess, BoundE2E), the interval
	// in ms on the reference clock that holds the stage's true value (latency_events.<stage>_lo_ms and _hi_ms).
	// Only the stages with their bit in Bounded are written as set; the others are stored as [0, +Inf): unknown.
	// UpperMs may be +Inf (an end's clock offset is unknown). Bits are Valid's corrected-stage bits (ValidIngest...).
	LowerMs, UpperMs [4]float64
	Bounded          StageBits
	Valid            StageBits
	Flags            uint32 // latency core flag bits

	ProducerHost, BrokerHost, ConsumerHost string
	TraceID, SpanID                        string // lowercase hex, '' when none

	// ReceiptPartition and ReceiptOffset locate the receipts-topic record a row of Source SourceReceipt came from
	// (latency_events.receipt_partition and receipt_offset; -1 is stored for rows of other sources).
	ReceiptPartition int32
	ReceiptOffset    int64
}

// Indexes of LatencyRow.LowerMs and UpperMs, in the order of the stage columns.
const (
	BoundIngest = iota
	BoundQueue
	BoundProcess
	BoundE2E
)

// StageBound returns the stored interval of stage i (BoundIngest...): the row's own when its bit (ValidIngest << i)
// is in Bounded, else [0, +Inf), unknown.
func (r *LatencyRow) StageBound(i int) (lo, hi float64) {
	if r.Bounded&(ValidIngest<<i) == 0 {
		return 0, math.Inf(1)
	}
	return r.LowerMs[i], r.UpperMs[i]
}

// receiptSource is the stored receipt_partition and receipt_offset: the row's own for a receipt row, else -1, -1.
func (r *LatencyRow) receiptSource() (int32, int64) {
	if r.Source != SourceReceipt {
		return -1, -1
	}
	return r.ReceiptPartition, r.ReceiptOffset
}

// RecordTime is the row's partition and dedup anchor: the first plausible one (see PlausibleMs) of the append,
// event, receive, processed and observed stamps, else FallbackTime. It depends only on the row's content, so every
// copy of a row lands in the same daily partition and ReplacingMergeTree can collapse them. A stamp in the wrong unit
// or from a broken clock never picks the partition: it would land the row in 1970 or 2262, where retention drops it
// at once or never.
func (r *LatencyRow) RecordTime() time.Time {
	return time.UnixMilli(firstPlausible(r.AppendMs, r.EventMs, r.ReceiveMs, r.ProcessedMs, r.ObservedMs)).UTC()
}

// ObservedTime is latency_events.observed_time: ObservedMs or its fallbacks (see ObservedMs), the first plausible one,
// else FallbackTime.
func (r *LatencyRow) ObservedTime() time.Time {
	return time.UnixMilli(firstPlausible(r.ObservedMs, r.ProcessedMs, r.ReceiveMs, r.AppendMs, r.EventMs)).UTC()
}

// ProbeRow is one probe record: a row of probe_events. Send, ack and receive stamps are on the collector's clock,
// the append stamp on the broker's; all Unix ms, -1 when unknown. Seq must be unique per (Topic, Partition, Instance)
// over the retention period.
type ProbeRow struct {
	// Cluster is the Kafka cluster the row is about (the cluster column; the writer stores "" as written).
	Cluster   string
	Topic     string
	Partition int32
	Seq       uint64
	// Instance is the replica of `tidemark run` that sent the probe (collector.probe.instance_id; migration 0005).
	Instance string
	BrokerID int32

	SendMs, AppendMs, AckMs, ReceiveMs int64

	IngestMs, DeliveryMs, RTTMs, E2EMs int64
	BrokerOffsetMs, UncertaintyMs      float64
	Status                             ProbeStatus
	Duplicates                         uint32
	Flags                              uint32
	TraceID                            string
}

// RecordTime is probe_events.record_time: the send time (else append time).
func (r *ProbeRow) RecordTime() time.Time {
	return time.UnixMilli(firstPlausible(r.SendMs, r.AppendMs, r.ReceiveMs)).UTC()
}

// LagRow is one partition of one group in one lag-exporter snapshot: a row of lag_snapshots. Offsets are Kafka's
// exclusive next positions; Committed is -1 when the group has no commit.
type LagRow struct {
	At        time.Time // snapshot time, collector clock (stored with millisecond precision)
	Cluster   string
	Group     string
	Topic     string
	Partition int32

	Committed, LogStart, End int64
	Lag                      int64 // max(0, End − max(Committed, LogStart))
	Expired                  int64 // offsets deleted unconsumed
	TimeLagMs                int64

	Status, PartitionStatus LagStatus
	Flags                   uint32

	// GroupType is the group's Kafka type (GroupClassic when zero); for a share group Committed is its share-partition
	// start offset. Subtopology and Internal mark a streams group's topics (KIP-1071).
	GroupType   GroupType
	Subtopology string
	Internal    bool
}

// GroupType is lag_snapshots.group_type: Kafka's group type (ListGroups v5).
type GroupType int8

// The group types, as lag_snapshots' Enum8 numbers them (0 is written as classic).
const (
	GroupClassic  GroupType = 1
	GroupConsumer GroupType = 2 // KIP-848
	GroupShare    GroupType = 3 // KIP-932
	GroupStreams  GroupType = 4 // KIP-1071
)

// ClockOffsetRow is one clock-offset estimate: a row of clock_offsets. The true offset (host clock − reference
// clock) lies in [LowerMs, UpperMs]; a causal envelope is open on one side (±Inf). For two-sided kinds that is
// OffsetMs ± UncertaintyMs; for an envelope OffsetMs is the bound and UncertaintyMs is +Inf (no half-width exists).
// EstimateMs is the point estimate to plot: OffsetMs, or for a one-sided envelope with a probe-measured minimum
// one-way delay MinDelayMs (> 0), the bound moved by it toward the open side (latency.Offset.Estimate).
type ClockOffsetRow struct {
	// Cluster is the Kafka cluster the row is about (the cluster column; the writer stores "" as written).
	Cluster       string
	At            time.Time
	Host          string
	Kind          ClockKind
	OffsetMs      float64
	UncertaintyMs float64
	Samples       uint32
	LowerMs       float64
	UpperMs       float64
	EstimateMs    float64
	MinDelayMs    float64
}

// Rows is what one Writer.Write call carries: any mix of the four row kinds, acknowledged together.
type Rows struct {
	Latency      []LatencyRow
	Probe        []ProbeRow
	Lag          []LagRow
	ClockOffsets []ClockOffsetRow
}

// Len is the total number of rows.
func (r *Rows) Len() int { return len(r.Latency) + len(r.Probe) + len(r.Lag) + len(r.ClockOffsets) }

// PlausibleMs reports whether v, read as Unix milliseconds, lies in [2000-01-01, 2100-01-01): inside ClickHouse's
// DateTime range and far from what a stamp in seconds, microseconds or nanoseconds reads as.
func PlausibleMs(v int64) bool { return v >= plausibleFromMs && v < plausibleToMs }

const (
	plausibleFromMs = 946_684_800_000   // 2000-01-01T00:00:00Z
	plausibleToMs   = 4_102_444_800_000 // 2100-01-01T00:00:00Z
)

// FallbackTime is the record time of a row none of whose stamps is plausible: 2000-01-01, a partition of its own
// that such rows share, so they stay visible (and countable) instead of scattering over 1970 or 2262.
func FallbackTime() time.Time { return time.UnixMilli(plausibleFromMs).UTC() }

func firstPlausible(vs ...int64) int64 {
	for _, v := range vs {
		if PlausibleMs(v) {
			return v
		}
	}
	return plausibleFromMs
}

// Estimated in-memory bytes per row: the fixed fields plus string headers; string contents are added per row.
const (
	latencyFixedBytes = 232
	probeFixedBytes   = 136
	lagFixedBytes     = 152
	clockFixedBytes   = 104
)

func (r *LatencyRow) size() int64 {
	return latencyFixedBytes + int64(len(r.Group)+len(r.Topic)+len(r.ProducerHost)+len(r.BrokerHost)+
		len(r.ConsumerHost)+len(r.TraceID)+len(r.SpanID))
}
func (r *ProbeRow) size() int64 {
	return probeFixedBytes + int64(len(r.Topic)+len(r.TraceID)+len(r.Instance))
}
func (r *LagRow) size() int64         { return lagFixedBytes + int64(len(r.Cluster)+len(r.Group)+len(r.Topic)) }
func (r *ClockOffsetRow) size() int64 { return clockFixedBytes + int64(len(r.Host)) }

// String forms, for logs and errors.
func (c ReplayClass) String() string {
	return enumName(int8(c), "unknown", "live", "replay", "backfill", "redelivery")
}
func (s Source) String() string { return enumName(int8(s), "unknown", "probe", "receipt", "tap") }
func (s LagStatus) String() string {
	return enumName(int8(s), "unknown", "OK", "WARN", "STALL", "STOP", "ERR", "REWIND")
}
func (k ClockKind) String() string {
	return enumName(int8(k), "unknown", "bracketed", "synced", "envelope")
}

func enumName(v int8, names ...string) string {
	if v >= 0 && int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("invalid(%d)", v)
}
