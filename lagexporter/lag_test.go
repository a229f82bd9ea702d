package lagexporter

import (
	"testing"
	"time"
)

func TestComputeLag(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	probe := func(off, first, tsOff int64, ts time.Time, scanned int64, gap bool) *RecordProbe {
		return &RecordProbe{Offset: off, FirstOffset: first, TimestampOffset: tsOff, Timestamp: ts, ScannedTo: scanned, Gap: gap}
	}
	gapProbe := func(off, first int64, ts time.Time, scanned, gapOffsets int64) *RecordProbe {
		p := probe(off, first, first, ts, scanned, gapOffsets > 0)
		p.GapOffsets = gapOffsets
		return p
	}
	lat := func(p *RecordProbe, broker int32, offset time.Duration, known bool) *RecordProbe {
		p.AppendClock = &AppendClock{Broker: broker, Known: known, Offset: offset}
		return p
	}
	tests := []struct {
		name              string
		in                PartitionInput
		lag, raw, expired int64
		timeLag           time.Duration
		timeKnown         bool
		flags             Flags
		// magnitudes: committed past End, markers vs compaction, HW − LSO
		ahead, control, compacted, openTxn int64
	}{
		// Share groups (KIP-932, KIP-1226): Committed is the share-partition start offset (SPSO).
		{
			// the shape of TestGroupTypeShareOffsets: 25 of 30 records acknowledged in order: SPSO 25, broker lag 5.
			name: "share: broker lag equals End - SPSO",
			in: PartitionInput{HasCommit: true, Committed: 25, OffsetsKnown: true, HighWatermark: 30, LastStable: 30, Share: true,
				ShareLag: ptr(int64(5)), Probe: probe(25, 25, 25, now.Add(-time.Minute), 30, false), Now: now},
			lag: 5, raw: 5, timeLag: time.Minute, timeKnown: true,
		},
		{
			// a second consumer acknowledged 30..39 while record 20 is still in flight: the SPSO stays at 20, and the
			// broker's lag leaves the 10 acknowledged records out; the time lag is the age of record 20.
			name: "share: records acknowledged past the SPSO",
			in: PartitionInput{HasCommit: true, Committed: 20, OffsetsKnown: true, HighWatermark: 50, LastStable: 50, Share: true,
				ShareLag: ptr(int64(20)), Probe: probe(20, 20, 20, now.Add(-2*time.Minute), 50, false), Now: now},
			lag: 20, raw: 30, timeLag: 2 * time.Minute, timeKnown: true,
		},
		{
			// a broker before Kafka 4.2 gives no lag: End - SPSO, flagged as an upper bound.
			name: "share: no broker lag",
			in: PartitionInput{HasCommit: true, Committed: 20, OffsetsKnown: true, HighWatermark: 50, LastStable: 50, Share: true,
				Probe: probe(20, 20, 20, now.Add(-2*time.Minute), 50, false), Now: now},
			lag: 30, raw: 30, timeLag: 2 * time.Minute, timeKnown: true, flags: FlagLagUpperBound,
		},
		{
			// the broker read its end before records we see arrived; its lag never exceeds ours, and its 0 means every
			// record it knew of is delivered: lag 0 with a known time lag of 0, even without a record read.
			name: "share: broker lag 0, no record read",
			in: PartitionInput{HasCommit: true, Committed: 40, OffsetsKnown: true, HighWatermark: 42, LastStable: 42, Share: true,
				ShareLag: ptr(int64(0)), Now: now},
			lag: 0, raw: 2, timeKnown: true,
		},
		{
			// a lag the broker computed against a later end than ours is capped at ours: never more than End - SPSO.
			name: "share: broker lag above End - SPSO",
			in: PartitionInput{HasCommit: true, Committed: 40, OffsetsKnown: true, HighWatermark: 42, LastStable: 42, Share: true,
				ShareLag: ptr(int64(7)), Now: now},
			lag: 2, raw: 2,
		},
		{
			// C05 A: everything between the commit and the log start was deleted; the partition is empty.
			name: "C05 A empty after retention",
			in:   PartitionInput{HasCommit: true, Committed: 1250000, OffsetsKnown: true, LogStart: 9000000, HighWatermark: 9000000, LastStable: 9000000},
			lag:  0, raw: 0, expired: 7750000, timeKnown: true, flags: FlagExpired,
		},
		{
			name: "C05 B DeleteRecords past the commit",
			in:   PartitionInput{HasCommit: true, Committed: 1200, OffsetsKnown: true, LogStart: 5000, HighWatermark: 5200, LastStable: 5200},
			lag:  200, raw: 200, expired: 3800, flags: FlagExpired,
		},
		{
			name: "C05 C commit above the log start",
			in:   PartitionInput{HasCommit: true, Committed: 5100, OffsetsKnown: true, LogStart: 5000, HighWatermark: 5200, LastStable: 5200},
			lag:  100, raw: 100,
		},
		{
			// C03: the end read before a newer commit; clamp to 0 and flag, never -250.
			name: "C03 committed ahead of a stale end",
			in:   PartitionInput{HasCommit: true, Committed: 50250, OffsetsKnown: true, HighWatermark: 50000, LastStable: 50000},
			lag:  0, raw: 0, timeKnown: true, flags: FlagAheadOfEnd, ahead: 250,
		},
		{
			name: "C06 p0 no commit counts from log start",
			in:   PartitionInput{OffsetsKnown: true, HighWatermark: 3083, LastStable: 3083},
			lag:  3083, raw: 3083, flags: FlagNoCommit,
		},
		{
			name: "C06 p0 no commit, reset=latest",
			in:   PartitionInput{OffsetsKnown: true, HighWatermark: 3083, LastStable: 3083, Reset: ResetLatest},
			lag:  0, raw: 0, timeKnown: true, flags: FlagNoCommit,
		},
		{
			// C01: read_committed group; only the COMMIT marker at offset 5 is left: raw 1, effective 0.
			name: "C01 marker at the tail",
			in: PartitionInput{HasCommit: true, Committed: 5, OffsetsKnown: true, HighWatermark: 6, LastStable: 6, Isolation: ReadCommitted,
				Probe: probe(5, -1, -1, time.Time{}, 6, false)},
			lag: 0, raw: 1, timeKnown: true, flags: FlagControlRecords, control: 1,
		},
		{
			// Without the record read the raw lag stands (no claim we cannot back).
			name: "C01 marker at the tail, no probe",
			in:   PartitionInput{HasCommit: true, Committed: 5, OffsetsKnown: true, HighWatermark: 6, LastStable: 6, Isolation: ReadCommitted},
			lag:  1, raw: 1,
		},
		{
			// A probe that did not scan to End (a new record arrived since) proves nothing about the tail.
			name: "probe scanned short of End",
			in: PartitionInput{HasCommit: true, Committed: 5, OffsetsKnown: true, HighWatermark: 7, LastStable: 7,
				Probe: probe(5, -1, -1, time.Time{}, 6, false)},
			lag: 2, raw: 2,
		},
		{
			// C01 druid variant: 2 aborted data, 3 ABORT marker, 4 plain record; only offset 4 can be consumed.
			name: "C01 variant committed 2",
			in: PartitionInput{HasCommit: true, Committed: 2, OffsetsKnown: true, HighWatermark: 5, LastStable: 5, Isolation: ReadCommitted,
				Probe: probe(2, 4, 4, now.Add(-3*time.Second), 5, false), Now: now},
			lag: 1, raw: 3, timeLag: 3 * time.Second, timeKnown: true, flags: FlagControlRecords, control: 2,
		},
		{
			// read_committed measures against the LSO: an open transaction at 90 is not yet readable.
			name: "read_committed end is LSO",
			in:   PartitionInput{HasCommit: true, Committed: 80, OffsetsKnown: true, HighWatermark: 100, LastStable: 90, Isolation: ReadCommitted},
			lag:  10, raw: 10, openTxn: 10,
		},
		{
			name: "read_uncommitted end is HW",
			in:   PartitionInput{HasCommit: true, Committed: 80, OffsetsKnown: true, HighWatermark: 100, LastStable: 90},
			lag:  20, raw: 20, openTxn: 10,
		},
		{
			// a read_committed group whose commit is past the LSO (but not the HW): ahead by 5, lag 0.
			name: "committed past the LSO",
			in:   PartitionInput{HasCommit: true, Committed: 95, OffsetsKnown: true, HighWatermark: 100, LastStable: 90, Isolation: ReadCommitted},
			lag:  0, raw: 0, timeKnown: true, flags: FlagAheadOfEnd, ahead: 5, openTxn: 10,
		},
		{
			// C27: record 10 has timestamp -1; record 11's is used and the time lag is a lower bound.
			name: "C27 missing timestamp",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 12, LastStable: 12,
				Probe: probe(10, 10, 11, now.Add(-2*time.Second), 12, false), Now: now},
			lag: 2, raw: 2, timeLag: 2 * time.Second, timeKnown: true, flags: FlagLowerBound,
		},
		{
			// compaction removed 100..104: first consumable is 105, lag shrinks, the time lag is a lower bound
			name: "compaction gap",
			in: PartitionInput{HasCommit: true, Committed: 100, OffsetsKnown: true, HighWatermark: 110, LastStable: 110,
				Probe: gapProbe(100, 105, now.Add(-time.Minute), 110, 5), Now: now},
			lag: 5, raw: 10, timeLag: time.Minute, timeKnown: true, flags: FlagCompacted | FlagLowerBound, compacted: 5,
		},
		{
			// 100..101 compacted, 102 a COMMIT marker, 103 the first record: 2 compacted + 1 control, and the
			// time lag is a lower bound because of the compaction part only.
			name: "compaction gap then a marker",
			in: PartitionInput{HasCommit: true, Committed: 100, OffsetsKnown: true, HighWatermark: 110, LastStable: 110,
				Probe: gapProbe(100, 103, now.Add(-time.Minute), 110, 2), Now: now},
			lag: 7, raw: 10, timeLag: time.Minute, timeKnown: true, flags: FlagControlRecords | FlagCompacted | FlagLowerBound,
			control: 1, compacted: 2,
		},
		{
			// markers only before the first record: exact time lag, no lower bound.
			name: "markers before the first record",
			in: PartitionInput{HasCommit: true, Committed: 100, OffsetsKnown: true, HighWatermark: 110, LastStable: 110,
				Probe: gapProbe(100, 103, now.Add(-time.Minute), 110, 0), Now: now},
			lag: 7, raw: 10, timeLag: time.Minute, timeKnown: true, flags: FlagControlRecords, control: 3,
		},
		{
			// An older recording: gap without a count. The skipped range stays control (what it was before the split)
			// and the time lag is still a lower bound.
			name: "gap without a count",
			in: PartitionInput{HasCommit: true, Committed: 100, OffsetsKnown: true, HighWatermark: 110, LastStable: 110,
				Probe: probe(100, 105, 105, now.Add(-time.Minute), 110, true), Now: now},
			lag: 5, raw: 10, timeLag: time.Minute, timeKnown: true, flags: FlagControlRecords | FlagLowerBound, control: 5,
		},
		{
			// A probe for another offset (stale cache) must not be used.
			name: "probe for another offset ignored",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 12, LastStable: 12,
				Probe: probe(9, 9, 9, now.Add(-time.Hour), 12, false), Now: now},
			lag: 2, raw: 2,
		},
		{
			name:  "unknown offsets",
			in:    PartitionInput{HasCommit: true, Committed: 10},
			flags: FlagUnavailable,
		},
		{
			// A producer clock one second ahead of ours: the record's age is unknown, flagged, never a fake 0.
			name: "future timestamp is unknown and flagged",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: probe(10, 10, 10, now.Add(time.Second), 11, false), Now: now},
			lag: 1, raw: 1, flags: FlagFutureTimestamp,
		},
		{
			// year 9999 with offset lag 5: flagged, not time lag 0.
			name: "year 9999 with backlog",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 15, LastStable: 15,
				Probe: probe(10, 10, 10, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 11, false), Now: now},
			lag: 5, raw: 5, flags: FlagFutureTimestamp,
		},
		{
			// Exactly now is not the future: time lag 0, known.
			name: "timestamp equal to now",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: probe(10, 10, 10, now, 11, false), Now: now},
			lag: 1, raw: 1, timeKnown: true,
		},
		{
			// C27: a probe carrying the epoch (0 ms) is a missing timestamp, not a 56-year lag.
			name: "epoch timestamp is missing",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: probe(10, 10, 10, time.UnixMilli(0), 11, false), Now: now},
			lag: 1, raw: 1,
		},
		// A LogAppendTime is the appending broker's clock. The record was appended 5 s ago (true
		// time) by a broker whose clock is 3 s ahead of ours: its stamp reads now − 2 s.
		{
			name: "LogAppendTime, broker 3 s ahead, offset known",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: lat(probe(10, 10, 10, now.Add(-2*time.Second), 11, false), 2, 3*time.Second, true), Now: now},
			lag: 1, raw: 1, timeLag: 5 * time.Second, timeKnown: true, flags: FlagClockCorrected,
		},
		{
			// Without the broker's offset: 3 s short, and said so.
			name: "LogAppendTime, offset unknown",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: lat(probe(10, 10, 10, now.Add(-2*time.Second), 11, false), 2, 0, false), Now: now},
			lag: 1, raw: 1, timeLag: 2 * time.Second, timeKnown: true, flags: FlagClockUncorrected,
		},
		{
			// Appended 1 s ago by the same broker: the stamp reads 2 s in the future. Uncorrected it is a future
			// timestamp (unknown time lag); corrected it is 1 s.
			name: "LogAppendTime in our future, corrected",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: lat(probe(10, 10, 10, now.Add(2*time.Second), 11, false), 2, 3*time.Second, true), Now: now},
			lag: 1, raw: 1, timeLag: time.Second, timeKnown: true, flags: FlagClockCorrected,
		},
		{
			name: "LogAppendTime in our future, uncorrected",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: lat(probe(10, 10, 10, now.Add(2*time.Second), 11, false), -1, 0, false), Now: now},
			lag: 1, raw: 1, flags: FlagClockUncorrected | FlagFutureTimestamp,
		},
		{
			// A broker 3 s behind: appended 1 s ago, stamped now − 4 s; corrected 1 s, not 4.
			name: "LogAppendTime, broker 3 s behind",
			in: PartitionInput{HasCommit: true, Committed: 10, OffsetsKnown: true, HighWatermark: 11, LastStable: 11,
				Probe: lat(probe(10, 10, 10, now.Add(-4*time.Second), 11, false), 1, -3*time.Second, true), Now: now},
			lag: 1, raw: 1, timeLag: time.Second, timeKnown: true, flags: FlagClockCorrected,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ComputeLag(tc.in)
			if got.Lag != tc.lag || got.RawLag != tc.raw || got.ExpiredOffsets != tc.expired {
				t.Errorf("lag/raw/expired = %d/%d/%d, want %d/%d/%d", got.Lag, got.RawLag, got.ExpiredOffsets, tc.lag, tc.raw, tc.expired)
			}
			if got.TimeLag != tc.timeLag || got.TimeLagKnown != tc.timeKnown {
				t.Errorf("time lag = %v known=%v, want %v known=%v", got.TimeLag, got.TimeLagKnown, tc.timeLag, tc.timeKnown)
			}
			if got.Flags != tc.flags {
				t.Errorf("flags = %q, want %q", got.Flags, tc.flags)
			}
			if got.AheadOffsets() != tc.ahead || got.ControlOffsets() != tc.control || got.CompactedOffsets() != tc.compacted ||
				got.OpenTransactionOffsets() != tc.openTxn {
				t.Errorf("ahead/control/compacted/open txn = %d/%d/%d/%d, want %d/%d/%d/%d", got.AheadOffsets(), got.ControlOffsets(),
					got.CompactedOffsets(), got.OpenTransactionOffsets(), tc.ahead, tc.control, tc.compacted, tc.openTxn)
			}
		})
	}
}

