package timeline

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// Player is the fake cluster behind `tidemark lag eval`: a lagexporter.Cluster that answers from a timeline, one line
// per cycle (Advance moves to the next line). Record reads are answered from the line's recorded Records, else
// synthesized from the Log runs seen so far.
type Player struct {
	tl   *Timeline
	cur  int
	runs map[partKey][]RecordRun
}

// NewPlayer returns a player positioned before the first line.
func NewPlayer(tl *Timeline) *Player {
	return &Player{tl: tl, cur: -1, runs: map[partKey][]RecordRun{}}
}

// Advance moves to the next line and returns its time and file line number; false at the end.
func (c *Player) Advance() (time.Time, int, bool) {
	if c.cur+1 >= len(c.tl.Lines) {
		return time.Time{}, 0, false
	}
	c.cur++
	o := &c.tl.Lines[c.cur]
	for _, r := range o.Log {
		k := partKey{r.Topic, r.Partition}
		c.runs[k] = append(c.runs[k], r)
		slices.SortStableFunc(c.runs[k], func(a, b RecordRun) int { return cmp.Compare(a.From, b.From) })
	}
	return o.Time, c.tl.lineNo[c.cur], true
}

func (c *Player) line() *Line { return &c.tl.Lines[c.cur] }

// Metadata returns the line's topics without offsets, or nil when the recorded cycle failed to read them (Failed).
// It also returns the line's cycle_timeout errors: Metadata is the one call every cycle makes, and the loop adds
// its own only when its context expires, which a replay's never does.
func (c *Player) Metadata(context.Context) ([]lagexporter.TopicObservation, error) {
	o := c.line()
	if o.Failed == lagexporter.ErrKindMetadata {
		return nil, c.lineErrors(lagexporter.ErrKindMetadata, lagexporter.ErrKindCycleTimeout)
	}
	out := make([]lagexporter.TopicObservation, len(o.Topics))
	for i, t := range o.Topics {
		out[i] = lagexporter.TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType}
		for _, p := range t.Partitions {
			out[i].Partitions = append(out[i].Partitions, lagexporter.PartitionObservation{Partition: p.Partition, Leader: p.Leader})
		}
	}
	return out, c.lineErrors(lagexporter.ErrKindMetadata, lagexporter.ErrKindCycleTimeout)
}

