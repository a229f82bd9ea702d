package lagexporter

import (
	"context"
	"errors"
)

// Cluster is the narrow view of a Kafka cluster that the poll loop consumes. internal/kafka/lagread implements it
// over sarama (batching every call per broker or group coordinator); timeline.Player implements it over a timeline
// file.
//
// Partial failure is normal: every method returns all the results it has, marks the missing parts in them
// (PartitionObservation.Error, GroupObservation.Error, RecordProbe.Error), and returns a CycleErrors describing
// each failure (or another error when nothing at all could be read). The loop calls the methods in this order each
// cycle, and reads committed offsets BEFORE end offsets, so that a consumer committing in between can only make the
// lag look larger, never negative (case C03).
type Cluster interface {
	// Metadata returns every topic with its id and partitions (Leader set, offsets not yet read).
	Metadata(ctx context.Context) ([]TopicObservation, error)
	// Groups lists every consumer group and describes it (state, members with decoded assignments).
	Groups(ctx context.Context) ([]GroupObservation, error)
	// CommittedOffsets reads the committed offsets of the named groups (Kafka's -1 "no commit" answers are left out),
	// returning one GroupObservation per name with only Group, Offsets, Error and (when known) Reset set. For a share
	// group the offsets are its share-partition start offsets.
	CommittedOffsets(ctx context.Context, groups []string) ([]GroupObservation, error)
	// ListOffsets reads log start, high watermark and last stable offset of every partition of topics, returning them
	// in the same shape (offsets or Error filled in).
	ListOffsets(ctx context.Context, topics []TopicObservation) ([]TopicObservation, error)
	// ReadRecords answers each request with the first consumable record at or after its offset (see RecordProbe).
	ReadRecords(ctx context.Context, reqs []RecordRequest) ([]RecordProbe, error)
}

// UnsupportedReporter is implemented by a Cluster that can tell which reads some broker could not answer at all (an
// RPC or version it lacks); the loop copies the list into each Snapshot for the exporter's metrics.
type UnsupportedReporter interface {
	Unsupported() []string
}

// RecordRequest asks for the first consumable record at or after Offset, scanning no further than End.
type RecordRequest struct {
	Topic     string
	TopicID   string
	Partition int32
	Offset    int64
	End       int64
	Isolation Isolation
}

// CycleErrors is the error a Cluster method returns on partial failure: one CycleError per failed part.
type CycleErrors []CycleError

func (e CycleErrors) Error() string {
	errs := make([]error, len(e))
	for i := range e {
		errs[i] = e[i]
	}
	return errors.Join(errs...).Error()
}

// Unwrap exposes each CycleError to errors.Is / errors.As.
func (e CycleErrors) Unwrap() []error {
	errs := make([]error, len(e))
	for i := range e {
		errs[i] = e[i]
	}
	return errs
}

// asCycleErrors converts any error from a Cluster call into CycleErrors, classifying a plain error as kind.
func asCycleErrors(err error, kind ErrorKind) []CycleError {
	if err == nil {
		return nil
	}
	var ce CycleErrors
	if errors.As(err, &ce) {
		return ce
	}
	var one CycleError
	if errors.As(err, &one) {
		return []CycleError{one}
	}
	return []CycleError{{Kind: kind, Message: err.Error()}}
}
