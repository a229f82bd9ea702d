package lagexporter

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

// The record-probe cache keeps an answer compactly (cachedProbe) and must give back exactly the RecordProbe the
// Cluster answered: every field, time.Time's wall clock, monotonic reading and location included.
func TestCachedProbeGivesBackTheAnswer(t *testing.T) {
	// sarama's record time: the batch's first timestamp (time.Unix of its milliseconds, time.Local) plus the delta
	sarama := time.Unix(1_700_000_000, 123*int64(time.Millisecond)).Add(45 * time.Millisecond)
	clock := &AppendClock{Broker: 2, Known: true, Offset: 3 * time.Millisecond, Uncertainty: time.Millisecond}
	base := RecordProbe{Topic: "orders", TopicID: "id-1", Partition: 7, Offset: 100, Isolation: ReadUncommitted,
		FirstOffset: 102, ScannedTo: 110, TimestampOffset: 103, Timestamp: sarama, Gap: true, GapOffsets: 1,
		MissingTimestamps: 1}
	with := func(f func(*RecordProbe)) RecordProbe { r := base; f(&r); return r }
	cases := []struct {
		name    string
		r       RecordProbe
		compact bool // fits the compact form (the reader's and the timeline's usual answers do)
	}{
		{"reader's answer", base, true},
		{"read_committed", with(func(r *RecordProbe) { r.Isolation = ReadCommitted }), true},
		{"empty isolation", with(func(r *RecordProbe) { r.Isolation = "" }), true},
		{"no record found", with(func(r *RecordProbe) {
			r.FirstOffset, r.TimestampOffset, r.Timestamp, r.Gap, r.GapOffsets = -1, -1, time.Time{}, false, 0
		}), true},
		{"UTC (a timeline's JSON)", with(func(r *RecordProbe) { r.Timestamp = r.Timestamp.UTC() }), true},
		{"LogAppendTime clock", with(func(r *RecordProbe) { r.AppendClock = clock }), true},
		{"year 9999", with(func(r *RecordProbe) { r.Timestamp = time.Date(9999, 1, 1, 0, 0, 0, 0, time.Local) }), true},
		{"wrong-unit counts", with(func(r *RecordProbe) { r.WrongUnitTimestamps, r.MissingTimestamps = 4, math.MaxInt32 }), true},
		{"before 1970", with(func(r *RecordProbe) { r.Timestamp = time.UnixMilli(-1_500).UTC() }), true},
		{"fixed zone", with(func(r *RecordProbe) { r.Timestamp = r.Timestamp.In(time.FixedZone("X", 3600)) }), false},
		{"sub-millisecond", with(func(r *RecordProbe) { r.Timestamp = r.Timestamp.Add(time.Microsecond) }), false},
		{"monotonic reading", with(func(r *RecordProbe) { r.Timestamp = time.Now() }), false},
		{"count beyond int32", with(func(r *RecordProbe) { r.MissingTimestamps = math.MaxInt32 + 1 }), false},
		{"negative count beyond int32", with(func(r *RecordProbe) { r.WrongUnitTimestamps = math.MinInt32 - 1 }), false},
		{"other isolation", with(func(r *RecordProbe) { r.Isolation = "READ_COMMITTED" }), false},
	}
	for _, c := range cases {
		k := probeCacheKey(c.r.TopicID, c.r.Topic, c.r.Partition, c.r.Offset, c.r.Isolation)
		e, exact := packProbe(k, &c.r, 9)
		if exact != c.compact {
			t.Errorf("%s: compact %v, want %v", c.name, exact, c.compact)
		}
		if e.used != 9 || e.flags&probeAnswered == 0 || e.firstOffset != c.r.FirstOffset ||
			e.timestampOffset != c.r.TimestampOffset || e.scannedTo != c.r.ScannedTo {
			t.Errorf("%s: entry %+v lost what the next cycle decides on", c.name, e)
		}
		if !exact {
			continue
		}
		got := e.probe(k)
		if got != c.r {
			t.Errorf("%s: got back\n%+v, want\n%+v", c.name, got, c.r)
		}
		if got.Timestamp.Location() != c.r.Timestamp.Location() || got.Timestamp.String() != c.r.Timestamp.String() {
			t.Errorf("%s: timestamp %v, want %v", c.name, got.Timestamp, c.r.Timestamp)
		}
	}
}

// TestCachedProbeEntrySize pins the cut: the entry is the answer only, 64 B, not the 168-B RecordProbe, under a
// 16-B key in its topic's map.
func TestCachedProbeEntrySize(t *testing.T) {
	if s := unsafe.Sizeof(cachedProbe{}); s != 64 {
		t.Errorf("cachedProbe is %d B, want 64", s)
	}
	if s := unsafe.Sizeof(probeSpot{}); s != 16 { // the key within its topic's map
		t.Errorf("probeSpot is %d B, want 16", s)
	}
}
