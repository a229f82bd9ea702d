package lagexporter

import (
	"encoding/json"
	"time"
)

// PartitionInput is everything the lag of one group on one partition depends on. It is the argument of ComputeLag,
// a pure function.
type PartitionInput struct {
	HasCommit bool
	Committed int64 // meaningful only with HasCommit
	// Offsets of the partition (ListOffsets); OffsetsKnown false means they are unknown (no leader, never read).
	OffsetsKnown  bool
	LogStart      int64
	HighWatermark int64
	LastStable    int64
	Isolation     Isolation
	Reset         Reset
	// Probe is the record read at Start(), or nil when none was read (or it was for another offset/isolation).
	Probe *RecordProbe
	// Now is the observation time; the time lag is Now − timestamp of the first unconsumed record.
	Now time.Time
	// Share marks a share group (KIP-932): Committed is then the share-partition start offset (SPSO), and ShareLag the
	// broker's share-partition lag (KIP-1226) when it computes one.
	Share    bool
	ShareLag *int64
}

// End returns the offset the group's lag is measured against: the high watermark for read_uncommitted, the last
// stable offset for read_committed (a read_committed consumer cannot read past the LSO).
func (in PartitionInput) End() int64 {
	if in.Isolation == ReadCommitted {
		return in.LastStable
	}
	return in.HighWatermark
}

// Start returns the group's first unconsumed position: max(committed, log start) with a commit; the log start
// (reset=earliest) or End (reset=latest) without one. Offsets below the log start can never be delivered (case C05).
func (in PartitionInput) Start() int64 {
	end := in.End()
	if !in.HasCommit {
		if in.Reset == ResetLatest {
			return end
		}
		return in.LogStart
	}
	return max(in.Committed, in.LogStart)
}

// PartitionLag is the computed lag of one group on one partition. There is one per group-partition in every
// snapshot, so it is laid out compactly (176 bytes, docs/performance.md): its fields that are zero for nearly every
// group-partition (replay boundary, ahead, control, compacted and open-transaction offsets, stale age) sit behind one
// pointer and a streams group's subtopology behind another, each read with the method of its name. Its JSON is one
// flat object with every field (MarshalJSON).
type PartitionLag struct {
	Topic     string
	Partition int32
	Flags     Flags // written as their names, comma-separated
	HasCommit bool
	// Known is false when the partition's offsets are unknown: Lag, RawLag and TimeLag are then 0 and meaningless, and
	// aggregates count the partition as unknown.
	Known        bool
	TimeLagKnown bool // see TimeLag
	Status       Status
	Committed    int64 // meaningful only with HasCommit
	LogStart     int64
	End          int64 // HW or LSO by isolation
	// Lag is the effective offset lag: records the group will still receive, max(0, End − max(start, first
	// consumable record)). This is the number for alerting and autoscaling (case C01).
	Lag int64
	// RawLag is max(0, End − max(committed, log start)) (the product definition without the record read).
	RawLag int64
	// ExpiredOffsets is log start − committed when the commit is below the log start (case C05), else 0.
	ExpiredOffsets int64
	// TimeLag is Now − timestamp of the first unconsumed record; 0 when Lag is 0. TimeLagKnown is false when no
	// timestamp could be read or estimated.
	TimeLag time.Duration
	// CommitTime is when the current committed offset was made (or first seen).
	CommitTime time.Time
	// Retention is the margin before retention deletes the first unconsumed record (see RetentionMargin).
	Retention RetentionMargin
	// CatchUp estimates when the lag reaches 0 at the rates of the status window.
	CatchUp CatchUp
	rare    *partitionRare // nil while all its fields are 0
	streams *StreamsTopic  // a streams group's use of the topic, shared by the group's partitions of it; nil otherwise
}

// partitionRare holds the PartitionLag fields that are zero for nearly every group-partition.
type partitionRare struct {
	replayBoundary, ahead, control, compacted, openTransaction int64
	staleFor                                                   time.Duration
}

