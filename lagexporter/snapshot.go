package lagexporter

import "time"

// Snapshot is the immutable result of one cycle: every measured group with its partitions and aggregates, the topics'
// offsets, and the cycle's health. The loop publishes a new *Snapshot per cycle and never mutates a published one, so
// readers (the Prometheus collector, the ClickHouse writer) may keep and read it without locks.
type Snapshot struct {
	Cluster string     `json:"cluster"`
	Time    time.Time  `json:"time"` // observation time (the "now" of time lags)
	Seq     uint64     `json:"seq"`  // 1 for the first cycle, +1 per cycle
	Groups  []GroupLag `json:"groups"`
	// Topics are the measured topics' partition offsets (allowed topics only), sorted by name.
	Topics []TopicObservation `json:"topics,omitempty"`
	Errors []CycleError       `json:"errors,omitempty"`
	// Unsupported names the group reads some broker could not answer since the exporter started (RPC names such as
	// "ShareGroupDescribe"), when the Cluster reports them (see UnsupportedReporter).
	Unsupported []string `json:"unsupported,omitempty"`
	// CycleDuration is how long the cycle's cluster reads took (0 for a replayed timeline).
	CycleDuration time.Duration `json:"cycle_duration,omitempty"`
	// EndOffsetDecreases counts, per measured topic, the partitions whose high watermark or last stable offset was
	// read lower than the time before (same topic incarnation) since the exporter started watching the topic.
	EndOffsetDecreases map[string]uint64 `json:"end_offset_decreases,omitempty"`
}

// Group returns the named group's lag, or nil.
func (s *Snapshot) Group(name string) *GroupLag {
	for i := range s.Groups {
		if s.Groups[i].Group == name {
			return &s.Groups[i]
		}
	}
	return nil
}

// GroupLag is one group's measurement: partitions (sorted by topic, partition), per-topic aggregates and the total.
type GroupLag struct {
	Group string `json:"group"`
	// GroupType is Kafka's group type: classic, consumer (KIP-848), share (KIP-932) or streams (KIP-1071).
	GroupType string    `json:"group_type"`
	State     string    `json:"state,omitempty"`
	Isolation Isolation `json:"isolation"`
	Members   []Member  `json:"members,omitempty"`
	// Epoch and AssignmentEpoch: the group epoch and its target assignment's epoch (KIP-848, share, streams groups).
	Epoch           int32  `json:"epoch,omitempty"`
	AssignmentEpoch int32  `json:"assignment_epoch,omitempty"`
	Status          Status `json:"status"`
	// Replaying is true while some partition of the group replays after a rewind (flag replay, case C30). It is an
	// episode beside Status: a replaying group that dies is STOP (or STALL, ERR) and still Replaying.
	Replaying bool `json:"replaying,omitempty"`
	// CatchUp is the group's catch-up estimate: its partitions' largest ETA, not draining if one is not.
	CatchUp CatchUp `json:"catch_up"`
	// SimpleConsumer: the group has no members but committed within status.simple_consumer_window (case C14).
	SimpleConsumer bool `json:"simple_consumer,omitempty"`
	// Error is set when this cycle could not read the group's commits; Partitions then hold the last values read
	// (flagged stale), or are empty when there were none.
	Error      string         `json:"error,omitempty"`
	Partitions []PartitionLag `json:"partitions"`
	Topics     []TopicLag     `json:"topics"`
	Total      Aggregate      `json:"total"`
}

// Partition returns the group's lag on topic/partition, or nil.
func (g *GroupLag) Partition(topic string, partition int32) *PartitionLag {
	for i := range g.Partitions {
		if g.Partitions[i].Topic == topic && g.Partitions[i].Partition == partition {
			return &g.Partitions[i]
		}
	}
	return nil
}

// Topic returns the group's aggregate over topic, or nil.
func (g *GroupLag) Topic(topic string) *TopicLag {
	for i := range g.Topics {
		if g.Topics[i].Topic == topic {
			return &g.Topics[i]
		}
	}
	return nil
}

