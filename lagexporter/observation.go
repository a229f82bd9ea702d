package lagexporter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Observation is everything one poll cycle read from a cluster. It is the input of the pure model ([Evaluator]) and,
// one per line, the content of a timeline file (package timeline, docs/lag-timeline.md). Offsets are Kafka's
// exclusive "next" positions. No field ever holds a sentinel: a partition whose offsets could not be read carries
// Error, a partition without a committed offset is simply absent from GroupObservation.Offsets.
type Observation struct {
	// Time is when the cycle's reads finished, on the exporter's clock; it is the "now" of every time lag.
	Time    time.Time          `json:"time,omitzero"`
	Cluster string             `json:"cluster,omitempty"`
	Topics  []TopicObservation `json:"topics,omitempty"`
	Groups  []GroupObservation `json:"groups,omitempty"`
	Records []RecordProbe      `json:"records,omitempty"` // record reads answered in this cycle
	Errors  []CycleError       `json:"errors,omitempty"`
	// Failed is set when the cycle could not read even its topic metadata or group list (the kind of that read): the
	// loop published nothing, but the cycle and its errors still count. Timelines keep such cycles so that a recorded
	// incident replays with the same counters.
	Failed ErrorKind `json:"failed,omitempty"`
}

// TopicObservation is one topic's metadata and partition offsets.
type TopicObservation struct {
	Topic string `json:"topic"`
	// ID identifies the topic's incarnation (Kafka's topic id); a topic deleted and re-created under the same name has a
	// new ID, and every per-partition state (windows, caches, replay flags) of the old incarnation is dropped.
	ID            string                 `json:"id,omitempty"`
	TimestampType string                 `json:"timestamp_type,omitempty"` // "CreateTime" or "LogAppendTime", if known
	Partitions    []PartitionObservation `json:"partitions"`
	// Retention is the topic's deletion policy (DescribeConfigs), when known; nil when it could not be read.
	Retention *TopicRetention `json:"retention,omitempty"`
}

// TopicRetention is what decides when Kafka deletes a topic's records: cleanup.policy, retention.ms and
// retention.bytes (per partition), and the segment size limits, since Kafka deletes whole segments (a segment is
// eligible once its largest timestamp is older than retention.ms, or once the segments after it alone hold
// retention.bytes; oldest first).
type TopicRetention struct {
	// CleanupPolicy is Kafka's cleanup.policy: "delete", "compact" or "compact,delete". Without "delete" no record
	// is ever deleted by retention.
	CleanupPolicy string `json:"cleanup_policy"`
	// RetentionMs is retention.ms (-1: unlimited); RetentionBytes is retention.bytes per partition (-1: unlimited).
	RetentionMs    int64 `json:"retention_ms"`
	RetentionBytes int64 `json:"retention_bytes"`
	// SegmentMs and SegmentBytes are segment.ms and segment.bytes (0: unknown): one segment is the resolution of
	// deletion, and so the error bound of the retention margins.
	SegmentMs    int64 `json:"segment_ms,omitempty"`
	SegmentBytes int64 `json:"segment_bytes,omitempty"`
}

// Deletes reports whether retention deletes records of the topic at all (cleanup.policy contains "delete").
func (r *TopicRetention) Deletes() bool {
	if r == nil {
		return false
	}
	for _, p := range strings.Split(r.CleanupPolicy, ",") {
		if strings.TrimSpace(p) == "delete" {
			return true
		}
	}
	return false
}

// PartitionObservation is one partition's offsets as ListOffsets answered them.
type PartitionObservation struct {
	Partition int32 `json:"partition"`
	// Leader is the leader broker id, or -1 when the partition has no leader (offsets then come with Error).
	Leader        int32 `json:"leader"`
	LogStart      int64 `json:"log_start"`      // earliest available offset (ListOffsets -2)
	HighWatermark int64 `json:"high_watermark"` // ListOffsets -1, read_uncommitted
	LastStable    int64 `json:"last_stable"`    // ListOffsets -1, read_committed: first offset of the oldest open transaction, or HW
	// Error is set when the offsets could not be read this cycle; the numeric fields are then meaningless.
	Error string `json:"error,omitempty"`
	// ErrorCode classifies Error with Kafka's error name (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, ...) or one
	// of NETWORK (the leader could not be reached), TIMEOUT (the cycle deadline passed) or UNKNOWN. It labels the
	// per-partition error counter, so it must come from a small closed set.
	ErrorCode string `json:"error_code,omitempty"`
	// SizeBytes is the size of the partition's log on its leader (DescribeLogDirs), read only for topics whose
	// retention.bytes is finite; 0 when not read.
	SizeBytes int64 `json:"size_bytes,omitempty"`
}