// lineErrors returns the line's errors of the given kinds, as the live reader's call that makes them would.
func (c *Player) lineErrors(kinds ...lagexporter.ErrorKind) error {
	var errs lagexporter.CycleErrors
	for _, e := range c.line().Errors {
		if slices.Contains(kinds, e.Kind) {
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Groups returns the line's groups without offsets.
func (c *Player) Groups(context.Context) ([]lagexporter.GroupObservation, error) {
	o := c.line()
	if o.Failed == lagexporter.ErrKindGroups {
		return nil, c.lineErrors(lagexporter.ErrKindGroups)
	}
	out := make([]lagexporter.GroupObservation, len(o.Groups))
	for i, g := range o.Groups {
		// what a listing and describe read: everything but the positions, which CommittedOffsets returns
		g.Offsets, g.Error, g.Reset = nil, "", ""
		out[i] = g
	}
	return out, c.lineErrors(lagexporter.ErrKindGroups)
}

// CommittedOffsets returns the line's committed offsets of the named groups.
func (c *Player) CommittedOffsets(_ context.Context, groups []string) ([]lagexporter.GroupObservation, error) {
	o := c.line()
	var out []lagexporter.GroupObservation
	for _, name := range groups {
		for _, g := range o.Groups {
			if g.Group == name {
				out = append(out, lagexporter.GroupObservation{Group: name, Offsets: g.Offsets, Error: g.Error, Reset: g.Reset})
			}
		}
	}
	return out, c.lineErrors(lagexporter.ErrKindCommitted)
}

// ListOffsets returns the line's partition offsets (and retention settings, log sizes) for the asked topics, with the
// errors of the kinds the live reader's ListOffsets makes: list_offsets, unavailable (no leader) and configs.
func (c *Player) ListOffsets(_ context.Context, topics []lagexporter.TopicObservation) ([]lagexporter.TopicObservation, error) {
	o := c.line()
	var out []lagexporter.TopicObservation
	for _, want := range topics {
		for _, t := range o.Topics {
			if t.Topic == want.Topic {
				out = append(out, t)
			}
		}
	}
	return out, c.lineErrors(lagexporter.ErrKindListOffsets, lagexporter.ErrKindUnavailable, lagexporter.ErrKindConfigs)
}

// ReadRecords answers from the line's recorded probes, else from the log runs.
func (c *Player) ReadRecords(_ context.Context, reqs []lagexporter.RecordRequest) ([]lagexporter.RecordProbe, error) {
	o := c.line()
	out := make([]lagexporter.RecordProbe, 0, len(reqs))
	for _, rq := range reqs {
		found := false
		for _, r := range o.Records {
			if r.Topic == rq.Topic && r.Partition == rq.Partition && r.Offset == rq.Offset && r.Isolation.OrDefault() == rq.Isolation {
				r.TopicID = rq.TopicID
				out = append(out, r)
				found = true
				break
			}
		}
		if found {
			continue
		}
		if runs, ok := c.runs[partKey{rq.Topic, rq.Partition}]; ok {
			out = append(out, probeRuns(runs, rq))
			continue
		}
		out = append(out, lagexporter.RecordProbe{Topic: rq.Topic, TopicID: rq.TopicID, Partition: rq.Partition, Offset: rq.Offset,
			Isolation: rq.Isolation, Error: "record not in timeline"})
	}
	return out, c.lineErrors(lagexporter.ErrKindRecords)
}

// probeRuns answers a record request from log runs sorted by From, the way a Fetch from rq.Offset would: offsets no
// run covers are compacted (Gap, GapOffsets), control runs and (read_committed) aborted runs are skipped, and records
// whose timestamp is not valid are counted by problem until the first valid one.
func probeRuns(runs []RecordRun, rq lagexporter.RecordRequest) lagexporter.RecordProbe {
	p := lagexporter.RecordProbe{Topic: rq.Topic, TopicID: rq.TopicID, Partition: rq.Partition, Offset: rq.Offset,
		Isolation: rq.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: rq.End}
	pos := rq.Offset
	for _, r := range runs {
		if pos >= rq.End {
			break
		}
		if r.To <= pos {
			continue
		}
		if r.From > pos {
			if p.FirstOffset < 0 {
				p.Gap = true // offsets [pos, r.From) are missing: compacted
				p.GapOffsets += min(r.From, rq.End) - pos
			}
			pos = r.From
			if pos >= rq.End {
				break
			}
		}
		end := min(r.To, rq.End)
		switch {
		case r.Kind == "control", r.Kind == "aborted" && rq.Isolation == lagexporter.ReadCommitted:
			// not consumable
		case r.Kind == "no_timestamp":
			if p.FirstOffset < 0 {
				p.FirstOffset = pos
			}
			p.MissingTimestamps += int(end - pos)
		default:
			if p.FirstOffset < 0 {
				p.FirstOffset = pos
			}
			for off := pos; off < end; off++ {
				ts := r.timestampAt(off)
				switch lagexporter.ClassifyRecordTimestamp(ts) {
				case "":
					p.TimestampOffset, p.Timestamp = off, ts
					return p
				case lagexporter.TimestampMissing:
					p.MissingTimestamps++ // a timestamp <= 0 is missing, as in the live reader (C27)
				default:
					p.WrongUnitTimestamps++
				}
			}
		}
		pos = r.To
	}
	if pos < rq.End && p.FirstOffset < 0 {
		p.Gap = true
		p.GapOffsets += rq.End - pos
	}
	return p
}
