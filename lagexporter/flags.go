package lagexporter

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Flags qualify one group-partition's lag. They are a bit set; String lists the set names, comma-separated, in the
// order of FlagNames. Each flag is also exposed as tidemark_lag_partition_flag{flag="<name>"} (docs/metrics.md).
type Flags uint16

// The flags.
const (
	// FlagNoCommit: the group has no committed offset on the partition; lag counts from the log start (reset=earliest)
	// or is 0 (reset=latest). Case C06.
	FlagNoCommit Flags = 1 << iota
	// FlagExpired: the committed offset is below the log start (retention or DeleteRecords removed unconsumed records);
	// those offsets are reported as expired, not as lag. Case C05.
	FlagExpired
	// FlagAheadOfEnd: the committed offset is past End (end read before the commit, truncation, or a re-created topic);
	// lag is 0. Case C03.
	FlagAheadOfEnd
	// FlagControlRecords: the raw range [start, End) begins with transaction markers or (read_committed) aborted
	// records, which the group will never receive, so the effective lag is smaller than the raw lag. Case C01.
	// Compacted-away offsets have their own flag, FlagCompacted.
	FlagControlRecords
	// FlagLowerBound: the time lag is a lower bound: the first unconsumed record had no valid timestamp or a
	// compaction gap precedes it, so a later record's timestamp was used. Case C27.
	FlagLowerBound
	// FlagEstimated: the time lag was interpolated from the exporter's own history of end offsets (the record could not
	// be read); it is a lower bound within one poll interval, or less precise when the history is too short.
	FlagEstimated
	// FlagStale: this cycle could not read the partition's end offsets (or the group's commits); the last values read
	// are shown.
	FlagStale
	// FlagUnavailable: the partition's offsets are unknown (never read, or no leader): lag is not computed, and the
	// partition is counted as unknown in aggregates instead of being 0.
	FlagUnavailable
	// FlagReplay: the committed offset moved backwards (reset, rewind) and has not yet passed the boundary: the lag is
	// replay backlog, not a live delay. Case C30.
	FlagReplay
	// FlagFutureTimestamp: the first unconsumed record's timestamp is after the observation time (producer clock
	// skew with CreateTime, or a bogus stamp such as year 9999). The time lag from the record is then unknown, never
	// 0 for a partition with backlog; it may be interpolated instead (flag estimated).
	FlagFutureTimestamp
	// FlagEndOffsetDecreased: this cycle the partition's high watermark (or last stable offset) is lower than the last
	// one read, in the same topic incarnation: the log was truncated (unclean leader election) or a broker answered
	// with stale offsets. It is not a consumer rewind: commits that fall with the end are not a replay.
	FlagEndOffsetDecreased
	// FlagUnassigned: a Stable group's members are not assigned the partition and nobody committed on it within
	// status.simple_consumer_window (stale commits left behind after the members stopped subscribing, Burrow #854).
	// Its lag is shown but is kept out of the group's and topic's sums and status.
	FlagUnassigned
	// FlagCompacted: offsets at the head of the backlog were removed by log compaction (the part of raw − effective
	// lag that is not transaction markers or aborted records); the time lag is then a lower bound.
	FlagCompacted
	// FlagLagUpperBound: a share group on a broker that does not compute share-partition lag (before Kafka 4.2,
	// KIP-1226): the lag counts every record from the share-partition start offset to End, including records after it
	// already acknowledged or archived, so it is an upper bound.
	FlagLagUpperBound
	// FlagClockCorrected: the first unconsumed record's timestamp is a LogAppendTime, stamped by the broker that
	// appended it (the leader of its epoch), and the time lag is measured from that stamp corrected by the broker's
	// clock offset as the collector's probes bracket it: a failover to a broker whose clock is off does not move it.
	FlagClockCorrected
	// FlagClockUncorrected: the timestamp is a LogAppendTime whose broker's clock offset is not known (no collector
	// in this process, the broker not probed yet, or the appending broker unknown): the time lag is off by that
	// broker's clock offset, which after a failover may be another broker's than before.
	FlagClockUncorrected
)

// FlagNames names each flag bit, in bit order.
var FlagNames = []string{"no_commit", "expired", "ahead_of_end", "control_records", "lower_bound", "estimated", "stale",
	"unavailable", "replay", "future_timestamp", "end_offset_decreased", "unassigned", "compacted", "lag_upper_bound",
	"append_clock_corrected", "append_clock_uncorrected"}

// Has reports whether every flag in f2 is set in f.
func (f Flags) Has(f2 Flags) bool { return f&f2 == f2 }

// String returns the set flags' names joined by commas ("" for none).
func (f Flags) String() string {
	var b strings.Builder
	for i, n := range FlagNames {
		if f&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n)
		}
	}
	return b.String()
}

// MarshalJSON writes the set flags' names, comma-separated (String).
func (f Flags) MarshalJSON() ([]byte, error) { return json.Marshal(f.String()) }

// UnmarshalJSON reads the String form.
func (f *Flags) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, ok := ParseFlags(s)
	if !ok {
		return fmt.Errorf("flags %q: not a comma-separated list of %v", s, FlagNames)
	}
	*f = v
	return nil
}

// ParseFlags parses the String form back.
func ParseFlags(s string) (Flags, bool) {
	var f Flags
	if s == "" {
		return 0, true
	}
	for _, part := range strings.Split(s, ",") {
		found := false
		for i, n := range FlagNames {
			if n == part {
				f |= 1 << i
				found = true
			}
		}
		if !found {
			return 0, false
		}
	}
	return f, true
}