// Known reports whether the partition's offsets were read this cycle.
func (p PartitionObservation) Known() bool { return p.Error == "" }

// UnmarshalJSON decodes a partition strictly: partition is required, and when no error is given log_start and
// high_watermark are required (a missing field must not silently read as offset 0). last_stable defaults to
// high_watermark (no open transaction); leader defaults to 0 (some broker).
func (p *PartitionObservation) UnmarshalJSON(b []byte) error {
	var aux struct {
		Partition     *int32 `json:"partition"`
		Leader        *int32 `json:"leader"`
		LogStart      *int64 `json:"log_start"`
		HighWatermark *int64 `json:"high_watermark"`
		LastStable    *int64 `json:"last_stable"`
		Error         string `json:"error"`
		ErrorCode     string `json:"error_code"`
		SizeBytes     int64  `json:"size_bytes"`
	}
	if err := strictUnmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Partition == nil || *aux.Partition < 0 {
		return fmt.Errorf("partition: required, >= 0")
	}
	*p = PartitionObservation{Partition: *aux.Partition, Error: aux.Error, ErrorCode: aux.ErrorCode, SizeBytes: aux.SizeBytes}
	if aux.Leader != nil {
		p.Leader = *aux.Leader
	}
	if aux.SizeBytes < 0 {
		return fmt.Errorf("partition %d: size_bytes must be >= 0, got %d", p.Partition, aux.SizeBytes)
	}
	if aux.Error != "" {
		return nil
	}
	if aux.LogStart == nil || aux.HighWatermark == nil {
		return fmt.Errorf("partition %d: log_start and high_watermark are required unless error is set", p.Partition)
	}
	p.LogStart, p.HighWatermark, p.LastStable = *aux.LogStart, *aux.HighWatermark, *aux.HighWatermark
	if aux.LastStable != nil {
		p.LastStable = *aux.LastStable
	}
	if p.LogStart < 0 || p.HighWatermark < p.LogStart || p.LastStable < p.LogStart || p.LastStable > p.HighWatermark {
		return fmt.Errorf("partition %d: need 0 <= log_start <= last_stable <= high_watermark, got %d, %d, %d",
			p.Partition, p.LogStart, p.LastStable, p.HighWatermark)
	}
	return nil
}

// GroupObservation is one group: its type, state and members (DescribeGroups, ConsumerGroupDescribe,
// ShareGroupDescribe or StreamsGroupDescribe, by type) and its position on each partition (OffsetFetch; for a share
// group DescribeShareGroupOffsets). A group whose commits come from clients that are not members (assign(), Flink,
// Spark) has no members and is still fully measured (case C14).
type GroupObservation struct {
	Group string `json:"group"`
	// GroupType is Kafka's group type (ListGroups v5, KIP-848): GroupClassic, GroupConsumer (KIP-848),
	// GroupShare (KIP-932) or GroupStreams (KIP-1071). Empty reads as classic (brokers before Kafka 3.7, old timelines).
	GroupType    string   `json:"group_type,omitempty"`
	State        string   `json:"state,omitempty"` // Stable, Empty, PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Dead
	ProtocolType string   `json:"protocol_type,omitempty"`
	Members      []Member `json:"members,omitempty"`
	// Epoch and AssignmentEpoch are the group epoch and the epoch of its target assignment (KIP-848, share and
	// streams groups; 0 for classic groups). A member whose Epoch is below AssignmentEpoch is still reconciling.
	Epoch           int32 `json:"epoch,omitempty"`
	AssignmentEpoch int32 `json:"assignment_epoch,omitempty"`
	// Offsets are the group's positions: committed offsets, or for a share group its share-partition start offsets.
	Offsets []CommittedOffset `json:"offsets,omitempty"`
	// Reset is the group's own reset policy where Kafka keeps it (a share group's share.auto.offset.reset group
	// config, read with DescribeConfigs); empty when unknown. A groups[] rule with a reset overrides it.
	Reset Reset `json:"reset,omitempty"`
	// Streams maps each topic a streams group reads to its subtopology and whether it is internal (KIP-1071
	// topology; nil for other types, and while the application's topology is not initialized).
	Streams map[string]StreamsTopic `json:"streams,omitempty"`
	// Error is set when the group's committed offsets could not be read this cycle.
	Error string `json:"error,omitempty"`
}

