// Package querytest is test-only support for the read queries: it creates Tidemark's schema in a test database and
// seeds rows with batch inserts, so the query package's and the plugin's integration tests start from known data on
// the real ClickHouse server.
package querytest

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/testenv"
)

// Schema migrates database to the current schema with the store's own migrations (store.Open + Migrate), exactly as
// `tidemark migrate` would, on the server testenv names.
func Schema(t testing.TB, database string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := store.Open(ctx, store.Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: database})
	if err != nil {
		t.Fatalf("open store %s: %v", database, err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s: %v", database, err)
	}
}

// SchemaAt stages a database migrated by another Tidemark: it creates the current tables (legacy dialect) but records
// version as the only applied migration, e.g. CurrentSchemaVersion-1 for an older Tidemark's database or +1 for a
// newer one's.
func SchemaAt(t testing.TB, conn driver.Conn, version int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ddl, err := store.RenderSchema(store.SchemaParams{Dialect: store.DialectLegacy, RetentionDays: 14, RollupRetentionDays: 90})
	if err != nil {
		t.Fatalf("render schema: %v", err)
	}
	// The schema's migrations are not all idempotent (ALTER … ADD COLUMN): a database that has it is only restamped.
	var exists uint8
	if err := conn.QueryRow(ctx, "EXISTS TABLE "+store.TableLatency).Scan(&exists); err != nil {
		t.Fatalf("check schema: %v", err)
	}
	for _, stmt := range store.SplitStatements(ddl) {
		if exists == 1 {
			break
		}
		// staged twice in one database: CREATE ... IF NOT EXISTS is a no-op, and a column a later migration adds is
		// already there (18.16 has no ADD COLUMN IF NOT EXISTS)
		if err := conn.Exec(ctx, stmt); err != nil && !store.ColumnAlreadyAdded(stmt, err) {
			t.Fatalf("create schema: %v\n%s", err, stmt)
		}
	}
	if err := conn.Exec(ctx, "TRUNCATE TABLE "+store.TableSchemaMigrations); err != nil {
		t.Fatalf("truncate schema_migrations: %v", err)
	}
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+store.TableSchemaMigrations+" (version, name, dialect, checksum, applied_at)")
	if err != nil {
		t.Fatalf("prepare schema_migrations: %v", err)
	}
	if err := b.Append(uint32(version), "staged", string(store.DialectLegacy), "", time.Now()); err != nil {
		t.Fatalf("append schema_migrations: %v", err)
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert schema_migrations: %v", err)
	}
}

// Latency is one latency_events row with the columns the read queries use; the zero value of the others is fine.
type Latency struct {
	Observed     time.Time
	Topic, Group string
	Partition    int32
	Offset       int64
	ReplayClass  string // live, replay, backfill; "" is live
	IngestMs     int64
	QueueMs      int64
	ProcessMs    int64
	E2EMs        int64
	Valid        uint8 // validity bits: 1 ingest, 2 queue, 4 process, 8 e2e; 0 means all valid (15)
	ProducerHost string
	ConsumerHost string
	TraceID      string
	// Lo and Hi are each stage's interval (ingest, queue, process, e2e) when Bounded; otherwise every stage's
	// interval is its value alone, [v, v].
	Lo, Hi  [4]float64
	Bounded bool
}

// InsertLatency inserts rows in one batch; the rollup's materialized view aggregates them into latency_1m.
func InsertLatency(t testing.TB, conn driver.Conn, rows []Latency) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO latency_events (record_time, observed_time, consumer_group, topic, "+
		"partition, offset, replay_class, source, ingest_ms, queue_ms, process_ms, e2e_ms, "+
		"ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms, valid, producer_host, consumer_host, trace_id, ver, "+
		"ingest_lo_ms, ingest_hi_ms, queue_lo_ms, queue_hi_ms, process_lo_ms, process_hi_ms, e2e_lo_ms, e2e_hi_ms)")
	if err != nil {
		t.Fatalf("prepare latency_events: %v", err)
	}
	for _, r := range rows {
		rc := r.ReplayClass
		if rc == "" {
			rc = "live"
		}
		valid := r.Valid
		if valid == 0 {
			valid = 15 | 15<<4
		}
		lo, hi := r.Lo, r.Hi
		if !r.Bounded {
			for i, v := range [4]int64{r.IngestMs, r.QueueMs, r.ProcessMs, r.E2EMs} {
				lo[i], hi[i] = float64(v), float64(v)
			}
		}
		if err := b.Append(r.Observed, r.Observed, r.Group, r.Topic, r.Partition, r.Offset, rc, "receipt",
			r.IngestMs, r.QueueMs, r.ProcessMs, r.E2EMs, r.IngestMs, r.QueueMs, r.ProcessMs, r.E2EMs, valid,
			r.ProducerHost, r.ConsumerHost, r.TraceID, uint64(1), lo[0], hi[0], lo[1], hi[1], lo[2], hi[2], lo[3], hi[3]); err != nil {
			t.Fatalf("append latency_events: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert latency_events: %v", err)
	}
}