// TopicLag is a group's aggregate over one topic.
type TopicLag struct {
	Topic string `json:"topic"`
	// Subtopology and Internal: for a streams group, the subtopology reading the topic and whether it is an internal
	// repartition topic (KIP-1071), so an application's lag can be shown per subtopology.
	Subtopology string `json:"subtopology,omitempty"`
	Internal    bool   `json:"internal,omitempty"`
	Aggregate
}

// Aggregate sums and maxima over a set of group-partitions. Partitions whose lag is unknown or stale are not added
// (neither as NaN, nor as a fake 0, nor as a frozen old value): they are counted in Unknown, so a reader can tell a
// complete sum from a lower bound (case C07). Partitions flagged unassigned are counted apart and not added either.
type Aggregate struct {
	Partitions int `json:"partitions"`        // partitions in scope
	Unknown    int `json:"unknown,omitempty"` // of which the lag is unknown or stale (not in the sums)
	// Complete is true when no partition is unknown: the sums are exact, not lower bounds.
	Complete bool `json:"complete"`
	// UnassignedCommitted counts partitions with commits that a Stable group's members are not assigned (flag
	// unassigned): stale commits to clean up, not in the sums.
	UnassignedCommitted int   `json:"unassigned_committed_partitions,omitempty"`
	Lag                 int64 `json:"lag"` // sum of effective lag over known partitions
	RawLag              int64 `json:"raw_lag"`
	MaxLag              int64 `json:"max_lag"`
	// CommittedSum is the sum of committed offsets over partitions with a commit; partitions without one add nothing
	// (never a -1 sentinel, case C06).
	CommittedSum int64 `json:"committed_sum"`
	Expired      int64 `json:"expired_offsets,omitempty"`
	// MaxTimeLag is the largest known time lag; TimeLagUnknown counts partitions with lag whose time lag is unknown.
	MaxTimeLag     time.Duration `json:"max_time_lag"`
	TimeLagUnknown int           `json:"time_lag_unknown,omitempty"`
	// MinRetention is the smallest retention margin of the partitions that have one and are not replaying (each part
	// known when some partition's is): how close the group is to losing records it never read. A replay's first
	// records were delivered before, and after a reset to earliest they are always about to be deleted.
	MinRetention RetentionMargin `json:"min_retention,omitzero"`
	// UnreadRecordsDeleted counts records deleted (retention, DeleteRecords) below the group's committed offset
	// while the exporter watched, since it started: data the group lost unread.
	UnreadRecordsDeleted int64 `json:"unread_records_deleted"`
}

// Add adds one partition's lag to the aggregate.
func (a *Aggregate) Add(p *PartitionLag) {
	a.Partitions++
	if p.HasCommit {
		a.CommittedSum += p.Committed
	}
	switch {
	case !p.Known || p.Flags.Has(FlagStale):
		a.Unknown++ // "unknown is not a number": a frozen last value is not added either
		return
	case p.Flags.Has(FlagUnassigned):
		if p.HasCommit {
			a.UnassignedCommitted++
		}
		return
	}
	a.Lag += p.Lag
	a.RawLag += p.RawLag
	a.MaxLag = max(a.MaxLag, p.Lag)
	a.Expired += p.ExpiredOffsets
	if p.TimeLagKnown {
		a.MaxTimeLag = max(a.MaxTimeLag, p.TimeLag)
	} else {
		a.TimeLagUnknown++
	}
	if p.Flags.Has(FlagReplay) {
		return
	}
	if r := p.Retention; r.TimeKnown && (!a.MinRetention.TimeKnown || r.Time < a.MinRetention.Time) {
		a.MinRetention.Time, a.MinRetention.TimeKnown = r.Time, true
	}
	if r := p.Retention; r.BytesKnown && (!a.MinRetention.BytesKnown || r.Bytes < a.MinRetention.Bytes) {
		a.MinRetention.Bytes, a.MinRetention.BytesKnown = r.Bytes, true
	}
}
