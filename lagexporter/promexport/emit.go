package promexport

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// emit produces every series of snapshot s (nil: health only) and health h through sink. It is the single definition
// of the exposed series, shared by Collect and the pre-rendering Handler.
//
// sink must not keep lvs past the call: it is one buffer, refilled for every series (a variadic call through a
// function value would allocate a slice per series, 1.8M per rendering at 500k group-partitions).
func (c *Collector) emit(s *lagexporter.Snapshot, h lagexporter.Health, sink func(f *family, v float64, lvs []string)) {
	var lb [5]string
	e := &emission{f: &c.f, cl: c.cfg.Cluster, sink: sink, lb: &lb, compat: c.cfg.KafkaExporterCompat,
		perPartition: c.cfg.Granularity == lagexporter.GranularityPartition,
		lagOnly:      c.cfg.Granularity == lagexporter.GranularityPartitionLag}
	e.health(h, c.src)
	if s == nil {
		return
	}
	e.snapshot(s)
}

// emission is one run of emit: the collector's families and shape, the sink, and the buffers it reuses. Its add is
// a method, not a closure, so that its variadic label values stay on the caller's stack; lb is an array of its own,
// so that only it goes to the heap (sink receives it), not the emission with the caller's sink.
type emission struct {
	f            *fams
	cl           string // the cluster label value
	sink         func(f *family, v float64, lvs []string)
	compat       bool // kafka_exporter compatible names too
	perPartition bool // granularity partition
	// lagOnly (partition_lag): per partition the lag alone, per topic the lag sum, per group lag, time lag, status and
	// the group-type info (with a streams group's topic info, so that the per-type and per-subtopology joins still work)
	lagOnly    bool
	lb         *[5]string // the label values of the series being emitted, handed to sink
	partLabels []string   // "0", "1", ... shared by every group
}

// add emits one series of f with value v and label values lvs, in f's label order.
func (e *emission) add(f *family, v float64, lvs ...string) { e.sink(f, v, e.lb[:copy(e.lb[:], lvs)]) }

// partLabel returns the label value of partition p; those of partitions 0 to p are formatted once per emission.
func (e *emission) partLabel(p int32) string {
	if p < 0 {
		return strconv.Itoa(int(p))
	}
	for int(p) >= len(e.partLabels) {
		e.partLabels = append(e.partLabels, strconv.Itoa(len(e.partLabels)))
	}
	return e.partLabels[p]
}

// health emits the exporter's own series: cycles, errors by kind, invalid timestamps by problem, the durations of
// the last cycle, Kafka requests, the replica's activity when src reports it, the last success once there was one,
// and at partition and partition_lag granularity the failing partitions' error counts.
func (e *emission) health(h lagexporter.Health, src SnapshotSource) {
	f, cl := e.f, e.cl
	e.add(f.cycles, float64(h.Cycles), cl)
	for _, k := range lagexporter.ErrorKinds {
		e.add(f.errors, float64(h.Errors[k]), cl, string(k))
	}
	for _, r := range lagexporter.TimestampProblems {
		e.add(f.invalidTimestamps, float64(h.InvalidTimestamps[r]), cl, string(r))
	}
	e.add(f.cycleDuration, h.LastDuration.Seconds(), cl)
	e.add(f.evalDuration, h.LastEvaluation.Seconds(), cl)
	e.add(f.requests, float64(h.Requests), cl)
	if ar, ok := src.(ActiveReporter); ok {
		e.add(f.active, b2f(ar.Active()), cl)
	}
	if !h.LastSuccess.IsZero() {
		e.add(f.lastSuccess, unixSeconds(h.LastSuccess), cl)
	}
	if e.perPartition || e.lagOnly {
		e.partitionErrors(h.PartitionErrors)
	}
}

// partitionErrors emits the error count of every failing partition, sorted by topic, partition and error code.
func (e *emission) partitionErrors(errs map[lagexporter.PartitionErrorKey]uint64) {
	keys := make([]lagexporter.PartitionErrorKey, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b lagexporter.PartitionErrorKey) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Code, b.Code))
	})
	for _, k := range keys {
		e.add(e.f.partitionErrors, float64(errs[k]), e.cl, k.Topic, strconv.Itoa(int(k.Partition)), k.Code)
	}
}

