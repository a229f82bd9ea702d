package latency

import (
	"math"
	"time"
)

// NoTimestamp is Kafka's NO_TIMESTAMP sentinel (-1): a record from a pre-0.10 message format or a client that did not
// set a timestamp. It is not an epoch value (cases C27).
const NoTimestamp int64 = -1

// Unit is the unit a [Stamp] value is declared in: time since the Unix epoch in milliseconds (Kafka record
// timestamps), microseconds or nanoseconds (instrumentation stamps).
type Unit uint8

// Units a stamp may be declared in.
const (
	Millis Unit = iota // Kafka record timestamps and LogAppendTime
	Micros
	Nanos
)

// msPerUnit is how many milliseconds one unit of each kind is.
var msPerUnit = [...]float64{Millis: 1, Micros: 1e-3, Nanos: 1e-6}

// Moment is one point a message passes. Moments are ordered: a later moment cannot physically happen before an
// earlier one, which is what the causal envelope and the monotone projection rely on.
type Moment uint8

// The moments of a message, in causal order.
const (
	Produce      Moment = iota // the producer created the record (CreateTime or a produce-time header); producer clock
	SourceAppend               // mirrored topics only: append on the source cluster (a header, C28); source broker clock
	Append                     // LogAppendTime on the partition leader; broker clock
	Receive                    // the consumer application got the record; consumer clock
	Processed                  // processing completed; consumer clock
	Commit                     // the group committed an offset past the record; an upper bound of Processed
	NumMoments
)

var momentNames = [...]string{"produce", "source_append", "append", "receive", "processed", "commit"}

// String returns the moment's snake_case name, as used in metric labels and docs.
func (m Moment) String() string {
	if int(m) < len(momentNames) {
		return momentNames[m]
	}
	return "unknown"
}

// HostID identifies a host's clock inside one [Engine]; [Engine.Host] interns names. [RefHost] (0) is the reference
// clock itself, whose offset is 0 by definition.
type HostID int32

// RefHost is the reference clock (the collector's). Stamps taken on it need no correction.
const RefHost HostID = 0

// UnknownHost stamps a moment whose clock cannot be named: e.g. a LogAppendTime whose partition leader at append time
// is not known (docs/latency.md, "Whose clock stamped the append"). Its offset is unknown and never estimated (two
// such stamps may come from two different clocks, so no envelope is fitted and no two of them count as one clock);
// the projection moves it only as far as order requires, its pairs are skew-suspected and no host is blamed.
const UnknownHost HostID = -1

// Stamp is one moment as read on one host's clock. Value counts Unit since the Unix epoch on Host's clock. The zero
// Stamp (Value 0) means "not observed" and is silently absent; Value -1 is Kafka's NO_TIMESTAMP and is invalid.
type Stamp struct {
	Value int64
	Host  HostID
	Unit  Unit
}

// MillisStamp returns a millisecond stamp taken on host, the common case for Kafka record timestamps.
func MillisStamp(host HostID, ms int64) Stamp { return Stamp{Value: ms, Host: host, Unit: Millis} }

// TimeStamp returns a nanosecond stamp of t taken on host (instrumentation stamps); the zero time gives the absent
// stamp.
func TimeStamp(host HostID, t time.Time) Stamp {
	if t.IsZero() {
		return Stamp{}
	}
	return Stamp{Value: t.UnixNano(), Host: host, Unit: Nanos}
}

// Present reports whether the stamp was observed at all (valid or not).
func (s Stamp) Present() bool { return s.Value != 0 }

// Reason says why a stamp was rejected. ReasonOK means the stamp is usable.
type Reason uint8

// Validation outcomes; every reason but ReasonOK is counted per moment and the stamp is dropped.
const (
	ReasonOK       Reason = iota
	ReasonMissing         // Kafka NO_TIMESTAMP (-1)
	ReasonNegative        // another negative value: corrupt
	ReasonSeconds         // declared ms but looks like seconds since the epoch
	ReasonMicros          // declared ms but looks like microseconds
	ReasonNanos           // declared ms (or µs) but looks like nanoseconds
	ReasonTooOld          // further before the append time than Bounds allow
	ReasonTooNew          // further after the append time than Bounds allow
	NumReasons
)

