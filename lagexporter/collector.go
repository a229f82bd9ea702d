package lagexporter

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SnapshotSource is what the Collector reads: the latest snapshot and the exporter's health. *Loop implements it.
type SnapshotSource interface {
	Latest() *Snapshot
	Health() Health
}

// Health is the exporter's own health, as of the last cycle.
type Health struct {
	Cycles       uint64               // cycles run, successful or not
	Errors       map[ErrorKind]uint64 // cycle errors by kind, since start
	LastDuration time.Duration        // duration of the last cycle's cluster reads
	LastSuccess  time.Time            // end of the last cycle that published a snapshot; zero before the first
}

// Health returns a copy of the loop's health counters.
func (l *Loop) Health() Health {
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	errs := make(map[ErrorKind]uint64, len(h.errors))
	for k, v := range h.errors {
		errs[k] = v
	}
	return Health{Cycles: h.cycles, Errors: errs, LastDuration: h.lastDuration, LastSuccess: h.lastSuccess}
}

// Collector is a prometheus.Collector that mirrors the latest Snapshot as constant metrics (the client_golang pattern
// for state mirrored from elsewhere): a scrape only reads the immutable snapshot, never Kafka. Series of groups and
// partitions absent from the snapshot are absent from the scrape (case C15). Every metric is listed in
// docs/metrics.md; a test checks the two agree.
type Collector struct {
	cfg    *Config
	src    SnapshotSource
	d      descs
	compat *compatDescs
}

type descs struct {
	partLag, partRaw, partSeconds, partCommitted, partExpired, partFlag, partReplayBoundary  *prometheus.Desc
	topicLag, topicMax, topicSeconds, topicCommitted, topicExpired, topicUnknown, topicParts *prometheus.Desc
	groupLag, groupSeconds, groupStatus, groupState, groupMembers, groupSimple, memberInfo   *prometheus.Desc
	logStart, highWatermark, lastStable                                                      *prometheus.Desc
	cycles, errors, cycleDuration, lastSuccess, snapshotTime, groupPartitions                *prometheus.Desc
}

type compatDescs struct {
	lag, lagSum, current, currentSum, members, topicCurrent, topicOldest *prometheus.Desc
}

