package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// DroppedPartition names a daily partition DropExpired removed.
type DroppedPartition struct {
	Table string
	Day   string // partition id: the UTC day as YYYYMMDD
}

// RetentionCutoff returns the first UTC day kept with a retention of days at now: every row of an older daily
// partition is more than days×24h old. E.g. now 2026-11-29 10:00 UTC, 1 day: cutoff 2026-11-28, so 2026-11-27 and
// older partitions are dropped while 2026-11-28 (which still holds rows younger than 24 h) is kept.
func RetentionCutoff(now time.Time, days int) time.Time {
	t := now.UTC().AddDate(0, 0, -days)
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// DropExpired drops every daily partition older than the retention at now: RetentionDays for the raw tables,
// RollupRetentionDays for the rollup. It works on both dialects (on the modern one the TTL usually got there
// first). It returns the partitions it dropped, in table and day order; on error, those dropped before it.
func (s *Store) DropExpired(ctx context.Context, now time.Time) ([]DroppedPartition, error) {
	names := make([]string, len(retentionTables))
	for i, t := range retentionTables {
		names[i] = t.Name
	}
	// 18.16: a slice bound to IN ? fails; has(?, col) takes it as an array literal.
	parts, suffix := "system.parts", ""
	if s.cfg.ClickHouseCluster != "" {
		// Every shard holds its own parts: list them on one replica of each (the local tables hold the data).
		parts, suffix = "cluster('"+s.cfg.ClickHouseCluster+"', system.parts)", LocalSuffix
		for i := range names {
			names[i] += suffix
		}
	}
	rows, err := s.conn.Query(ctx,
		"SELECT DISTINCT table, partition_id FROM "+parts+" WHERE database = ? AND active AND has(?, table)",
		s.cfg.Database, names)
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", s.cfg.Database, err)
	}
	byTable := map[string][]string{}
	for rows.Next() {
		var table, id string
		if err := rows.Scan(&table, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list partitions of %s: %w", s.cfg.Database, err)
		}
		table = strings.TrimSuffix(table, suffix)
		byTable[table] = append(byTable[table], id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", s.cfg.Database, err)
	}

	var dropped []DroppedPartition
	for _, t := range retentionTables {
		days := s.cfg.RetentionDays
		if t.Rollup {
			days = s.cfg.RollupRetentionDays
		}
		cutoff := RetentionCutoff(now, days).Format("20060102")
		ids := byTable[t.Name]
		sort.Strings(ids)
		for _, id := range ids {
			// Partition ids of toYYYYMMDD are 8 digits; anything else is not ours to drop (and is never spliced).
			if !isDay(id) || id >= cutoff {
				continue
			}
			if err := s.dropPartition(ctx, t.Name, id); err != nil {
				return dropped, fmt.Errorf("drop partition %s of %s: %w", id, t.Name, err)
			}
			dropped = append(dropped, DroppedPartition{Table: t.Name, Day: id})
		}
	}
	return dropped, nil
}

// dropPartition drops partition id of table: on a single server the table's own; in cluster mode its local table on
// one replica of each shard (Store.execPerShard), whose ReplicatedMergeTree drops it on the shard's other replicas
// through ZooKeeper, waited for (replication_alter_partitions_sync 2). Not ON CLUSTER: sent to both replicas of a
// shard, ClickHouse 18.16's distributed DDL was seen to leave one host "unfinished" past
// distributed_ddl_task_timeout, each replica's DDL worker waiting on the other's replicated drop (as for ALTERs,
// chcluster.go).
func (s *Store) dropPartition(ctx context.Context, table, id string) error {
	if s.cfg.ClickHouseCluster == "" {
		return s.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s DROP PARTITION ID '%s'", table, id))
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"replication_alter_partitions_sync": 2}))
	return s.execPerShard(ctx, fmt.Sprintf("ALTER TABLE %s.%s%s DROP PARTITION ID '%s'", s.cfg.Database, table, LocalSuffix, id))
}

func isDay(id string) bool {
	if len(id) != 8 {
		return false
	}
	for _, c := range id {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