// ReplayBoundary is the committed offset before the rewind while FlagReplay is set (case C30), else 0.
func (p *PartitionLag) ReplayBoundary() int64 { return p.r().replayBoundary }

// AheadOffsets is committed − End when the commit is past End (flag ahead_of_end), else 0; lag stays 0.
func (p *PartitionLag) AheadOffsets() int64 { return p.r().ahead }

// ControlOffsets and CompactedOffsets split RawLag − Lag: transaction markers and aborted records at the head of
// the backlog (flag control_records), and offsets compaction removed (flag compacted).
func (p *PartitionLag) ControlOffsets() int64 { return p.r().control }

// CompactedOffsets: see ControlOffsets.
func (p *PartitionLag) CompactedOffsets() int64 { return p.r().compacted }

// OpenTransactionOffsets is high watermark − last stable offset: what a read_committed group cannot consume until
// the oldest open transaction ends.
func (p *PartitionLag) OpenTransactionOffsets() int64 { return p.r().openTransaction }

// StaleFor is how long ago the values of a stale partition (flag stale) were last read, else 0.
func (p *PartitionLag) StaleFor() time.Duration { return p.r().staleFor }

// Subtopology and Internal say how a streams group uses the topic (KIP-1071): the id of the subtopology reading
// it, and whether it is an internal repartition topic. Empty for other group types.
func (p *PartitionLag) Subtopology() string {
	if p.streams == nil {
		return ""
	}
	return p.streams.Subtopology
}

// Internal: see Subtopology.
func (p *PartitionLag) Internal() bool { return p.streams != nil && p.streams.Internal }

// SetStreams sets how a streams group uses the partition's topic; s is shared, not copied, and must not change.
func (p *PartitionLag) SetStreams(s *StreamsTopic) { p.streams = s }

// Equal reports whether p and q hold the same values (PartitionLag holds pointers: == compares their identity).
func (p *PartitionLag) Equal(q *PartitionLag) bool {
	a, b := *p, *q
	a.rare, b.rare, a.streams, b.streams = nil, nil, nil, nil
	return a == b && *p.r() == *q.r() && p.Subtopology() == q.Subtopology() && p.Internal() == q.Internal()
}

var noRare partitionRare

func (p *PartitionLag) r() *partitionRare {
	if p.rare == nil {
		return &noRare
	}
	return p.rare
}

// rareFor returns p's rare fields to set one of them to v, allocating them only for v != 0; nil when v is 0 and
// they are all 0 (their default: nothing to write).
func (p *PartitionLag) rareFor(v int64) *partitionRare {
	if p.rare == nil && v != 0 {
		p.rare = &partitionRare{}
	}
	return p.rare
}

// partitionLagJSON is PartitionLag's JSON form: every field, in this order.
type partitionLagJSON struct {
	Topic                  string          `json:"topic"`
	Partition              int32           `json:"partition"`
	HasCommit              bool            `json:"has_commit"`
	Committed              int64           `json:"committed,omitempty"`
	CommitTime             time.Time       `json:"commit_time,omitzero"`
	LogStart               int64           `json:"log_start"`
	End                    int64           `json:"end"`
	Known                  bool            `json:"known"`
	Lag                    int64           `json:"lag"`
	RawLag                 int64           `json:"raw_lag"`
	ExpiredOffsets         int64           `json:"expired_offsets,omitempty"`
	TimeLag                time.Duration   `json:"time_lag"`
	TimeLagKnown           bool            `json:"time_lag_known"`
	Flags                  Flags           `json:"flags,omitempty"`
	Status                 Status          `json:"status"`
	ReplayBoundary         int64           `json:"replay_boundary_offset,omitempty"`
	AheadOffsets           int64           `json:"ahead_offsets,omitempty"`
	ControlOffsets         int64           `json:"control_offsets,omitempty"`
	CompactedOffsets       int64           `json:"compacted_offsets,omitempty"`
	OpenTransactionOffsets int64           `json:"open_transaction_offsets,omitempty"`
	StaleFor               time.Duration   `json:"stale_for,omitempty"`
	Retention              RetentionMargin `json:"retention,omitzero"`
	CatchUp                CatchUp         `json:"catch_up"`
	Subtopology            string          `json:"subtopology,omitempty"`
	Internal               bool            `json:"internal,omitempty"`
}