// NewCollector returns a collector for the snapshots of src, shaped by cfg (granularity, compatibility names).
func NewCollector(cfg *Config, src SnapshotSource) *Collector {
	gp := []string{"cluster", "group", "topic", "partition"}
	gt := []string{"cluster", "group", "topic"}
	g := []string{"cluster", "group"}
	tp := []string{"cluster", "topic", "partition"}
	n := prometheus.NewDesc
	c := &Collector{cfg: cfg, src: src, d: descs{
		partLag:            n("tidemark_lag_partition_offsets", "Effective consumer-group lag of a partition: records the group will still receive, max(0, End - first consumable unconsumed offset); End is the high watermark (read_uncommitted) or last stable offset (read_committed).", gp, nil),
		partRaw:            n("tidemark_lag_partition_raw_offsets", "Raw lag max(0, End - max(committed, log start)), emitted only where it differs from the effective lag (transaction markers, aborted or compacted records at the head of the backlog).", gp, nil),
		partSeconds:        n("tidemark_lag_partition_seconds", "Time lag of a partition: observation time minus the timestamp of the first unconsumed record; 0 when nothing is unconsumed. Absent when unknown.", gp, nil),
		partCommitted:      n("tidemark_lag_partition_committed_offset", "Committed offset (next offset to read) of the group on the partition; absent when the group has no commit there.", gp, nil),
		partExpired:        n("tidemark_lag_partition_expired_offsets", "Offsets between the committed offset and the log start, deleted before the group read them (retention, DeleteRecords); emitted only when > 0.", gp, nil),
		partFlag:           n("tidemark_lag_partition_flag", "1 for each flag set on a group-partition (no_commit, expired, ahead_of_end, control_records, lower_bound, estimated, stale, unavailable, replay); absent flags have no series.", append(gp[:4:4], "flag"), nil),
		partReplayBoundary: n("tidemark_lag_partition_replay_boundary_offset", "While the group replays after a rewind (flag replay), the committed offset before the rewind; replay ends when committed reaches it.", gp, nil),
		topicLag:           n("tidemark_lag_topic_offsets", "Sum of effective lag over the topic's partitions whose lag is known.", gt, nil),
		topicMax:           n("tidemark_lag_topic_max_offsets", "Largest effective partition lag of the group on the topic.", gt, nil),
		topicSeconds:       n("tidemark_lag_topic_seconds", "Largest known time lag of the group on the topic.", gt, nil),
		topicCommitted:     n("tidemark_lag_topic_committed_offsets", "Sum of committed offsets over the topic's partitions with a commit (partitions without one add nothing).", gt, nil),
		topicExpired:       n("tidemark_lag_topic_expired_offsets", "Sum of expired offsets (below the log start, never read) over the topic's partitions.", gt, nil),
		topicUnknown:       n("tidemark_lag_topic_unknown_partitions", "Partitions of the topic whose lag is unknown this cycle and therefore not in the sums (the sums are then lower bounds).", gt, nil),
		topicParts:         n("tidemark_lag_topic_partitions", "Partitions of the topic in the group's scope.", gt, nil),
		groupLag:           n("tidemark_lag_group_offsets", "Sum of effective lag over all the group's partitions whose lag is known.", g, nil),
		groupSeconds:       n("tidemark_lag_group_seconds", "Largest known time lag over the group's partitions.", g, nil),
		groupStatus:        n("tidemark_lag_group_status", "1 for the group's current status (OK, REWIND, WARN, STALL, STOP, ERR: Burrow-style window rules); one series per group.", []string{"cluster", "group", "status"}, nil),
		groupState:         n("tidemark_lag_group_state", "1 for the group's current state as the coordinator reports it (Stable, Empty, ...); one series per group.", []string{"cluster", "group", "state"}, nil),
		groupMembers:       n("tidemark_lag_group_members", "Number of members of the group.", g, nil),
		groupSimple:        n("tidemark_lag_group_simple_consumer", "1 when the group has no members but committed recently (assign(), Flink, Spark), else 0.", g, nil),
		memberInfo:         n("tidemark_lag_group_member_info", "1 per current member of the group (replaced on every membership change).", []string{"cluster", "group", "member_id", "client_id", "host"}, nil),
		logStart:           n("tidemark_partition_log_start_offset", "Earliest available offset of the partition.", tp, nil),
		highWatermark:      n("tidemark_partition_high_watermark_offset", "High watermark (next offset to be written) of the partition.", tp, nil),
		lastStable:         n("tidemark_partition_last_stable_offset", "Last stable offset of the partition (first offset of the oldest open transaction, or the high watermark).", tp, nil),
		cycles:             n("tidemark_lag_exporter_cycles_total", "Poll cycles run, successful or not.", []string{"cluster"}, nil),
		errors:             n("tidemark_lag_exporter_errors_total", "Failed parts of poll cycles, by kind of cluster read.", []string{"cluster", "kind"}, nil),
		cycleDuration:      n("tidemark_lag_exporter_cycle_duration_seconds", "Duration of the last poll cycle's cluster reads.", []string{"cluster"}, nil),
		lastSuccess:        n("tidemark_lag_exporter_last_success_timestamp_seconds", "Unix time at which the last successful cycle published its snapshot.", []string{"cluster"}, nil),
		snapshotTime:       n("tidemark_lag_exporter_snapshot_timestamp_seconds", "Unix time of the observation the served snapshot was computed from.", []string{"cluster"}, nil),
		groupPartitions:    n("tidemark_lag_exporter_group_partitions", "Group-partitions in the served snapshot.", []string{"cluster"}, nil),
	}}
	if cfg.KafkaExporterCompat {
		c.compat = &compatDescs{
			lag:          n("kafka_consumergroup_lag", "kafka_exporter compatible: effective lag of a consumer group on a partition.", []string{"consumergroup", "topic", "partition"}, nil),
			lagSum:       n("kafka_consumergroup_lag_sum", "kafka_exporter compatible: sum of lag of a consumer group on a topic.", []string{"consumergroup", "topic"}, nil),
			current:      n("kafka_consumergroup_current_offset", "kafka_exporter compatible: committed offset of a consumer group on a partition.", []string{"consumergroup", "topic", "partition"}, nil),
			currentSum:   n("kafka_consumergroup_current_offset_sum", "kafka_exporter compatible: sum of committed offsets of a consumer group on a topic.", []string{"consumergroup", "topic"}, nil),
			members:      n("kafka_consumergroup_members", "kafka_exporter compatible: number of members of a consumer group.", []string{"consumergroup"}, nil),
			topicCurrent: n("kafka_topic_partition_current_offset", "kafka_exporter compatible: high watermark of a partition.", []string{"topic", "partition"}, nil),
			topicOldest:  n("kafka_topic_partition_oldest_offset", "kafka_exporter compatible: log start offset of a partition.", []string{"topic", "partition"}, nil),
		}
	}
	return c
}