// TestClassifyRecordTimestamp: the invalid stamps counted by reason, and the bounds of the plausible range.
func TestClassifyRecordTimestamp(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		ts   time.Time
		want TimestampProblem
	}{
		{"zero time", time.Time{}, TimestampMissing},
		{"NO_TIMESTAMP", time.UnixMilli(-1), TimestampMissing},
		{"the epoch: a client without a clock", time.UnixMilli(0), TimestampMissing},
		{"1 ms after the epoch", time.UnixMilli(1), TimestampWrongUnit},
		// 2026-11-29 in seconds read as milliseconds: 1970-01-21, a 56-year time lag if not classified
		{"seconds as milliseconds", time.UnixMilli(now.Unix()), TimestampWrongUnit},
		{"last wrong-unit millisecond", time.UnixMilli(1e11 - 1), TimestampWrongUnit},
		{"first plausible millisecond (1973-03-03)", time.UnixMilli(1e11), ""},
		{"now", now, ""},
		// year 9999 is plausible in this sense: it is reported as future (flag future_timestamp), not as a unit error
		{"year 9999", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), ""},
		{"last plausible millisecond (year 33658)", time.UnixMilli(1e15 - 1), ""},
		// 2026-11-29 in microseconds read as milliseconds: year ~58,800
		{"microseconds as milliseconds", time.UnixMilli(now.UnixMicro()), TimestampWrongUnit},
	} {
		if got := ClassifyRecordTimestamp(tc.ts); got != tc.want {
			t.Errorf("%s: ClassifyRecordTimestamp(%d ms) = %q, want %q", tc.name, tc.ts.UnixMilli(), got, tc.want)
		}
		if got := ValidRecordTimestamp(tc.ts); got != (tc.want == "") {
			t.Errorf("%s: ValidRecordTimestamp = %v, want %v", tc.name, got, tc.want == "")
		}
	}
}

func TestLagFromLastProcessed(t *testing.T) {
	// C19: last processed 999, HW 1000: caught up, lag 0 (not 1).
	if got := LagFromLastProcessed(1000, 999); got != 0 {
		t.Fatalf("LagFromLastProcessed(1000, 999) = %d, want 0", got)
	}
	if got := LagFromLastProcessed(1000, 989); got != 10 {
		t.Fatalf("LagFromLastProcessed(1000, 989) = %d, want 10", got)
	}
	if got := LagFromLastProcessed(7, -1); got != 7 {
		t.Fatalf("LagFromLastProcessed(7, -1) = %d, want 7", got)
	}
}

func TestFlagsString(t *testing.T) {
	f := FlagNoCommit | FlagReplay
	if f.String() != "no_commit,replay" {
		t.Fatalf("String = %q", f.String())
	}
	back, ok := ParseFlags(f.String())
	if !ok || back != f {
		t.Fatalf("ParseFlags round trip = %v %v", back, ok)
	}
	if _, ok := ParseFlags("bogus"); ok {
		t.Fatal("ParseFlags accepted an unknown name")
	}
}

func ptr[T any](v T) *T { return &v }
