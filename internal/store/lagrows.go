package store

import "github.com/tidemark/tidemark/lagexporter"

// LagRows maps a lag-exporter snapshot onto lag_snapshots rows: one per (group, topic, partition) of s, at s.Time,
// in s's order. A partition without a committed offset is stored with committed = -1; an unknown time lag as 0 ms
// (its flags say why). The mapping lives here, beside LagRow and its enums, because the dependency points this way:
// lagexporter is a leaf that knows nothing of storage (and pulls in no database driver), while the store owns the
// table's columns and Enum8 numbering.
func LagRows(s *lagexporter.Snapshot) []LagRow {
	var rows []LagRow
	for _, gl := range s.Groups {
		for _, p := range gl.Partitions {
			committed := int64(-1)
			if p.HasCommit {
				committed = p.Committed
			}
			var tl int64
			if p.TimeLagKnown {
				tl = p.TimeLag.Milliseconds()
			}
			rows = append(rows, LagRow{
				At: s.Time, Cluster: s.Cluster, Group: gl.Group, Topic: p.Topic, Partition: p.Partition,
				Committed: committed, LogStart: p.LogStart, End: p.End, Lag: p.Lag, Expired: p.ExpiredOffsets,
				TimeLagMs: tl, Status: LagStatusOf(gl.Status), PartitionStatus: LagStatusOf(p.Status), Flags: uint32(p.Flags),
				GroupType: GroupTypeOf(gl.GroupType), Subtopology: p.Subtopology(), Internal: p.Internal(),
			})
		}
	}
	return rows
}

// GroupTypeOf maps the lag exporter's group types (lagexporter.GroupClassic, ...) onto lag_snapshots.group_type;
// an unknown or empty type is classic, the Enum8's default.
func GroupTypeOf(t string) GroupType {
	switch t {
	case lagexporter.GroupConsumer:
		return GroupConsumer
	case lagexporter.GroupShare:
		return GroupShare
	case lagexporter.GroupStreams:
		return GroupStreams
	}
	return GroupClassic
}

// LagStatusOf maps the lag exporter's statuses (OK, REWIND, WARN, STALL, STOP, ERR) onto lag_snapshots' status
// Enum8; any other (AHEAD, which is not stored as its own value, or an empty status) is 'unknown'.
func LagStatusOf(s lagexporter.Status) LagStatus {
	switch s {
	case lagexporter.StatusOK:
		return StatusOK
	case lagexporter.StatusRewind:
		return StatusRewind
	case lagexporter.StatusWarn:
		return StatusWarn
	case lagexporter.StatusStall:
		return StatusStall
	case lagexporter.StatusStop:
		return StatusStop
	case lagexporter.StatusErr:
		return StatusErr
	}
	return StatusUnknown
}