// Describe sends every descriptor the collector can emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.d
	for _, x := range []*prometheus.Desc{d.partLag, d.partRaw, d.partSeconds, d.partCommitted, d.partExpired, d.partFlag,
		d.partReplayBoundary, d.topicLag, d.topicMax, d.topicSeconds, d.topicCommitted, d.topicExpired, d.topicUnknown,
		d.topicParts, d.groupLag, d.groupSeconds, d.groupStatus, d.groupState, d.groupMembers, d.groupSimple,
		d.memberInfo, d.logStart, d.highWatermark, d.lastStable, d.cycles, d.errors, d.cycleDuration, d.lastSuccess,
		d.snapshotTime, d.groupPartitions} {
		ch <- x
	}
	if k := c.compat; k != nil {
		for _, x := range []*prometheus.Desc{k.lag, k.lagSum, k.current, k.currentSum, k.members, k.topicCurrent, k.topicOldest} {
			ch <- x
		}
	}
}

// Collect emits the latest snapshot and the health metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	cl := c.cfg.Cluster
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	h := c.src.Health()
	ch <- prometheus.MustNewConstMetric(c.d.cycles, prometheus.CounterValue, float64(h.Cycles), cl)
	for _, k := range ErrorKinds {
		ch <- prometheus.MustNewConstMetric(c.d.errors, prometheus.CounterValue, float64(h.Errors[k]), cl, string(k))
	}
	gauge(c.d.cycleDuration, h.LastDuration.Seconds(), cl)
	if !h.LastSuccess.IsZero() {
		gauge(c.d.lastSuccess, unixSeconds(h.LastSuccess), cl)
	}
	s := c.src.Latest()
	if s == nil {
		return
	}
	gauge(c.d.snapshotTime, unixSeconds(s.Time), cl)
	perPartition := c.cfg.Granularity == GranularityPartition
	var partLabels []string // "0", "1", ... reused across groups
	pl := func(p int32) string {
		for int(p) >= len(partLabels) {
			partLabels = append(partLabels, strconv.Itoa(len(partLabels)))
		}
		if p < 0 {
			return strconv.Itoa(int(p))
		}
		return partLabels[p]
	}
	n := 0
	for gi := range s.Groups {
		g := &s.Groups[gi]
		n += len(g.Partitions)
		gauge(c.d.groupLag, float64(g.Total.Lag), cl, g.Group)
		gauge(c.d.groupSeconds, g.Total.MaxTimeLag.Seconds(), cl, g.Group)
		gauge(c.d.groupStatus, 1, cl, g.Group, g.Status.String())
		if g.State != "" {
			gauge(c.d.groupState, 1, cl, g.Group, g.State)
		}
		gauge(c.d.groupMembers, float64(len(g.Members)), cl, g.Group)
		gauge(c.d.groupSimple, b2f(g.SimpleConsumer), cl, g.Group)
		for _, m := range g.Members {
			gauge(c.d.memberInfo, 1, cl, g.Group, m.MemberID, m.ClientID, m.Host)
		}
		for ti := range g.Topics {
			t := &g.Topics[ti]
			gauge(c.d.topicLag, float64(t.Lag), cl, g.Group, t.Topic)
			gauge(c.d.topicMax, float64(t.MaxLag), cl, g.Group, t.Topic)
			gauge(c.d.topicSeconds, t.MaxTimeLag.Seconds(), cl, g.Group, t.Topic)
			gauge(c.d.topicCommitted, float64(t.CommittedSum), cl, g.Group, t.Topic)
			gauge(c.d.topicExpired, float64(t.Expired), cl, g.Group, t.Topic)
			gauge(c.d.topicUnknown, float64(t.Unknown), cl, g.Group, t.Topic)
			gauge(c.d.topicParts, float64(t.Partitions), cl, g.Group, t.Topic)
			if c.compat != nil {
				gauge(c.compat.lagSum, float64(t.Lag), g.Group, t.Topic)
				gauge(c.compat.currentSum, float64(t.CommittedSum), g.Group, t.Topic)
			}
		}
		if c.compat != nil {
			gauge(c.compat.members, float64(len(g.Members)), g.Group)
		}
		if !perPartition {
			continue
		}
		for pi := range g.Partitions {
			p := &g.Partitions[pi]
			ps := pl(p.Partition)
			for i, name := range FlagNames {
				if p.Flags&(1<<i) != 0 {
					gauge(c.d.partFlag, 1, cl, g.Group, p.Topic, ps, name)
				}
			}
			if p.HasCommit {
				gauge(c.d.partCommitted, float64(p.Committed), cl, g.Group, p.Topic, ps)
				if c.compat != nil {
					gauge(c.compat.current, float64(p.Committed), g.Group, p.Topic, ps)
				}
			}
			if !p.Known {
				continue
			}
			gauge(c.d.partLag, float64(p.Lag), cl, g.Group, p.Topic, ps)
			if c.compat != nil {
				gauge(c.compat.lag, float64(p.Lag), g.Group, p.Topic, ps)
			}
			if p.TimeLagKnown {
				gauge(c.d.partSeconds, p.TimeLag.Seconds(), cl, g.Group, p.Topic, ps)
			}
			if p.RawLag != p.Lag {
				gauge(c.d.partRaw, float64(p.RawLag), cl, g.Group, p.Topic, ps)
			}
			if p.ExpiredOffsets > 0 {
				gauge(c.d.partExpired, float64(p.ExpiredOffsets), cl, g.Group, p.Topic, ps)
			}
			if p.Flags.Has(FlagReplay) {
				gauge(c.d.partReplayBoundary, float64(p.ReplayBoundary), cl, g.Group, p.Topic, ps)
			}
		}
	}
	gauge(c.d.groupPartitions, float64(n), cl)
	if !perPartition && c.compat == nil {
		return
	}
	for ti := range s.Topics {
		t := &s.Topics[ti]
		for _, p := range t.Partitions {
			if !p.Known() {
				continue
			}
			ps := pl(p.Partition)
			if perPartition {
				gauge(c.d.logStart, float64(p.LogStart), cl, t.Topic, ps)
				gauge(c.d.highWatermark, float64(p.HighWatermark), cl, t.Topic, ps)
				gauge(c.d.lastStable, float64(p.LastStable), cl, t.Topic, ps)
			}
			if c.compat != nil {
				gauge(c.compat.topicCurrent, float64(p.HighWatermark), t.Topic, ps)
				gauge(c.compat.topicOldest, float64(p.LogStart), t.Topic, ps)
			}
		}
	}
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
