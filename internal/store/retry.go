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

// insertBlockRows is how many rows of a latency batch go into one data block of its INSERT. The rows are appended
// to clickhouse-go's block and sent (batch.Flush) block by block while the INSERT stays open, so clickhouse-go's
// copies of a batch (its column block, the encoded buffer, its LZ4 copy) hold one block instead of the whole batch,
// and the block's column memory is reused from one block to the next instead of growing from empty, append by
// append, for every INSERT (those copies were half of the collector's allocations and ~75 MB of its live heap at
// 100k rows held: docs/performance.md). The server squashes an INSERT's blocks (min_insert_block_size_rows,
// 1,048,576, and _bytes, 256 MB, by default) and writes them when the INSERT ends: one part per INSERT as before, and
// an INSERT that fails or is aborted midway writes nothing, as long as a batch stays below those sizes, which the
// writer's max_rows and max_bytes defaults (100k rows, 64 MB) keep it.
const insertBlockRows = 8192

// inserter returns the Writer's inserter on s: PrepareBatch with the column list, then columnar appends. Latency
// batches encode through reusable column buffers (a pool: the flusher prepares the next batch while retries of the
// previous one prepare theirs) and, on a single server, are streamed in data blocks of insertBlockRows, all but the
// last sent by the preparation (Send sends the last and ends the INSERT). On a ClickHouse cluster (a Distributed
// table, insert_distributed_sync) a batch stays one block: the Distributed engine forwards each block it receives.
func (s *Store) inserter() inserter {
	var bufs sync.Pool
	blockRows := insertBlockRows
	if s.cfg.ClickHouseCluster != "" {
		blockRows = 0
	}
	return func(ctx context.Context, tb tableBatch, ver uint64) (preparedInsert, error) {
		b, err := s.conn.PrepareBatch(ctx, insertSQL(tb))
		if err != nil {
			return nil, fmt.Errorf("prepare insert into %s: %w", tb.table(), err)
		}
		lb, ok := tb.(latencyBatch)
		if !ok {
			if err := tb.appendTo(b, ver, nil); err != nil {
				_ = b.Abort()
				return nil, &appendError{err}
			}
			return chInsert{b, tb}, nil
		}
		cols, _ := bufs.Get().(*latencyCols)
		if cols == nil {
			cols = new(latencyCols)
		}
		defer bufs.Put(cols)
		if err := streamBlocks(b, lb, ver, cols, blockRows); err != nil {
			_ = b.Abort()
			return nil, err
		}
		return chInsert{b, tb}, nil
	}
}

// streamBlocks appends rs to b in blocks of blockRows (all of them in one when blockRows <= 0), sending every block
// but the last (b.Flush; the INSERT stays open). An encoding error is an appendError; a failed send is returned as
// is (retryable: the attempt is aborted and retried from its rows).
func streamBlocks(b driver.Batch, rs latencyBatch, ver uint64, cols *latencyCols, blockRows int) error {
	n := rs.len()
	if blockRows <= 0 {
		blockRows = n
	}
	for from := 0; from < n; from += blockRows {
		to := min(from+blockRows, n)
		if err := rs.slice(from, to).appendTo(b, ver, cols); err != nil {
			return &appendError{err}
		}
		if to == n {
			break // the last block is sent by Send, which ends the INSERT
		}
		if err := b.Flush(); err != nil {
			return fmt.Errorf("send rows %d..%d of %d into %s: %w", from, to, n, TableLatency, err)
		}
	}
	return nil
}