// Kafka's group types (ListGroups v5). Each is described with its own RPC; DescribeGroups answers only classic groups.
const (
	GroupClassic  = "classic"  // JoinGroup/SyncGroup clients (group.protocol=classic), or commits only
	GroupConsumer = "consumer" // KIP-848 consumer protocol (group.protocol=consumer)
	GroupShare    = "share"    // KIP-932 share group: records are acquired and acknowledged, not committed
	GroupStreams  = "streams"  // KIP-1071 streams rebalance protocol (group.protocol=streams)
)

// GroupTypes lists the group types, the values of the group_type field and label.
var GroupTypes = []string{GroupClassic, GroupConsumer, GroupShare, GroupStreams}

// Type returns the group's type, GroupClassic when unset.
func (g *GroupObservation) Type() string {
	if g.GroupType == "" {
		return GroupClassic
	}
	return g.GroupType
}

// StreamsTopic is how a streams group uses a topic it reads (from its topology, KIP-1071).
type StreamsTopic struct {
	// Subtopology is the id of the subtopology that reads the topic ("0", "1", ...).
	Subtopology string `json:"subtopology"`
	// Internal is true for a repartition topic the application creates and writes itself; false for a user topic.
	Internal bool `json:"internal,omitempty"`
}

// Member is one group member and the partitions assigned to it: decoded from the consumer protocol assignment
// (classic groups), as ConsumerGroupDescribe or ShareGroupDescribe list them, or for a streams member the partitions
// its active tasks read.
type Member struct {
	MemberID   string             `json:"member_id"`
	ClientID   string             `json:"client_id,omitempty"`
	Host       string             `json:"host,omitempty"`
	Assignment map[string][]int32 `json:"assignment,omitempty"` // topic -> partitions owned now
	// Target is the coordinator's target assignment (KIP-848 and streams groups): partitions the member will own
	// once revocations elsewhere complete. They are in the group's scope before their first commit (case C10).
	Target map[string][]int32 `json:"target_assignment,omitempty"`
	Epoch  int32              `json:"epoch,omitempty"` // member epoch (KIP-848, share and streams groups)
}

// CommittedOffset is a group's committed position on one partition: the offset of the next record to read. Kafka's
// "no commit" answer (-1) is never represented: such partitions are absent.
//
// For a share group (KIP-932) the position is the share-partition start offset (SPSO): the earliest record whose
// delivery is not complete; every record before it is acknowledged or archived, some after it may be too. ShareLag is
// then the broker's own share-partition lag (KIP-1226, Kafka 4.2+): End − SPSO − records after the SPSO already
// acknowledged or archived; nil when the broker does not compute it. An uninitialized share-partition (no share
// consumer fetched it yet) is absent, like a partition without a commit.
type CommittedOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// CommitTime is when the commit was made, if the source knows it (zero otherwise); the live loop substitutes the
	// first time it saw the current offset.
	CommitTime time.Time `json:"commit_time,omitzero"`
	ShareLag   *int64    `json:"share_lag,omitempty"`
}

// UnmarshalJSON decodes a committed offset strictly: topic, partition and a non-negative offset are required (a -1
// "no commit" sentinel is an error: omit the partition instead).
func (c *CommittedOffset) UnmarshalJSON(b []byte) error {
	var aux struct {
		Topic      string    `json:"topic"`
		Partition  *int32    `json:"partition"`
		Offset     *int64    `json:"offset"`
		CommitTime time.Time `json:"commit_time"`
		ShareLag   *int64    `json:"share_lag"`
	}
	if err := strictUnmarshal(b, &aux); err != nil {
		return err
	}
	if aux.Topic == "" || aux.Partition == nil || aux.Offset == nil {
		return fmt.Errorf("committed offset: topic, partition and offset are required")
	}
	if *aux.Offset < 0 {
		return fmt.Errorf("committed offset %s/%d: offset %d is a sentinel, omit partitions without a commit",
			aux.Topic, *aux.Partition, *aux.Offset)
	}
	if aux.ShareLag != nil && *aux.ShareLag < 0 {
		return fmt.Errorf("committed offset %s/%d: share_lag %d is a sentinel, omit it when unknown",
			aux.Topic, *aux.Partition, *aux.ShareLag)
	}
	*c = CommittedOffset{Topic: aux.Topic, Partition: *aux.Partition, Offset: *aux.Offset, CommitTime: aux.CommitTime,
		ShareLag: aux.ShareLag}
	return nil
}

