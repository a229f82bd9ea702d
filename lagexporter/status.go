package lagexporter

import (
	"encoding/json"
	"fmt"
)

// Status is the health of a group-partition or a group, modelled on Burrow's evaluator. Values are ordered by
// severity; a group's status is its most severe partition's.
type Status uint8

// The statuses, least severe first.
const (
	StatusOK Status = iota
	// StatusRewind: the committed offset moved backwards (reset, rewind), the group is replaying and is otherwise
	// healthy. The replay is an episode beside the health status, not instead of it (GroupLag.Replaying): a replaying
	// partition that stops committing is STOP, one whose live backlog (past the replay boundary) meets an ERR
	// threshold is ERR (case C30).
	StatusRewind
	// StatusAhead: the committed offset has been past End in status.ahead_reads consecutive commit-first reads
	// (MirrorMaker 2 offset sync, a stale client re-committing, a truncated log): the lag is 0, but the group will
	// skip the records written between End and its commit. It clears at the first read that is not ahead.
	StatusAhead
	// StatusWarn: the consumer commits but falls behind (lag grew over the whole window), or a WARN threshold is met.
	StatusWarn
	// StatusStall: the consumer commits (or has members) but its offset did not move over the whole window, with lag.
	StatusStall
	// StatusStop: no new commit for longer than status.stop_after, with lag (case C12).
	StatusStop
	// StatusErr: an ERR threshold (time or offset lag) is met.
	StatusErr
)

// StatusNames names each status, in severity order; they are the values of the `status` label.
var StatusNames = []string{"OK", "REWIND", "AHEAD", "WARN", "STALL", "STOP", "ERR"}

func (s Status) String() string {
	if int(s) < len(StatusNames) {
		return StatusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// MarshalJSON writes the status name.
func (s Status) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON reads a status name.
func (s *Status) UnmarshalJSON(b []byte) error {
	var n string
	if err := json.Unmarshal(b, &n); err != nil {
		return err
	}
	for i, name := range StatusNames {
		if name == n {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("status %q is not one of %v", n, StatusNames)
}