var reasonNames = [...]string{"ok", "missing", "negative", "unit_seconds", "unit_micros", "unit_nanos", "too_old", "too_new"}

// String returns the reason's snake_case name (a metric label value).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Plausible epoch range in milliseconds: 1e11 ms is 1973-03-03, 1e14 ms is year 5138. Seconds, microseconds and
// nanoseconds since any date after 1973 fall outside it by three orders of magnitude each way, so the unit of a
// mislabelled stamp is unambiguous (seconds 1e8..1e11, µs 1e14..1e17, ns >= 1e17).
const (
	minPlausibleMs = 1e11
	maxPlausibleMs = 1e14
)

// ToMillis converts a stamp to milliseconds since the epoch on its host's clock and checks that the value is a
// plausible epoch time in the declared unit. It does not apply [Bounds]; [Bounds.Check] does. The zero stamp returns
// (0, ReasonOK) and callers test Present first.
func ToMillis(s Stamp) (float64, Reason) {
	switch {
	case s.Value == NoTimestamp:
		return 0, ReasonMissing
	case s.Value < 0:
		return 0, ReasonNegative
	}
	u := s.Unit
	if int(u) >= len(msPerUnit) {
		u = Millis
	}
	ms := float64(s.Value) * msPerUnit[u]
	if ms >= minPlausibleMs && ms < maxPlausibleMs {
		return ms, ReasonOK
	}
	// Too large by 1e3 or 1e6: the value is in a finer unit than declared.
	finer := 0
	switch {
	case ms >= maxPlausibleMs*1e3:
		finer = 2
	case ms >= maxPlausibleMs:
		finer = 1
	}
	if finer > 0 {
		if int(u)+finer == int(Micros) {
			return 0, ReasonMicros
		}
		return 0, ReasonNanos
	}
	if u == Millis && ms*1e3 >= minPlausibleMs && ms*1e3 < maxPlausibleMs {
		return 0, ReasonSeconds
	}
	return 0, ReasonTooOld
}

// Bounds are how far a stamp may lie from the record's append time (on the append host's clock, before any skew
// correction) before it is invalid rather than late or skewed. MaxAge bounds the "normal" side (a produce stamp
// before the append, a receive/processed stamp after it: replays and backfills may legitimately be old);
// MaxSkew bounds the impossible side (a produce stamp after the append, a processed stamp before it), which only
// clock skew can explain and which beyond MaxSkew is a broken clock or a broken client, not skew worth correcting.
type Bounds struct {
	MaxAge  time.Duration // default 400 days: longer than any sane retention
	MaxSkew time.Duration // default 1 h, Kafka's default log.message.timestamp.after.max.ms (KIP-937)
}

// Check returns ReasonOK when ms (a stamp of moment m) lies within the bounds of anchorMs (the append time, or the
// anchor [Record] chose), ReasonTooOld or ReasonTooNew otherwise. Both arguments are milliseconds.
func (b Bounds) Check(m Moment, ms, anchorMs float64) Reason {
	return boundsMs{age: durMs(b.MaxAge), skew: durMs(b.MaxSkew)}.check(m, ms, anchorMs)
}

// boundsMs is Bounds in milliseconds, precomputed for the per-record path.
type boundsMs struct{ age, skew float64 }

func (b boundsMs) check(m Moment, ms, anchorMs float64) Reason {
	before, after := b.age, b.skew // moments before the anchor: may be old, may not be much in its future
	if m > Append {
		before, after = b.skew, b.age
	}
	switch d := ms - anchorMs; {
	case d < -before:
		return ReasonTooOld
	case d > after:
		return ReasonTooNew
	}
	return ReasonOK
}

// Record is one message as observed: its position and the stamps of the moments it passed. Absent moments have the
// zero Stamp. Offset is the record's offset in (group, topic, partition), which the [Path] it is fed to names.
type Record struct {
	Offset int64
	Stamps [NumMoments]Stamp
}

// msToTime converts milliseconds since the epoch (float) to a time.Time.
func msToTime(ms float64) time.Time {
	sec, frac := math.Modf(ms / 1e3)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// timeToMs converts a time to milliseconds since the epoch as a float64 (sub-millisecond precision kept).
func timeToMs(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e6
}