// Lag is one lag_snapshots row.
type Lag struct {
	At                    time.Time
	Cluster, Group, Topic string
	Partition             int32
	Committed, End, Lag   int64
	Expired, TimeLagMs    int64
	GroupType             string // "" is classic
	Subtopology           string
}

// InsertLag inserts lag snapshots in one batch.
func InsertLag(t testing.TB, conn driver.Conn, rows []Lag) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO lag_snapshots (at, at_ms, cluster, consumer_group, topic, partition, "+
		"committed, end_offset, lag, expired, time_lag_ms, status, partition_status, group_type, subtopology, ver)")
	if err != nil {
		t.Fatalf("prepare lag_snapshots: %v", err)
	}
	for _, r := range rows {
		if err := b.Append(r.At, r.At.UnixMilli(), r.Cluster, r.Group, r.Topic, r.Partition, r.Committed, r.End, r.Lag,
			r.Expired, r.TimeLagMs, "OK", "OK", cmp.Or(r.GroupType, "classic"), r.Subtopology, uint64(1)); err != nil {
			t.Fatalf("append lag_snapshots: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert lag_snapshots: %v", err)
	}
}

// ClockOffset is one clock_offsets row. Lower, Upper and Estimate all zero stand for a row written before migration
// 0003: they are inserted as the column defaults would make them (OffsetMs ∓ UncertaintyMs, OffsetMs).
type ClockOffset struct {
	At                         time.Time
	Host, Kind                 string // kind: bracketed, synced, envelope
	OffsetMs, UncertaintyMs    float64
	LowerMs, UpperMs, Estimate float64
}

// InsertClockOffsets inserts estimates in one batch.
func InsertClockOffsets(t testing.TB, conn driver.Conn, rows []ClockOffset) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO clock_offsets (at, at_ms, host, kind, offset_ms, uncertainty_ms, samples, "+
		"lower_ms, upper_ms, estimate_ms, ver)")
	if err != nil {
		t.Fatalf("prepare clock_offsets: %v", err)
	}
	for _, r := range rows {
		if r.LowerMs == 0 && r.UpperMs == 0 && r.Estimate == 0 {
			r.LowerMs, r.UpperMs, r.Estimate = r.OffsetMs-r.UncertaintyMs, r.OffsetMs+r.UncertaintyMs, r.OffsetMs
		}
		if err := b.Append(r.At, r.At.UnixMilli(), r.Host, r.Kind, r.OffsetMs, r.UncertaintyMs, uint32(1),
			r.LowerMs, r.UpperMs, r.Estimate, uint64(1)); err != nil {
			t.Fatalf("append clock_offsets: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert clock_offsets: %v", err)
	}
}

// Probe is one probe_events row.
type Probe struct {
	At         time.Time
	Topic      string
	Partition  int32
	Seq        uint64
	Broker     int32
	E2EMs      int64
	Status     string // ok, lost
	Duplicates uint32
}

// InsertProbes inserts probe rows in one batch.
func InsertProbes(t testing.TB, conn driver.Conn, rows []Probe) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO probe_events (record_time, topic, partition, seq, broker_id, e2e_ms, status, duplicates, ver)")
	if err != nil {
		t.Fatalf("prepare probe_events: %v", err)
	}
	for _, r := range rows {
		if err := b.Append(r.At, r.Topic, r.Partition, r.Seq, r.Broker, r.E2EMs, r.Status, r.Duplicates, uint64(1)); err != nil {
			t.Fatalf("append probe_events: %v", err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("insert probe_events: %v", err)
	}
}
