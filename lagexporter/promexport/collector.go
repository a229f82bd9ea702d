package promexport

import (
	"fmt"
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/lagexporter"
)

// SnapshotSource is what the Collector reads: the latest snapshot and the exporter's health.
// *lagexporter.Loop implements it.
type SnapshotSource interface {
	Latest() *lagexporter.Snapshot
	Health() lagexporter.Health
}

// ActiveReporter is a SnapshotSource of a replica that may be standby (lagexporter.ActiveSource): the collector then
// emits tidemark_lag_exporter_active, and a standby's Latest is nil, so it serves the health series only.
type ActiveReporter interface {
	Active() bool
}

// Collector is a prometheus.Collector that mirrors the latest lagexporter.Snapshot as constant metrics (the
// client_golang pattern for state mirrored from elsewhere): a scrape only reads the immutable snapshot, never Kafka.
// Series of groups and partitions absent from the snapshot are absent from the scrape (case C15). Every metric is
// listed in docs/metrics.md; a test checks the two agree.
//
// For large clusters (about 100,000 group-partitions and more) building hundreds of thousands of constant metrics per
// scrape is slow; Handler serves the same series rendered once per snapshot (see handler.go).
type Collector struct {
	cfg      *lagexporter.Config
	src      SnapshotSource
	families []*family
	f        fams
}

// family is one metric family: its name, help, type and label names, and the prometheus.Desc built from them.
type family struct {
	name, help string
	counter    bool
	labels     []string
	desc       *prometheus.Desc
	idx        int
	order      []int // label indexes sorted by label name (the exposition's label order)
	// pre holds, per label in order, the constant text before its value: `name{label="` for the first, `",label="`
	// after (appendSeries writes a series line from these and the values alone).
	pre []string
}

type fams struct {
	partLag, partRaw, partSeconds, partCommitted, partExpired, partFlag, partReplayBoundary  *family
	topicLag, topicMax, topicSeconds, topicCommitted, topicExpired, topicUnknown, topicParts *family
	groupLag, groupSeconds, groupStatus, groupState, groupMembers, groupSimple, memberInfo   *family
	logStart, highWatermark, lastStable                                                      *family
	cycles, errors, cycleDuration, lastSuccess, snapshotTime, groupPartitions                *family
	active                                                                                   *family // ActiveReporter sources only
	// anomalies as numbers, partial failure, retention risk, catch-up
	partAhead, partControl, partCompacted, partStale, partRetentionSeconds, partRetentionBytes *family
	topicUnassigned, topicUnreadDeleted, topicRetentionSeconds, topicRetentionBytes            *family
	groupReplaying, groupCatchUp, openTxn, endDecreases, invalidTimestamps, partitionErrors    *family
	evalDuration, requests                                                                     *family
	// Kafka 4 group types
	groupInfo, streamsTopic, unsupported *family
	// commits a Stable group left on partitions it no longer owns (flag unassigned): no per-partition lag series
	staleCommit, staleCommitAge *family
	// kafka_exporter compatibility names; nil unless lagexporter.Config.KafkaExporterCompat
	kLag, kLagSum, kCurrent, kCurrentSum, kMembers, kTopicCurrent, kTopicOldest *family
}

// Register registers a Collector for src's snapshots (a *lagexporter.Loop, or a lagexporter.ActiveSource on a
// replica that may be standby) with reg (never the default registry outside cmd).
func Register(reg prometheus.Registerer, cfg *lagexporter.Config, src SnapshotSource) error {
	if err := reg.Register(NewCollector(cfg, src)); err != nil {
		return fmt.Errorf("register lag collector: %w", err)
	}
	return nil
}