// MarshalJSON writes the partition as one flat object.
func (p PartitionLag) MarshalJSON() ([]byte, error) {
	r := p.r()
	return json.Marshal(partitionLagJSON{Topic: p.Topic, Partition: p.Partition, HasCommit: p.HasCommit,
		Committed: p.Committed, CommitTime: p.CommitTime, LogStart: p.LogStart, End: p.End, Known: p.Known, Lag: p.Lag,
		RawLag: p.RawLag, ExpiredOffsets: p.ExpiredOffsets, TimeLag: p.TimeLag, TimeLagKnown: p.TimeLagKnown,
		Flags: p.Flags, Status: p.Status, ReplayBoundary: r.replayBoundary, AheadOffsets: r.ahead,
		ControlOffsets: r.control, CompactedOffsets: r.compacted, OpenTransactionOffsets: r.openTransaction,
		StaleFor: r.staleFor, Retention: p.Retention, CatchUp: p.CatchUp, Subtopology: p.Subtopology(),
		Internal: p.Internal()})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (p *PartitionLag) UnmarshalJSON(b []byte) error {
	var j partitionLagJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*p = PartitionLag{Topic: j.Topic, Partition: j.Partition, Flags: j.Flags, HasCommit: j.HasCommit, Known: j.Known,
		TimeLagKnown: j.TimeLagKnown, Status: j.Status, Committed: j.Committed, LogStart: j.LogStart, End: j.End,
		Lag: j.Lag, RawLag: j.RawLag, ExpiredOffsets: j.ExpiredOffsets, TimeLag: j.TimeLag, CommitTime: j.CommitTime,
		Retention: j.Retention, CatchUp: j.CatchUp}
	if rare := (partitionRare{j.ReplayBoundary, j.AheadOffsets, j.ControlOffsets, j.CompactedOffsets,
		j.OpenTransactionOffsets, j.StaleFor}); rare != noRare {
		p.rare = &rare
	}
	if j.Subtopology != "" || j.Internal {
		p.streams = &StreamsTopic{Subtopology: j.Subtopology, Internal: j.Internal}
	}
	return nil
}

// ComputeLag computes offset lag, effective lag, expired offsets, time lag (from the probe only; the interpolation
// fallback is the Evaluator's) and flags for one group-partition. It never returns a negative number and never uses a
// sentinel as an offset.
//
// Rules (docs/lag.md): raw lag = max(0, End − Start()) where Start = max(committed, log start) (cases C03, C05,
// C19); without a commit Start is the log start or End by reset policy (C06); the effective lag subtracts a leading
// run of records the group will never receive, as found by the probe: with no consumable record up to End it is 0
// (transaction markers at the tail, C01). Time lag = Now − probe timestamp when Lag > 0, 0 otherwise (C21), the
// timestamp of a LogAppendTime record first moved onto the exporter's clock by its broker's offset when known
// (Probe.AppendClock: FlagClockCorrected, else FlagClockUncorrected);
// a probe timestamp <= 0 ms is missing (ValidRecordTimestamp, C27) and one after Now leaves the time lag unknown with
// FlagFutureTimestamp.
//
// For a share group (in.Share) the start is the share-partition start offset, and the effective lag is at most the
// broker's share-partition lag (KIP-1226: records neither acknowledged nor archived, in-flight ones included), which
// leaves out records after the SPSO whose delivery is already complete; without it the lag is End − SPSO, flagged
// lag_upper_bound. The time lag is the age of the record at the SPSO: the oldest record whose delivery is not complete.
func ComputeLag(in PartitionInput) PartitionLag {
	out := PartitionLag{HasCommit: in.HasCommit, Known: in.OffsetsKnown}
	if in.HasCommit {
		out.Committed = in.Committed
	} else {
		out.Flags |= FlagNoCommit
	}
	if !in.OffsetsKnown {
		out.Flags |= FlagUnavailable
		return out
	}
	out.setOffsets(in)
	if out.RawLag == 0 {
		out.TimeLagKnown = true // nothing unconsumed: 0 by definition, never NaN (C21)
		return out
	}
	start, p := in.Start(), in.Probe
	if p == nil || p.Error != "" || p.Offset != start {
		out.Lag = shareLag(in, out.Lag, &out.Flags)
		out.TimeLagKnown = out.Lag == 0 // the broker says every record from the SPSO is delivered
		return out
	}
	out.skipUnconsumable(p, start)
	out.Lag = shareLag(in, out.Lag, &out.Flags)
	if out.Lag == 0 {
		out.TimeLagKnown = true
		return out
	}
	out.setTimeLag(p, in.Now)
	return out
}

// setOffsets sets the offsets of a partition whose offsets are known: log start, End, expired offsets (a commit below
// the log start, C05), ahead offsets (a commit past End), open-transaction offsets (high watermark − last stable
// offset), and the raw lag max(0, End − Start()), which is also the lag until the probe says otherwise.
func (p *PartitionLag) setOffsets(in PartitionInput) {
	end := in.End()
	p.LogStart, p.End = in.LogStart, end
	if in.HasCommit && in.Committed < in.LogStart {
		p.ExpiredOffsets = in.LogStart - in.Committed
		p.Flags |= FlagExpired
	}
	if in.HasCommit && in.Committed > end {
		p.Flags |= FlagAheadOfEnd
		if r := p.rareFor(in.Committed - end); r != nil {
			r.ahead = in.Committed - end
		}
	}
	if r := p.rareFor(in.HighWatermark - in.LastStable); r != nil {
		r.openTransaction = in.HighWatermark - in.LastStable
	}
	p.RawLag = max(0, end-in.Start())
	p.Lag = p.RawLag
}

// skipUnconsumable subtracts from the lag the leading run of records the group will never receive, as probe pr read
// at start found it: up to its first consumable record, or up to End when it scanned that far and found none. Of
// the offsets skipped, the probe's gap offsets (at most) were removed by compaction (FlagCompacted); the rest are
// transaction markers or aborted records (FlagControlRecords, C01).
func (p *PartitionLag) skipUnconsumable(pr *RecordProbe, start int64) {
	end := p.End
	effStart := start
	switch {
	case pr.FirstOffset >= start:
		effStart = min(pr.FirstOffset, end)
	case pr.FirstOffset < 0 && pr.ScannedTo >= end:
		effStart = end // only non-consumable records up to End
	}
	if effStart <= start {
		return
	}
	p.Lag = max(0, end-effStart)
	compacted := min(max(pr.GapOffsets, 0), p.RawLag-p.Lag)
	control := p.RawLag - p.Lag - compacted
	if r := p.rareFor(compacted); r != nil {
		r.compacted = compacted
	}
	if r := p.rareFor(control); r != nil {
		r.control = control
	}
	if control > 0 {
		p.Flags |= FlagControlRecords
	}
	if compacted > 0 {
		p.Flags |= FlagCompacted
	}
}

// setTimeLag sets the time lag now − the timestamp of probe pr's first consumable record, when that record has a
// valid timestamp: a LogAppendTime moved onto the exporter's clock by its broker's offset when known
// (FlagClockCorrected, else FlagClockUncorrected); a timestamp after now leaves the time lag unknown with
// FlagFutureTimestamp. Compaction at the head of the backlog, or a first record without a valid timestamp, makes the
// time lag a lower bound (FlagLowerBound).
func (p *PartitionLag) setTimeLag(pr *RecordProbe, now time.Time) {
	if pr.FirstOffset < 0 || pr.TimestampOffset < 0 || !ValidRecordTimestamp(pr.Timestamp) {
		return
	}
	ts := pr.Timestamp
	if c := pr.AppendClock; c != nil {
		// A LogAppendTime is the appending broker's clock: put it on ours when the probes know that clock.
		if c.Known {
			ts = ts.Add(-c.Offset)
			p.Flags |= FlagClockCorrected
		} else {
			p.Flags |= FlagClockUncorrected
		}
	}
	if ts.After(now) {
		// The producer's clock is ahead of ours (CreateTime) or the stamp is garbage (year 9999): the age of the
		// backlog is unknown, never 0 while records wait. The evaluator may still interpolate it (estimated).
		p.Flags |= FlagFutureTimestamp
		return
	}
	p.TimeLag = now.Sub(ts)
	p.TimeLagKnown = true
	// only compaction (and a first record without a valid timestamp) makes the age a lower bound: markers and
	// aborted records are not data the group is waiting for
	if p.CompactedOffsets() > 0 || pr.Gap && pr.GapOffsets == 0 || pr.TimestampOffset > pr.FirstOffset {
		p.Flags |= FlagLowerBound
	}
}

// shareLag bounds a share group's lag by the broker's share-partition lag, or flags it as an upper bound.
func shareLag(in PartitionInput, lag int64, flags *Flags) int64 {
	if !in.Share || !in.HasCommit {
		return lag
	}
	if in.ShareLag == nil {
		*flags |= FlagLagUpperBound
		return lag
	}
	return max(0, min(lag, *in.ShareLag))
}

// LagFromLastProcessed is the lag of a consumer that reports the offset of the LAST record it processed (as
// instrumentation does) rather than a commit: End − (last + 1), at least 0 (case C19). last < 0 means nothing processed.
func LagFromLastProcessed(end, last int64) int64 {
	if last < 0 {
		return max(0, end)
	}
	return max(0, end-(last+1))
}

// TimestampProblem is why a record timestamp is not used for a time lag; the values label
// tidemark_lag_exporter_invalid_timestamps_total.
type TimestampProblem string

// The timestamp problems.
const (
	// TimestampMissing: Kafka's NO_TIMESTAMP (-1), or any value <= 0 ms (clients without a clock), case C27.
	TimestampMissing TimestampProblem = "missing"
	// TimestampWrongUnit: a value that only makes sense in another unit: below 1e11 ms (before 1973-03-03: seconds
	// written as milliseconds) or from 1e15 ms on (year 33658 and later: microseconds or nanoseconds).
	TimestampWrongUnit TimestampProblem = "wrong_unit"
	// TimestampFuture: after the observation time (producer clock ahead of ours with CreateTime, or a bogus stamp
	// such as year 9999): flag future_timestamp.
	TimestampFuture TimestampProblem = "future"
)

// TimestampProblems lists every TimestampProblem, so the counter can expose a zero for each.
var TimestampProblems = []TimestampProblem{TimestampMissing, TimestampWrongUnit, TimestampFuture}

// Bounds of a plausible record timestamp in Unix milliseconds (see TimestampWrongUnit).
const (
	minPlausibleMs = 1e11
	maxPlausibleMs = 1e15
)

// ClassifyRecordTimestamp returns "" for a usable record timestamp, TimestampMissing or TimestampWrongUnit
// otherwise. Whether it is in the future depends on the observation time and is the caller's to check.
func ClassifyRecordTimestamp(t time.Time) TimestampProblem {
	ms := t.UnixMilli()
	switch {
	case t.IsZero() || ms <= 0:
		return TimestampMissing
	case ms < minPlausibleMs || ms >= maxPlausibleMs:
		return TimestampWrongUnit
	}
	return ""
}

// ValidRecordTimestamp reports whether t is a usable record timestamp (ClassifyRecordTimestamp returns ""). Kafka's
// NO_TIMESTAMP is -1 and clients put 0 or negative values in records without a real clock (case C27), and a seconds
// or microseconds value read as milliseconds is as wrong, so the live reader and timelines both skip such stamps
// rather than report a 56-year-old record.
func ValidRecordTimestamp(t time.Time) bool { return ClassifyRecordTimestamp(t) == "" }