// snapshot emits the series of snapshot s: its time and the RPCs brokers could not answer, every group's series, the
// number of group-partitions, and the topics' partition offsets.
func (e *emission) snapshot(s *lagexporter.Snapshot) {
	e.add(e.f.snapshotTime, unixSeconds(s.Time), e.cl)
	for _, rpc := range s.Unsupported {
		e.add(e.f.unsupported, 1, e.cl, rpc)
	}
	n := 0
	for gi := range s.Groups {
		g := &s.Groups[gi]
		n += len(g.Partitions)
		e.group(s, g)
	}
	e.add(e.f.groupPartitions, float64(n), e.cl)
	e.topicOffsets(s)
}

// group emits group g's series: its lag, time lag, status and type; then at partition_lag granularity only its
// topic and partition lags (groupLagOnly); else its state and members (groupState), its topics' aggregates
// (groupTopic) and at partition granularity its partitions (groupPartition).
func (e *emission) group(s *lagexporter.Snapshot, g *lagexporter.GroupLag) {
	f, cl := e.f, e.cl
	e.add(f.groupLag, float64(g.Total.Lag), cl, g.Group)
	e.add(f.groupSeconds, g.Total.MaxTimeLag.Seconds(), cl, g.Group)
	e.add(f.groupStatus, 1, cl, g.Group, g.Status.String())
	e.add(f.groupInfo, 1, cl, g.Group, groupType(g))
	if e.lagOnly {
		e.groupLagOnly(s, g)
		return
	}
	e.groupState(g)
	for ti := range g.Topics {
		e.groupTopic(g, &g.Topics[ti])
	}
	if !e.perPartition {
		return
	}
	for pi := range g.Partitions {
		e.groupPartition(s, g, &g.Partitions[pi])
	}
}

// groupLagOnly emits group g's series of the partition_lag granularity: per topic its streams info and lag sum, per
// partition with a known lag that lag; an unassigned partition has only its stale commit's series.
func (e *emission) groupLagOnly(s *lagexporter.Snapshot, g *lagexporter.GroupLag) {
	f, cl := e.f, e.cl
	for ti := range g.Topics {
		t := &g.Topics[ti]
		if t.Subtopology != "" {
			e.add(f.streamsTopic, 1, cl, g.Group, t.Topic, t.Subtopology, strconv.FormatBool(t.Internal))
		}
		e.add(f.topicLag, float64(t.Lag), cl, g.Group, t.Topic)
		if e.compat {
			e.add(f.kLagSum, float64(t.Lag), g.Group, t.Topic)
		}
	}
	for pi := range g.Partitions {
		p := &g.Partitions[pi]
		if p.Flags.Has(lagexporter.FlagUnassigned) {
			e.staleCommit(s, g, p, e.partLabel(p.Partition))
			continue
		}
		if p.Known {
			e.add(f.partLag, float64(p.Lag), cl, g.Group, p.Topic, e.partLabel(p.Partition))
			if e.compat {
				e.add(f.kLag, float64(p.Lag), g.Group, p.Topic, e.partLabel(p.Partition))
			}
		}
	}
}

// groupState emits group g's state, membership, simple-consumer, replaying and catch-up series and its members' info.
func (e *emission) groupState(g *lagexporter.GroupLag) {
	f, cl := e.f, e.cl
	if g.State != "" {
		e.add(f.groupState, 1, cl, g.Group, g.State)
	}
	e.add(f.groupMembers, float64(len(g.Members)), cl, g.Group)
	e.add(f.groupSimple, b2f(g.SimpleConsumer), cl, g.Group)
	e.add(f.groupReplaying, b2f(g.Replaying), cl, g.Group)
	if g.CatchUp.State != lagexporter.CatchUpUnknown {
		e.add(f.groupCatchUp, g.CatchUp.Seconds(), cl, g.Group)
	}
	for _, m := range g.Members {
		e.add(f.memberInfo, 1, cl, g.Group, m.MemberID, m.ClientID, m.Host)
	}
	if e.compat {
		e.add(f.kMembers, float64(len(g.Members)), g.Group)
	}
}