// NewCollector returns a collector for the snapshots of src, shaped by cfg (granularity, compatibility names). The
// families are defined in Describe order, which is the exposition's order of families. The body is one flat list of
// metric definitions; it is easier to read whole.
func NewCollector(cfg *lagexporter.Config, src SnapshotSource) *Collector {
	gp := []string{"cluster", "group", "topic", "partition"}
	gt := []string{"cluster", "group", "topic"}
	g := []string{"cluster", "group"}
	tp := []string{"cluster", "topic", "partition"}
	cl := []string{"cluster"}
	c := &Collector{cfg: cfg, src: src}
	n := c.newFamily
	counter := func(f *family) *family { f.counter = true; return f }
	c.f = fams{
		partLag:            n("tidemark_lag_partition_offsets", "Effective consumer-group lag of a partition: records the group will still receive, max(0, End - first consumable unconsumed offset); End is the high watermark (read_uncommitted) or last stable offset (read_committed).", gp),
		partRaw:            n("tidemark_lag_partition_raw_offsets", "Raw lag max(0, End - max(committed, log start)), emitted only where it differs from the effective lag (transaction markers, aborted or compacted records at the head of the backlog).", gp),
		partSeconds:        n("tidemark_lag_partition_seconds", "Time lag of a partition: observation time minus the timestamp of the first unconsumed record; 0 when nothing is unconsumed. Absent when unknown.", gp),
		partCommitted:      n("tidemark_lag_partition_committed_offset", "Committed offset (next offset to read) of the group on the partition; absent when the group has no commit there.", gp),
		partExpired:        n("tidemark_lag_partition_expired_offsets", "Offsets between the committed offset and the log start, deleted before the group read them (retention, DeleteRecords); emitted only when > 0.", gp),
		partFlag:           n("tidemark_lag_partition_flag", "1 for each flag set on a group-partition (no_commit, expired, ahead_of_end, control_records, lower_bound, estimated, stale, unavailable, replay, future_timestamp, end_offset_decreased, unassigned, compacted, lag_upper_bound, append_clock_corrected, append_clock_uncorrected); absent flags have no series.", append(gp[:4:4], "flag")),
		partReplayBoundary: n("tidemark_lag_partition_replay_boundary_offset", "While the group replays after a rewind (flag replay), the committed offset before the rewind; replay ends when committed reaches it.", gp),
		topicLag:           n("tidemark_lag_topic_offsets", "Sum of effective lag over the topic's partitions whose lag is known.", gt),
		topicMax:           n("tidemark_lag_topic_max_offsets", "Largest effective partition lag of the group on the topic.", gt),
		topicSeconds:       n("tidemark_lag_topic_seconds", "Largest known time lag of the group on the topic.", gt),
		topicCommitted:     n("tidemark_lag_topic_committed_offsets", "Sum of committed offsets over the topic's partitions with a commit (partitions without one add nothing).", gt),
		topicExpired:       n("tidemark_lag_topic_expired_offsets", "Sum of expired offsets (below the log start, never read) over the topic's partitions.", gt),
		topicUnknown:       n("tidemark_lag_topic_unknown_partitions", "Partitions of the topic whose lag is unknown or stale this cycle and therefore not in the sums (the sums are then lower bounds).", gt),
		topicParts:         n("tidemark_lag_topic_partitions", "Partitions of the topic in the group's scope.", gt),
		groupLag:           n("tidemark_lag_group_offsets", "Sum of effective lag over all the group's partitions whose lag is known.", g),
		groupSeconds:       n("tidemark_lag_group_seconds", "Largest known time lag over the group's partitions.", g),
		groupStatus:        n("tidemark_lag_group_status", "1 for the group's current status (OK, REWIND, AHEAD, WARN, STALL, STOP, ERR: Burrow-style window rules); one series per group.", []string{"cluster", "group", "status"}),
		groupState:         n("tidemark_lag_group_state", "1 for the group's current state as the coordinator reports it (Stable, Empty, ...); one series per group.", []string{"cluster", "group", "state"}),
		groupMembers:       n("tidemark_lag_group_members", "Number of members of the group.", g),
		groupSimple:        n("tidemark_lag_group_simple_consumer", "1 when the group has no members but committed recently (assign(), Flink, Spark), else 0.", g),
		memberInfo:         n("tidemark_lag_group_member_info", "1 per current member of the group (replaced on every membership change).", []string{"cluster", "group", "member_id", "client_id", "host"}),
		logStart:           n("tidemark_partition_log_start_offset", "Earliest available offset of the partition.", tp),
		highWatermark:      n("tidemark_partition_high_watermark_offset", "High watermark (next offset to be written) of the partition.", tp),
		lastStable:         n("tidemark_partition_last_stable_offset", "Last stable offset of the partition (first offset of the oldest open transaction, or the high watermark).", tp),
		cycles:             counter(n("tidemark_lag_exporter_cycles_total", "Poll cycles run, successful or not.", cl)),
		errors:             counter(n("tidemark_lag_exporter_errors_total", "Failed parts of poll cycles, by kind of cluster read.", []string{"cluster", "kind"})),
		cycleDuration:      n("tidemark_lag_exporter_cycle_duration_seconds", "Duration of the last poll cycle's cluster reads.", cl),
		evalDuration:       n("tidemark_lag_exporter_evaluation_duration_seconds", "Duration of the last published cycle's evaluation (status rules, aggregates) after its cluster reads.", cl),
		requests:           counter(n("tidemark_lag_exporter_kafka_requests_total", "Kafka requests the lag exporter sent.", cl)),
		lastSuccess:        n("tidemark_lag_exporter_last_success_timestamp_seconds", "Unix time at which the last successful cycle published its snapshot.", cl),
		snapshotTime:       n("tidemark_lag_exporter_snapshot_timestamp_seconds", "Unix time of the observation the served snapshot was computed from.", cl),
		groupPartitions:    n("tidemark_lag_exporter_group_partitions", "Group-partitions in the served snapshot.", cl),
		active:             n("tidemark_lag_exporter_active", "1 while this replica is the cluster's active lag exporter (it holds the election's lease, or there is no election), 0 while standby; a standby serves no lag series.", cl),

		partAhead:             n("tidemark_lag_partition_ahead_offsets", "Committed offset minus End when the commit is past End (flag ahead_of_end); the lag stays 0. Emitted only when > 0.", gp),
		partControl:           n("tidemark_lag_partition_control_offsets", "Transaction markers and (read_committed) aborted records at the head of the backlog: the part of raw minus effective lag that is not compaction. Emitted only when > 0.", gp),
		partCompacted:         n("tidemark_lag_partition_compacted_offsets", "Offsets at the head of the backlog removed by log compaction (flag compacted; the time lag is then a lower bound). Emitted only when > 0.", gp),
		partStale:             n("tidemark_lag_partition_stale_seconds", "While the partition is stale (its offsets or the group's commits could not be read), seconds since the values shown were read.", gp),
		partRetentionSeconds:  n("tidemark_lag_partition_retention_margin_seconds", "Seconds left before retention.ms makes the first unconsumed record eligible for deletion: retention.ms minus time lag, at least 0 (a lower bound by up to segment.ms). Emitted with lag, a known time lag and delete retention.", gp),
		partRetentionBytes:    n("tidemark_lag_partition_retention_margin_bytes", "Bytes producers may still append before retention.bytes reaches the first unconsumed record: retention.bytes minus the unconsumed bytes, at least 0 (a lower bound by up to segment.bytes). Emitted with lag and a finite retention.bytes.", gp),
		topicUnassigned:       n("tidemark_lag_topic_unassigned_committed_partitions", "Partitions with commits that the Stable group's members are not assigned and nobody commits on (stale commits, flag unassigned); not in the sums.", gt),
		topicUnreadDeleted:    counter(n("tidemark_lag_topic_unread_records_deleted_total", "Records deleted by retention or DeleteRecords below the group's committed offset, i.e. lost unread, counted as the log start moved past them.", gt)),
		topicRetentionSeconds: n("tidemark_lag_topic_retention_margin_seconds", "Smallest retention margin in seconds over the topic's partitions that have one and are not replaying.", gt),
		topicRetentionBytes:   n("tidemark_lag_topic_retention_margin_bytes", "Smallest retention margin in bytes over the topic's partitions that have one and are not replaying.", gt),
		groupReplaying:        n("tidemark_lag_group_replaying", "1 while some partition of the group replays after an offset rewind (flag replay), else 0; beside the status, which keeps judging the group's health.", g),
		groupCatchUp:          n("tidemark_lag_group_catch_up_seconds", "Estimated seconds until the group's lag reaches 0 at the rates of the status window (+Inf when the lag does not fall, 0 when caught up); absent until the window has two samples.", g),
		openTxn:               n("tidemark_partition_open_transaction_offsets", "High watermark minus last stable offset: offsets a read_committed group cannot consume until the oldest open transaction ends.", tp),
		endDecreases:          counter(n("tidemark_topic_end_offset_decreases_total", "Partitions of the topic whose high watermark or last stable offset was read lower than the time before, in the same topic incarnation (truncation after an unclean leader election, stale offsets); not a consumer rewind.", []string{"cluster", "topic"})),
		invalidTimestamps:     counter(n("tidemark_lag_exporter_invalid_timestamps_total", "Record timestamps the exporter met and did not use for a time lag, by reason: missing (-1 or <= 0 ms), wrong_unit (seconds or microseconds written as milliseconds), future (after the observation time).", []string{"cluster", "reason"})),
		partitionErrors:       counter(n("tidemark_lag_exporter_partition_errors_total", "Consecutive cycles in which the partition's offsets could not be read, by Kafka error code; only partitions failing now have a series.", []string{"cluster", "topic", "partition", "code"})),

		groupInfo:      n("tidemark_lag_group_info", "1 per group, naming its Kafka group type (classic, consumer = KIP-848, share = KIP-932, streams = KIP-1071); join on (cluster, group) to select any lag series by type.", []string{"cluster", "group", "group_type"}),
		streamsTopic:   n("tidemark_lag_streams_topic_info", "1 per topic a streams group (KIP-1071) reads: the subtopology reading it and whether it is an internal repartition topic (internal=\"true\"); join on (cluster, group, topic) to show an application's lag per subtopology.", []string{"cluster", "group", "topic", "subtopology", "internal"}),
		staleCommit:    n("tidemark_lag_stale_commit_offset", "Committed offset a Stable group left on a partition none of its members is assigned and nobody commits on (flag unassigned, Burrow #854); such a partition has no lag, time-lag, committed or kafka_exporter series, only this one and its age.", gp),
		staleCommitAge: n("tidemark_lag_stale_commit_age_seconds", "Seconds since the stale commit of tidemark_lag_stale_commit_offset was made (or, for a commit older than the exporter, since the exporter first saw it).", gp),
		unsupported:    n("tidemark_lag_exporter_unsupported_rpc", "1 per group RPC some broker could not answer since start (e.g. ShareGroupDescribe before Kafka 4.1): groups of that type are listed without it.", []string{"cluster", "rpc"}),
	}
	if cfg.KafkaExporterCompat {
		c.f.kLag = n("kafka_consumergroup_lag", "kafka_exporter compatible: effective lag of a consumer group on a partition.", []string{"consumergroup", "topic", "partition"})
		c.f.kLagSum = n("kafka_consumergroup_lag_sum", "kafka_exporter compatible: sum of lag of a consumer group on a topic.", []string{"consumergroup", "topic"})
		c.f.kCurrent = n("kafka_consumergroup_current_offset", "kafka_exporter compatible: committed offset of a consumer group on a partition.", []string{"consumergroup", "topic", "partition"})
		c.f.kCurrentSum = n("kafka_consumergroup_current_offset_sum", "kafka_exporter compatible: sum of committed offsets of a consumer group on a topic.", []string{"consumergroup", "topic"})
		c.f.kMembers = n("kafka_consumergroup_members", "kafka_exporter compatible: number of members of a consumer group.", []string{"consumergroup"})
		c.f.kTopicCurrent = n("kafka_topic_partition_current_offset", "kafka_exporter compatible: high watermark of a partition.", []string{"topic", "partition"})
		c.f.kTopicOldest = n("kafka_topic_partition_oldest_offset", "kafka_exporter compatible: log start offset of a partition.", []string{"topic", "partition"})
	}
	return c
}

// newFamily defines the gauge family name with help text and label names labels as the collector's next family,
// with its descriptor and the constant text of its series lines (family.order, family.pre).
func (c *Collector) newFamily(name, help string, labels []string) *family {
	f := &family{name: name, help: help, labels: labels, desc: prometheus.NewDesc(name, help, labels, nil), idx: len(c.families)}
	for i := range labels {
		f.order = append(f.order, i)
	}
	sort.Slice(f.order, func(a, b int) bool { return labels[f.order[a]] < labels[f.order[b]] })
	for k, i := range f.order {
		sep := `",`
		if k == 0 {
			sep = name + "{"
		}
		f.pre = append(f.pre, sep+labels[i]+`="`)
	}
	c.families = append(c.families, f)
	return f
}

// Describe sends every descriptor the collector can emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range c.families {
		ch <- f.desc
	}
}

// Collect emits the latest snapshot and the health metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.emit(c.src.Latest(), c.src.Health(), func(f *family, v float64, lvs []string) {
		t := prometheus.GaugeValue
		if f.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(f.desc, t, v, lvs...)
	})
}
