package lagexporter

import "time"

// RetentionMargin is the room left before Kafka's retention may delete the first record a group has not consumed
// yet. Kafka deletes whole segments, oldest first: a segment becomes eligible once its largest timestamp is older than
// retention.ms, or once the segments after it alone hold retention.bytes (cleanup.policy delete). Kafka's protocol
// does not expose segment boundaries, so both margins are computed as if deletion were per record, which makes them
// lower bounds: the real margin is larger by at most one segment (segment.ms of time, segment.bytes of bytes).
type RetentionMargin struct {
	// Time is retention.ms − time lag, at least 0: how long until the first unconsumed record is itself older than
	// retention.ms. Known only with lag, a known time lag and a finite retention.ms. When the time lag is a lower
	// bound (flag lower_bound), Time is an upper bound.
	Time time.Duration `json:"time_left,omitempty"`
	// Bytes is retention.bytes − the bytes from the first unconsumed record to the end of the log, at least 0: how
	// many more bytes producers may append before size-based retention reaches it. The unconsumed bytes are the
	// partition's size (DescribeLogDirs) × (HW − start) / (HW − log start), i.e. records of uniform size: when the
	// unconsumed records are bigger than the log's average (or a compacted head holds fewer bytes per offset), Bytes
	// is too large, not a lower bound. Known only with lag, a finite retention.bytes and a size read this cycle.
	Bytes      int64 `json:"bytes_left,omitempty"`
	TimeKnown  bool  `json:"time_known,omitempty"`
	BytesKnown bool  `json:"bytes_known,omitempty"`
}

// ComputeRetentionMargin computes the margin of one group-partition from the topic's retention settings r (nil:
// unknown), the partition's offsets and size, the group's first unconsumed offset start and its lag and time lag.
// A pure function.
func ComputeRetentionMargin(r *TopicRetention, logStart, hw, start, sizeBytes int64, lag int64, timeLag time.Duration,
	timeLagKnown bool) RetentionMargin {
	var m RetentionMargin
	if lag <= 0 || !r.Deletes() {
		return m
	}
	if r.RetentionMs >= 0 && timeLagKnown {
		m.Time, m.TimeKnown = max(0, time.Duration(r.RetentionMs)*time.Millisecond-timeLag), true
	}
	if r.RetentionBytes >= 0 && sizeBytes > 0 && hw > logStart {
		unconsumed := int64(float64(sizeBytes) * float64(hw-max(start, logStart)) / float64(hw-logStart))
		m.Bytes, m.BytesKnown = max(0, r.RetentionBytes-unconsumed), true
	}
	return m
}