// groupTopic emits the aggregates of group g on topic t, and a streams group's topic info.
func (e *emission) groupTopic(g *lagexporter.GroupLag, t *lagexporter.TopicLag) {
	f, cl := e.f, e.cl
	if t.Subtopology != "" {
		e.add(f.streamsTopic, 1, cl, g.Group, t.Topic, t.Subtopology, strconv.FormatBool(t.Internal))
	}
	e.add(f.topicLag, float64(t.Lag), cl, g.Group, t.Topic)
	e.add(f.topicMax, float64(t.MaxLag), cl, g.Group, t.Topic)
	e.add(f.topicSeconds, t.MaxTimeLag.Seconds(), cl, g.Group, t.Topic)
	e.add(f.topicCommitted, float64(t.CommittedSum), cl, g.Group, t.Topic)
	e.add(f.topicExpired, float64(t.Expired), cl, g.Group, t.Topic)
	e.add(f.topicUnknown, float64(t.Unknown), cl, g.Group, t.Topic)
	e.add(f.topicParts, float64(t.Partitions), cl, g.Group, t.Topic)
	e.add(f.topicUnassigned, float64(t.UnassignedCommitted), cl, g.Group, t.Topic)
	e.add(f.topicUnreadDeleted, float64(t.UnreadRecordsDeleted), cl, g.Group, t.Topic)
	if t.MinRetention.TimeKnown {
		e.add(f.topicRetentionSeconds, t.MinRetention.Time.Seconds(), cl, g.Group, t.Topic)
	}
	if t.MinRetention.BytesKnown {
		e.add(f.topicRetentionBytes, float64(t.MinRetention.Bytes), cl, g.Group, t.Topic)
	}
	if e.compat {
		e.add(f.kLagSum, float64(t.Lag), g.Group, t.Topic)
		e.add(f.kCurrentSum, float64(t.CommittedSum-staleCommitted(g, t)), g.Group, t.Topic)
	}
}

// groupPartition emits the series of group g on partition p (partition granularity): its flags, its committed
// offset, and when its lag is known the lag, the time lag when known, and the numbers that apply (partitionExtras).
// An unassigned partition has only its stale commit's series.
func (e *emission) groupPartition(s *lagexporter.Snapshot, g *lagexporter.GroupLag, p *lagexporter.PartitionLag) {
	f, cl := e.f, e.cl
	ps := e.partLabel(p.Partition)
	if p.Flags.Has(lagexporter.FlagUnassigned) {
		e.staleCommit(s, g, p, ps)
		return
	}
	for i, name := range lagexporter.FlagNames {
		if p.Flags&(1<<i) != 0 {
			e.add(f.partFlag, 1, cl, g.Group, p.Topic, ps, name)
		}
	}
	if p.HasCommit {
		e.add(f.partCommitted, float64(p.Committed), cl, g.Group, p.Topic, ps)
		if e.compat {
			e.add(f.kCurrent, float64(p.Committed), g.Group, p.Topic, ps)
		}
	}
	if !p.Known {
		return
	}
	e.add(f.partLag, float64(p.Lag), cl, g.Group, p.Topic, ps)
	if e.compat {
		e.add(f.kLag, float64(p.Lag), g.Group, p.Topic, ps)
	}
	if p.TimeLagKnown {
		e.add(f.partSeconds, p.TimeLag.Seconds(), cl, g.Group, p.Topic, ps)
	}
	e.partitionExtras(g, p, ps)
}

