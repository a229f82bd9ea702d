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
	// CycleDuration is how long the cycle's cluster reads took (0 for a replayed timeline).
	CycleDuration time.Duration `json:"cycle_duration,omitempty"`
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
	Group     string    `json:"group"`
	State     string    `json:"state,omitempty"`
	Isolation Isolation `json:"isolation"`
	Members   []Member  `json:"members,omitempty"`
	Status    Status    `json:"status"`
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
	Aggregate
}

// Aggregate sums and maxima over a set of group-partitions. Partitions whose lag is unknown are not added (neither as
// NaN nor as a fake 0): they are counted in Unknown, so a reader can tell a complete sum from a lower bound (case C07).
type Aggregate struct {
	Partitions int   `json:"partitions"`        // partitions in scope
	Unknown    int   `json:"unknown,omitempty"` // of which the lag is unknown (not in the sums)
	Lag        int64 `json:"lag"`               // sum of effective lag over known partitions
	RawLag     int64 `json:"raw_lag"`
	MaxLag     int64 `json:"max_lag"`
	// CommittedSum is the sum of committed offsets over partitions with a commit; partitions without one add nothing
	// (never a -1 sentinel, case C06).
	CommittedSum int64 `json:"committed_sum"`
	Expired      int64 `json:"expired_offsets,omitempty"`
	// MaxTimeLag is the largest known time lag; TimeLagUnknown counts partitions with lag whose time lag is unknown.
	MaxTimeLag     time.Duration `json:"max_time_lag"`
	TimeLagUnknown int           `json:"time_lag_unknown,omitempty"`
}

// Add adds one partition's lag to the aggregate.
func (a *Aggregate) Add(p *PartitionLag) {
	a.Partitions++
	if p.HasCommit {
		a.CommittedSum += p.Committed
	}
	if !p.Known {
		a.Unknown++
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
}
