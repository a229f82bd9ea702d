package lagexporter

import "errors"

// ErrUnknownGroup is returned (wrapped) for a group the cluster does not know, e.g. when a group named on the command
// line does not exist.
var ErrUnknownGroup = errors.New("unknown consumer group")

// ErrorKind classifies a failure of one part of a poll cycle, for the errors-by-kind health metric. The set is closed:
// these are the values of the `kind` label of tidemark_lag_exporter_errors_total.
type ErrorKind string

// The kinds of cycle errors, one per kind of cluster read.
const (
	ErrKindMetadata     ErrorKind = "metadata"      // topic metadata (partitions, leaders, topic ids)
	ErrKindGroups       ErrorKind = "groups"        // listing or describing groups
	ErrKindCommitted    ErrorKind = "committed"     // OffsetFetch of committed offsets
	ErrKindListOffsets  ErrorKind = "list_offsets"  // ListOffsets (log start, high watermark, last stable offset)
	ErrKindRecords      ErrorKind = "records"       // the small fetch of a record timestamp
	ErrKindUnavailable  ErrorKind = "unavailable"   // a partition without leader, or an unreachable broker
	ErrKindCycleTimeout ErrorKind = "cycle_timeout" // the cycle did not finish within its deadline
	ErrKindConfigs      ErrorKind = "configs"       // DescribeConfigs (retention settings) or DescribeLogDirs (log sizes)
	// ErrKindUnsupported: a broker cannot answer a group read at all (an RPC or version it lacks, e.g. share-group
	// RPCs before Kafka 4.1): those groups are listed without it, every other result is kept.
	ErrKindUnsupported ErrorKind = "unsupported"
)

// ErrorKinds lists every ErrorKind, so the health metric can expose a zero for each.
var ErrorKinds = []ErrorKind{ErrKindMetadata, ErrKindGroups, ErrKindCommitted, ErrKindListOffsets, ErrKindRecords,
	ErrKindUnavailable, ErrKindCycleTimeout, ErrKindConfigs, ErrKindUnsupported}

// Codes of PartitionObservation.ErrorCode besides Kafka's own error names.
const (
	ErrCodeNetwork = "NETWORK" // the partition's leader could not be reached (connection refused, reset, timed out)
	ErrCodeTimeout = "TIMEOUT" // the cycle's deadline passed before the partition was read
	ErrCodeUnknown = "UNKNOWN" // any other failure
)

// CycleError is one failed part of a cycle: which kind of read, what it was about (a broker, group or partition), and
// the message. A cycle with CycleErrors still produces a snapshot: every other result is kept and the affected parts
// are flagged (partial failure is normal in Kafka).
type CycleError struct {
	Kind    ErrorKind `json:"kind"`
	Subject string    `json:"subject,omitempty"` // e.g. "group g1", "orders/3", "broker 2"
	Message string    `json:"message"`
}

func (e CycleError) Error() string {
	if e.Subject == "" {
		return string(e.Kind) + ": " + e.Message
	}
	return string(e.Kind) + " " + e.Subject + ": " + e.Message
}