// partitionExtras emits the numbers of a known group-partition that have a series only when they apply: the raw lag
// where it differs from the effective lag, expired, replay-boundary, ahead, control and compacted offsets, the
// stale age, and the retention margins.
func (e *emission) partitionExtras(g *lagexporter.GroupLag, p *lagexporter.PartitionLag, ps string) {
	f, cl := e.f, e.cl
	if p.RawLag != p.Lag {
		e.add(f.partRaw, float64(p.RawLag), cl, g.Group, p.Topic, ps)
	}
	if p.ExpiredOffsets > 0 {
		e.add(f.partExpired, float64(p.ExpiredOffsets), cl, g.Group, p.Topic, ps)
	}
	if p.Flags.Has(lagexporter.FlagReplay) {
		e.add(f.partReplayBoundary, float64(p.ReplayBoundary()), cl, g.Group, p.Topic, ps)
	}
	if p.AheadOffsets() > 0 {
		e.add(f.partAhead, float64(p.AheadOffsets()), cl, g.Group, p.Topic, ps)
	}
	if p.ControlOffsets() > 0 {
		e.add(f.partControl, float64(p.ControlOffsets()), cl, g.Group, p.Topic, ps)
	}
	if p.CompactedOffsets() > 0 {
		e.add(f.partCompacted, float64(p.CompactedOffsets()), cl, g.Group, p.Topic, ps)
	}
	if p.Flags.Has(lagexporter.FlagStale) {
		e.add(f.partStale, p.StaleFor().Seconds(), cl, g.Group, p.Topic, ps)
	}
	if p.Retention.TimeKnown {
		e.add(f.partRetentionSeconds, p.Retention.Time.Seconds(), cl, g.Group, p.Topic, ps)
	}
	if p.Retention.BytesKnown {
		e.add(f.partRetentionBytes, float64(p.Retention.Bytes), cl, g.Group, p.Topic, ps)
	}
}

// topicOffsets emits per topic its end-offset decreases, and per partition whose offsets are known its log start,
// high watermark, last stable offset and open-transaction offsets (partition and partition_lag granularity) and
// the kafka_exporter compatible offsets.
func (e *emission) topicOffsets(s *lagexporter.Snapshot) {
	f, cl := e.f, e.cl
	for ti := range s.Topics {
		t := &s.Topics[ti]
		e.add(f.endDecreases, float64(s.EndOffsetDecreases[t.Topic]), cl, t.Topic)
		for _, p := range t.Partitions {
			if !p.Known() {
				continue
			}
			ps := e.partLabel(p.Partition)
			if e.perPartition || e.lagOnly {
				e.add(f.logStart, float64(p.LogStart), cl, t.Topic, ps)
				e.add(f.highWatermark, float64(p.HighWatermark), cl, t.Topic, ps)
				e.add(f.lastStable, float64(p.LastStable), cl, t.Topic, ps)
				e.add(f.openTxn, float64(p.HighWatermark-p.LastStable), cl, t.Topic, ps)
			}
			if e.compat {
				e.add(f.kTopicCurrent, float64(p.HighWatermark), t.Topic, ps)
				e.add(f.kTopicOldest, float64(p.LogStart), t.Topic, ps)
			}
		}
	}
}

// staleCommit emits the stale-commit series of p, a partition flagged unassigned: its committed offset and the
// commit's age at the snapshot's time. A partition without a commit (a topic the group stopped subscribing to) has none.
func (e *emission) staleCommit(s *lagexporter.Snapshot, g *lagexporter.GroupLag, p *lagexporter.PartitionLag, ps string) {
	if !p.HasCommit {
		return
	}
	e.add(e.f.staleCommit, float64(p.Committed), e.cl, g.Group, p.Topic, ps)
	if !p.CommitTime.IsZero() {
		e.add(e.f.staleCommitAge, max(0, s.Time.Sub(p.CommitTime).Seconds()), e.cl, g.Group, p.Topic, ps)
	}
}

// staleCommitted is the sum of the stale commits (flag unassigned) of g on topic t, which the kafka_exporter
// compatible current-offset sum leaves out as it leaves out their partitions.
func staleCommitted(g *lagexporter.GroupLag, t *lagexporter.TopicLag) int64 {
	if t.UnassignedCommitted == 0 {
		return 0
	}
	var sum int64
	for i := range g.Partitions {
		if p := &g.Partitions[i]; p.Topic == t.Topic && p.HasCommit && p.Flags.Has(lagexporter.FlagUnassigned) {
			sum += p.Committed
		}
	}
	return sum
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// groupType is the group's type label value; snapshots of old timelines have none and are classic groups.
func groupType(g *lagexporter.GroupLag) string {
	if g.GroupType == "" {
		return lagexporter.GroupClassic
	}
	return g.GroupType
}
