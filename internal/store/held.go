package store

import (
	"context"
	"fmt"
	"time"
)

// SeedLookback is the record-time bound `tidemark run` gives SeedReceiptKeys: the rows in flight when an owner
// crashed are this recent unless the collector was a day behind, and the rollup repair (RollupRepairer) corrects
// what older ones count twice.
const SeedLookback = 24 * time.Hour

// SeedReceiptKeys puts into w's dedup window the keys of the latency rows ClickHouse already holds from receipts
// partition receiptPartition at or past offset from (the partition's committed offset, 0 without a commit), among
// rows of cluster with a record_time at or after since. Call it when the receipts partition is assigned, before any
// of its records is read: the rows an earlier owner inserted after its last commit (a crash, a rebalance, a lost
// acknowledgement) are then dropped as duplicates when re-read, and never reach the rollups a second time. It
// returns how many keys it added.
//
// It is one query, bounded by the store's max_execution_time, pruned to the daily partitions from since on, and
// reading at most w's dedup window of keys (the window could not hold more). Rows older than since, and rows stored
// before migration 0007 (receipt_partition -1), are not seeded: the rollup repair (Store.RepairRollups) corrects
// what they count twice. In cluster mode it reads the Distributed table.
func (s *Store) SeedReceiptKeys(ctx context.Context, w *Writer, cluster string, receiptPartition int32, from int64, since time.Time) (int, error) {
	if w.dedup == nil {
		return 0, nil
	}
	rows, err := s.conn.Query(ctx, "SELECT topic, consumer_group, partition, offset, toInt8(replay_class) FROM "+TableLatency+
		" WHERE record_time >= toDateTime(?, 'UTC') AND cluster = ? AND source = 'receipt' AND receipt_partition = ?"+
		" AND receipt_offset >= ? LIMIT ?", since.Unix(), cluster, receiptPartition, from, len(w.dedup.ring))
	if err != nil {
		return 0, fmt.Errorf("held rows of receipts partition %d from %d: %w", receiptPartition, from, err)
	}
	defer rows.Close()
	var hs []uint64
	var kh keyHasher
	r := LatencyRow{Cluster: cluster}
	for rows.Next() {
		var class int8
		if err := rows.Scan(&r.Topic, &r.Group, &r.Partition, &r.Offset, &class); err != nil {
			return 0, fmt.Errorf("held rows of receipts partition %d: %w", receiptPartition, err)
		}
		r.Class = ReplayClass(class)
		hs = append(hs, kh.latency(w.dedup.seed, &r))
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("held rows of receipts partition %d: %w", receiptPartition, err)
	}
	return w.remember(hs), nil
}

// remember admits row-key hashes into the dedup window as copies ClickHouse has stored (batch 0, settled before any
// batch this writer takes), and returns how many were new to the window.
func (w *Writer) remember(hs []uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, h := range hs {
		if isNew, _ := w.dedup.admit(h, 0); isNew {
			n++
		}
	}
	return n
}
