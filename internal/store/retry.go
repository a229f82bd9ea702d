package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// transientCodes are ClickHouse server errors worth retrying: overload, timeouts, network trouble, an insert whose
// outcome is unknown. Any other server exception (unknown table or column, type mismatch, authentication) will not
// heal by waiting, so the batch fails at once.
var transientCodes = map[int32]bool{
	3:   true, // UNEXPECTED_END_OF_FILE
	159: true, // TIMEOUT_EXCEEDED (max_execution_time)
	160: true, // TOO_SLOW
	164: true, // READONLY
	202: true, // TOO_MANY_SIMULTANEOUS_QUERIES
	203: true, // NO_FREE_CONNECTION
	209: true, // SOCKET_TIMEOUT
	210: true, // NETWORK_ERROR
	241: true, // MEMORY_LIMIT_EXCEEDED
	242: true, // TABLE_IS_READ_ONLY
	252: true, // TOO_MANY_PARTS
	279: true, // ALL_CONNECTION_TRIES_FAILED: a Distributed insert reached no replica of a shard (clickhouse.cluster)
	285: true, // TOO_FEW_LIVE_REPLICAS
	319: true, // UNKNOWN_STATUS_OF_INSERT
	394: true, // QUERY_WAS_CANCELLED
	425: true, // SYSTEM_ERROR
	999: true, // KEEPER_EXCEPTION
}

// appendError is a failure to encode rows into a batch: a bug or a bad value, never fixed by retrying.
type appendError struct{ err error }

func (e *appendError) Error() string { return e.err.Error() }
func (e *appendError) Unwrap() error { return e.err }

// retryable reports whether an insert error may heal by itself: connection and I/O errors (server down,
// restarting, network), per-attempt timeouts and the transient server codes. Encoding errors and other server
// exceptions are permanent.
func retryable(err error) bool {
	var ae *appendError
	if errors.As(err, &ae) {
		return false
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return transientCodes[ex.Code]
	}
	return !errors.Is(err, context.Canceled)
}

// chInsert is a prepared insert on a real server: an INSERT started with its column list and the rows appended
// column by column into clickhouse-go's block, waiting for Send.
type chInsert struct {
	b  driver.Batch
	tb tableBatch
}

func (p chInsert) send() error {
	if err := p.b.Send(); err != nil {
		return fmt.Errorf("insert %d rows into %s: %w", p.tb.len(), p.tb.table(), err)
	}
	return nil
}

func (p chInsert) abort() { _ = p.b.Abort() }

// inserter returns the Writer's inserter on s: PrepareBatch with the column list, then columnar appends. Latency
// batches encode through reusable column buffers (a pool: the flusher prepares the next batch while retries of the
// previous one prepare theirs).
func (s *Store) inserter() inserter {
	var bufs sync.Pool
	return func(ctx context.Context, tb tableBatch, ver uint64) (preparedInsert, error) {
		b, err := s.conn.PrepareBatch(ctx, insertSQL(tb))
		if err != nil {
			return nil, fmt.Errorf("prepare insert into %s: %w", tb.table(), err)
		}
		var cols *latencyCols
		if _, ok := tb.(latencyBatch); ok {
			if cols, _ = bufs.Get().(*latencyCols); cols == nil {
				cols = new(latencyCols)
			}
			defer bufs.Put(cols)
		}
		err = tb.appendTo(b, ver, cols)
		if err != nil {
			_ = b.Abort()
			return nil, &appendError{err}
		}
		return chInsert{b, tb}, nil
	}
}
