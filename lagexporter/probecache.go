package lagexporter

import "time"

// cacheKey is a record probe's question: where it was read (topic incarnation, partition, offset) and whether for
// read_committed. The answer's RecordProbe is rebuilt from it and the entry's cachedProbe (cachedProbe.probe).
type cacheKey struct {
	probeTopic
	probeSpot
}

type probeTopic struct{ id, name string }

type probeSpot struct {
	offset        int64
	partition     int32
	readCommitted bool
}

func probeCacheKey(topicID, topic string, partition int32, offset int64, iso Isolation) cacheKey {
	return cacheKey{probeTopic{id: topicID, name: topic},
		probeSpot{offset: offset, partition: partition, readCommitted: iso.OrDefault() == ReadCommitted}}
}

// cachedAt returns k's entry.
func (l *Loop) cachedAt(k cacheKey) (cachedProbe, bool) {
	e, ok := l.cache[k.probeTopic][k.probeSpot]
	return e, ok
}

// setCached sets k's entry.
func (l *Loop) setCached(k cacheKey, e cachedProbe) {
	m := l.cache[k.probeTopic]
	if m == nil {
		m = map[probeSpot]cachedProbe{}
		l.cache[k.probeTopic] = m
	}
	m[k.probeSpot] = e
}

// cachedProbe is a cache entry: the answer of a RecordProbe without what its key holds (and without Error: answers
// with one are not cached), 64 B instead of the probe's 168 under a 16-B key instead of 64, and the readRecords call
// that last used it. The map is updated in place, so a steady cycle allocates nothing for it. An answer the compact
// form cannot give back identically (a Timestamp not in whole milliseconds on time.Local or UTC, a count beyond
// int32, an Isolation neither empty nor the key's) is kept whole in Loop.wide, flagged probeWide.
type cachedProbe struct {
	firstOffset, scannedTo, timestampOffset, gapOffsets int64
	timestampMs                                         int64 // Timestamp as Unix milliseconds, unless probeNoTime
	clock                                               *AppendClock
	missing, wrongUnit                                  int32
	used                                                uint32 // probeSeq of the last call that used it (wraps)
	flags                                               uint8
}

const (
	probeAnswered    uint8 = 1 << iota // not a placeholder awaiting the answer
	probeWide                          // the answer is in Loop.wide
	probeGap                           // RecordProbe.Gap
	probeNoTime                        // Timestamp is the zero time
	probeUTC                           // Timestamp's location is UTC (else time.Local)
	probeNoIsolation                   // Isolation is empty (Kafka's default, read_uncommitted)
)

// packProbe returns r's compact cache entry, and false when the entry would not give r back identically.
func packProbe(k cacheKey, r *RecordProbe, used uint32) (cachedProbe, bool) {
	c := cachedProbe{firstOffset: r.FirstOffset, scannedTo: r.ScannedTo, timestampOffset: r.TimestampOffset,
		gapOffsets: r.GapOffsets, clock: r.AppendClock, missing: int32(r.MissingTimestamps),
		wrongUnit: int32(r.WrongUnitTimestamps), used: used, flags: probeAnswered}
	if r.Gap {
		c.flags |= probeGap
	}
	switch {
	case r.Timestamp.IsZero():
		c.flags |= probeNoTime
	case r.Timestamp.Location() == time.UTC:
		c.flags |= probeUTC
		c.timestampMs = r.Timestamp.UnixMilli()
	default:
		c.timestampMs = r.Timestamp.UnixMilli()
	}
	if r.Isolation == "" {
		c.flags |= probeNoIsolation
	}
	return c, c.probe(k) == *r // every field is compared: time.Time's wall, ext and location, the clock's pointer
}

// probe is the answer c holds for k (not for a probeWide entry).
func (c *cachedProbe) probe(k cacheKey) RecordProbe {
	r := RecordProbe{Topic: k.name, TopicID: k.id, Partition: k.partition, Offset: k.offset,
		Isolation: ReadUncommitted, FirstOffset: c.firstOffset, ScannedTo: c.scannedTo,
		TimestampOffset: c.timestampOffset, Gap: c.flags&probeGap != 0, GapOffsets: c.gapOffsets,
		MissingTimestamps: int(c.missing), WrongUnitTimestamps: int(c.wrongUnit), AppendClock: c.clock}
	if k.readCommitted {
		r.Isolation = ReadCommitted
	}
	if c.flags&probeNoIsolation != 0 {
		r.Isolation = ""
	}
	if c.flags&probeNoTime == 0 {
		r.Timestamp = time.UnixMilli(c.timestampMs) // time.Local, as the reader's (sarama's) record times
		if c.flags&probeUTC != 0 {
			r.Timestamp = r.Timestamp.UTC()
		}
	}
	return r
}

// cached returns the answer of the entry c of k.
func (l *Loop) cached(k cacheKey, c *cachedProbe) RecordProbe {
	if c.flags&probeWide != 0 {
		return l.wide[k]
	}
	return c.probe(k)
}

// dropCached deletes k's entry c.
func (l *Loop) dropCached(k cacheKey, c *cachedProbe) {
	if c.flags&probeWide != 0 {
		delete(l.wide, k)
	}
	delete(l.cache[k.probeTopic], k.probeSpot) // an emptied topic's map goes at the end of readRecords
}