// Isolation is a group's isolation level, which decides its End offset. The broker does not expose it, so it comes
// from per-group configuration ([GroupRule]).
type Isolation string

// The isolation levels.
const (
	ReadUncommitted Isolation = "read_uncommitted" // End = high watermark; aborted records are delivered
	ReadCommitted   Isolation = "read_committed"   // End = last stable offset; aborted records are skipped
)

// OrDefault returns i, or ReadUncommitted (Kafka's default isolation level) when i is empty.
func (i Isolation) OrDefault() Isolation {
	if i == "" {
		return ReadUncommitted
	}
	return i
}

// RecordProbe is the answer to "what is the first consumable record at or after Offset": one small fetch at a group's
// first unconsumed position (Fetch with the group's isolation level). Control records (transaction markers) and, for
// read_committed, aborted records are not consumable. It is a fact about an immutable log, cached by (topic
// incarnation, partition, offset, isolation).
type RecordProbe struct {
	Topic     string    `json:"topic"`
	TopicID   string    `json:"topic_id,omitempty"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Isolation Isolation `json:"isolation,omitempty"`
	// FirstOffset is the first consumable record at or after Offset, or -1 when none was found below ScannedTo.
	FirstOffset int64 `json:"first_offset"`
	// ScannedTo is the exclusive end of the range the fetch covered: [Offset, ScannedTo) holds no consumable record
	// before FirstOffset (or none at all when FirstOffset is -1).
	ScannedTo int64 `json:"scanned_to"`
	// TimestampOffset is the first record at or after FirstOffset whose timestamp is valid (not -1 / NO_TIMESTAMP),
	// and Timestamp its timestamp; -1 and zero when none was found.
	TimestampOffset int64     `json:"timestamp_offset"`
	Timestamp       time.Time `json:"timestamp,omitzero"`
	// Gap is true when offsets in [Offset, FirstOffset) are missing for another reason than transaction control or
	// aborted records (log compaction removed them); the time lag is then a lower bound.
	Gap bool `json:"gap,omitempty"`
	// GapOffsets is how many offsets of [Offset, FirstOffset) (of [Offset, ScannedTo) when FirstOffset is -1) no
	// record holds: compacted away. The rest of that range is transaction markers and aborted records.
	GapOffsets int64 `json:"gap_offsets,omitempty"`
	// MissingTimestamps and WrongUnitTimestamps count the records from FirstOffset to TimestampOffset whose timestamp
	// was skipped as invalid (ClassifyRecordTimestamp): no timestamp (-1, or <= 0 ms), or one in the wrong unit.
	MissingTimestamps   int `json:"missing_timestamps,omitempty"`
	WrongUnitTimestamps int `json:"wrong_unit_timestamps,omitempty"`
	// AppendClock is set when Timestamp is a LogAppendTime: the appending broker's clock stamped it, not the
	// exporter's (nil for CreateTime and when no timestamp was found).
	AppendClock *AppendClock `json:"append_clock,omitempty"`
	Error       string       `json:"error,omitempty"`
}

// AppendClock says whose clock stamped a LogAppendTime and how far that clock is from the exporter's, so that the
// time lag is measured on one clock (docs/lag.md, "Time lag across a failover"). A record's LogAppendTime is the
// clock of the broker that appended it: the leader of its batch's partition leader epoch, which after a failover is
// not the partition's leader any more.
type AppendClock struct {
	// Broker is the broker that appended the record (the leader of the batch's epoch), -1 when not known.
	Broker int32 `json:"broker"`
	// Known: Offset (broker clock − exporter clock) and its Uncertainty are the collector's probe-bracketed estimate
	// for Broker, read in this cycle. Without it the time lag is flagged append_clock_uncorrected.
	Known       bool          `json:"known,omitempty"`
	Offset      time.Duration `json:"offset,omitempty"`
	Uncertainty time.Duration `json:"uncertainty,omitempty"`
}

// BrokerClocks answers a broker's clock offset from the exporter's clock (broker − exporter) at a time, and its
// uncertainty; ok is false when it is not known (the collector's probes have not bracketed that broker).
type BrokerClocks func(broker int32, at time.Time) (offset, uncertainty time.Duration, ok bool)

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
