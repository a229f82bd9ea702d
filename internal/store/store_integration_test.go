package store

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/testenv"
)

// These tests run against the real ClickHouse server deploy/local starts (18.16 here); see internal/testenv.

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// migratedStore opens a Store on a fresh test database and migrates it. conn is testenv's own connection to the
// same database, used to read back independently of the Store.
func migratedStore(t testing.TB, mod func(*Config)) (*Store, driver.Conn) {
	t.Helper()
	db, conn := testenv.ClickHouseDB(t)
	cfg := Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db}
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Migrate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	return s, conn
}

func TestMigrateAppliesAndReapplies(t *testing.T) {
	ctx := testCtx(t)
	db, conn := testenv.ClickHouseDB(t)
	s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CheckSchema(ctx); !errors.Is(err, ErrSchemaMissing) {
		t.Fatalf("CheckSchema on an empty database = %v, want ErrSchemaMissing", err)
	}
	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.From != 0 || res.To != CurrentSchemaVersion || len(res.Applied) != CurrentSchemaVersion ||
		res.Dialect != DialectLegacy {
		t.Fatalf("first migrate: %+v", res)
	}
	if err := s.CheckSchema(ctx); err != nil {
		t.Fatalf("CheckSchema after migrate: %v", err)
	}
	again, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.From != CurrentSchemaVersion || len(again.Applied) != 0 {
		t.Fatalf("re-run migrate applied %v (from %d), want nothing", again.Applied, again.From)
	}
	var tables []struct {
		Name   string `ch:"name"`
		Engine string `ch:"engine"`
	}
	if err := conn.Select(ctx, &tables, "SELECT name, engine FROM system.tables WHERE database = ? ORDER BY name", db); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		TableClockOffsets: "ReplacingMergeTree", TableLag: "ReplacingMergeTree", TableLatency1m: "AggregatingMergeTree",
		ViewLatency1m: "MaterializedView", TableLatency1h: "AggregatingMergeTree", ViewLatency1h: "MaterializedView",
		TableLatency: "ReplacingMergeTree", TableProbe: "ReplacingMergeTree",
		TableSchemaMigrations: "MergeTree",
	}
	if len(tables) != len(want) {
		t.Fatalf("tables %v, want %v", tables, want)
	}
	for _, tb := range tables {
		if want[tb.Name] != tb.Engine {
			t.Errorf("table %s engine %s, want %s", tb.Name, tb.Engine, want[tb.Name])
		}
	}
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != uint64(CurrentSchemaVersion) {
		t.Errorf("schema_migrations has %d rows after two migrates, want %d", n, CurrentSchemaVersion)
	}
}

func TestMigrateCreatesMissingDatabase(t *testing.T) {
	ctx := testCtx(t)
	_, admin := testenv.ClickHouseDB(t) // only for the cleanup connection
	db := testenv.Name(t, "tmfresh")
	t.Cleanup(func() { _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db) })
	s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
	if err != nil {
		t.Fatalf("Open on a database that does not exist yet: %v", err)
	}
	defer s.Close()
	if v, err := s.SchemaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("SchemaVersion of a missing database = %d, %v; want 0, nil", v, err)
	}
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != CurrentSchemaVersion {
		t.Fatalf("SchemaVersion after migrate = %d, %v", v, err)
	}
}

// recordFake writes a schema_migrations row by hand: a database touched by another Tidemark build.
func recordFake(t *testing.T, s *Store, version int, checksum string) {
	t.Helper()
	recordRow(t, s, appliedMigration{Version: uint32(version), Name: "9999_future", Dialect: "legacy", Checksum: checksum})
}

// recordRow writes any schema_migrations row by hand.
func recordRow(t *testing.T, s *Store, a appliedMigration) {
	t.Helper()
	ctx := testCtx(t)
	if err := s.conn.Exec(ctx, schemaMigrationsDDL); err != nil {
		t.Fatal(err)
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO schema_migrations (version, name, dialect, checksum, applied_at)")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Append(a.Version, a.Name, a.Dialect, a.Checksum, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaFromOtherBuildsDetected(t *testing.T) {
	ctx := testCtx(t)
	t.Run("newer", func(t *testing.T) {
		s, _ := migratedStore(t, nil)
		recordFake(t, s, CurrentSchemaVersion+1, "x")
		if err := s.CheckSchema(ctx); !errors.Is(err, ErrSchemaNewer) {
			t.Fatalf("CheckSchema = %v, want ErrSchemaNewer", err)
		}
		if _, err := s.Migrate(ctx); !errors.Is(err, ErrSchemaNewer) {
			t.Fatalf("Migrate = %v, want ErrSchemaNewer (an older build must not touch a newer schema)", err)
		}
	})
	t.Run("edited migration", func(t *testing.T) {
		db, _ := testenv.ClickHouseDB(t)
		s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		recordFake(t, s, 1, "0000")
		if _, err := s.Migrate(ctx); !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("Migrate = %v, want ErrChecksumMismatch", err)
		}
	})
	// Rows Tidemark never writes: Migrate must answer ErrMigrationTable naming the row, not panic (a version-0 row
	// must not index ms[-1]), and must create no table.
	for _, tc := range []struct {
		name string
		row  appliedMigration
		want string
	}{
		{"version 0", appliedMigration{Version: 0, Name: "0000_by_hand", Dialect: "legacy", Checksum: "x"}, "version 0"},
		{"empty dialect", appliedMigration{Version: 1, Name: "0001_init", Dialect: "", Checksum: "x"}, `dialect ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, conn := testenv.ClickHouseDB(t)
			s, err := Open(ctx, Config{Addr: []string{testenv.ClickHouseAddr(t)}, Database: db})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			recordRow(t, s, tc.row)
			_, err = s.Migrate(ctx)
			if !errors.Is(err, ErrMigrationTable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Migrate = %v, want ErrMigrationTable mentioning %q", err, tc.want)
			}
			var n uint64
			if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = ?", db).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("%d tables after a refused migrate, want 1 (schema_migrations only)", n)
			}
		})
	}
	// An older schema (version below CurrentSchemaVersion, above 0) is staged in TestMigrateFromVersion1;
	// CheckSchemaVersion is tested directly.
	if err := CheckSchemaVersion(CurrentSchemaVersion - 1); CurrentSchemaVersion > 1 && !errors.Is(err, ErrSchemaOutdated) {
		t.Fatalf("CheckSchemaVersion(older) = %v", err)
	}
}

func TestCheckSchemaVersion(t *testing.T) {
	tests := []struct {
		v    int
		want error
	}{
		{0, ErrSchemaMissing},
		{CurrentSchemaVersion, nil},
		{CurrentSchemaVersion + 1, ErrSchemaNewer},
	}
	if CurrentSchemaVersion > 1 {
		tests = append(tests, struct {
			v    int
			want error
		}{CurrentSchemaVersion - 1, ErrSchemaOutdated})
	}
	for _, tt := range tests {
		if err := CheckSchemaVersion(tt.v); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
			t.Errorf("CheckSchemaVersion(%d) = %v, want %v", tt.v, err, tt.want)
		}
	}
}

// fullLatencyRow has a distinct value in every field, so a swapped column shows.
func fullLatencyRow() LatencyRow {
	return LatencyRow{
		Group: "orders-svc", Topic: "orders", Partition: 7, Offset: 123456789012, Class: ClassReplay,
		Source: SourceReceipt, EventMs: 1764374400100, AppendMs: 1764374400250, ReceiveMs: 1764374400400,
		ProcessedMs: 1764374400900, ObservedMs: 1764374401000, IngestNaiveMs: 150, QueueNaiveMs: 150,
		ProcessNaiveMs: 500, E2ENaiveMs: 800, IngestMs: 11, QueueMs: 22, ProcessMs: 33, E2EMs: 66,
		UncertaintyMs: 1.25, Valid: ValidIngest | ValidE2E | NaiveQueue, Flags: 0x8001,
		ProducerHost: "prod-a", BrokerHost: "broker-2", ConsumerHost: "cons-b",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
	}
}

func newTestWriter(t testing.TB, s *Store, reg prometheus.Registerer, now func() time.Time) *Writer {
	t.Helper()
	w, err := NewWriter(s, WriterOptions{Registerer: reg, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return w
}

func writeAndFlush(t *testing.T, w *Writer, rows Rows) {
	t.Helper()
	ctx := testCtx(t)
	acked := make(chan error, 1)
	if err := w.Write(ctx, rows, func(err error) { acked <- err }); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("ack: %v", err)
	}
}

func TestWriteReadsBackExactValues(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	ver := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	w := newTestWriter(t, s, nil, func() time.Time { return ver })
	lat := fullLatencyRow()
	probe := ProbeRow{Topic: "_tidemark_probe", Partition: 2, Seq: 1 << 40, BrokerID: 3, SendMs: 1764374400000,
		AppendMs: 1764374400004, AckMs: 1764374400009, ReceiveMs: 1764374400012, IngestMs: 3, DeliveryMs: 9,
		RTTMs: 9, E2EMs: 12, BrokerOffsetMs: -1.5, UncertaintyMs: 0.5, Status: ProbeOK, Duplicates: 2, Flags: 4,
		TraceID: "0af7651916cd43dd8448eb211c80319c"}
	at := time.Date(2026, 11, 29, 10, 11, 12, 345e6, time.UTC)
	lag := LagRow{At: at, Cluster: "prod", Group: "orders-svc", Topic: "orders", Partition: 7, Committed: 5100,
		LogStart: 5000, End: 5200, Lag: 100, Expired: 3, TimeLagMs: 4321, Status: StatusWarn,
		PartitionStatus: StatusStall, Flags: 9}
	clock := ClockOffsetRow{At: at, Host: "broker-2", Kind: ClockBracketed, OffsetMs: 2500.25, UncertaintyMs: 0.75,
		Samples: 31}
	writeAndFlush(t, w, Rows{Latency: []LatencyRow{lat}, Probe: []ProbeRow{probe}, Lag: []LagRow{lag},
		ClockOffsets: []ClockOffsetRow{clock}})

	t.Run("latency", func(t *testing.T) {
		var got struct {
			RecordTime, ObservedTime                                time.Time
			Group, Topic                                            string
			Partition                                               int32
			Offset                                                  int64
			Class, Source                                           string
			Event, Append, Receive, Processed                       int64
			IN, QN, PN, EN, I, Q, P, E                              int64
			Unc                                                     float64
			Valid                                                   uint8
			Flags                                                   uint32
			ProducerHost, BrokerHost, ConsumerHost, TraceID, SpanID string
			Ver                                                     uint64
		}
		err := conn.QueryRow(ctx, "SELECT record_time, observed_time, consumer_group, topic, partition, offset, "+
			"toString(replay_class), toString(source), event_ts_ms, append_ts_ms, receive_ts_ms, processed_ts_ms, "+
			"ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms, ingest_ms, queue_ms, process_ms, e2e_ms, "+
			"uncertainty_ms, valid, flags, producer_host, broker_host, consumer_host, trace_id, span_id, ver "+
			"FROM latency_events").Scan(&got.RecordTime, &got.ObservedTime, &got.Group, &got.Topic, &got.Partition,
			&got.Offset, &got.Class, &got.Source, &got.Event, &got.Append, &got.Receive, &got.Processed, &got.IN,
			&got.QN, &got.PN, &got.EN, &got.I, &got.Q, &got.P, &got.E, &got.Unc, &got.Valid, &got.Flags,
			&got.ProducerHost, &got.BrokerHost, &got.ConsumerHost, &got.TraceID, &got.SpanID, &got.Ver)
		if err != nil {
			t.Fatal(err)
		}
		// record_time is the append stamp (the first known of append, event, receive, processed), to the second.
		if !got.RecordTime.Equal(time.UnixMilli(lat.AppendMs).Truncate(time.Second)) ||
			!got.ObservedTime.Equal(time.UnixMilli(lat.ObservedMs).Truncate(time.Second)) {
			t.Errorf("times %v %v", got.RecordTime, got.ObservedTime)
		}
		if got.Group != lat.Group || got.Topic != lat.Topic || got.Partition != lat.Partition ||
			got.Offset != lat.Offset || got.Class != "replay" || got.Source != "receipt" ||
			got.Event != lat.EventMs || got.Append != lat.AppendMs || got.Receive != lat.ReceiveMs ||
			got.Processed != lat.ProcessedMs || got.IN != 150 || got.QN != 150 || got.PN != 500 || got.EN != 800 ||
			got.I != 11 || got.Q != 22 || got.P != 33 || got.E != 66 || got.Unc != 1.25 ||
			got.Valid != uint8(ValidIngest|ValidE2E|NaiveQueue) || got.Flags != 0x8001 ||
			got.ProducerHost != "prod-a" || got.BrokerHost != "broker-2" || got.ConsumerHost != "cons-b" ||
			got.TraceID != lat.TraceID || got.SpanID != lat.SpanID || got.Ver != uint64(ver.UnixMilli()) {
			t.Errorf("read back %+v\nwrote %+v", got, lat)
		}
	})
	t.Run("probe", func(t *testing.T) {
		var rt time.Time
		var topic, status, trace string
		var part, broker int32
		var seq, ver uint64
		var send, app, ack, recv, ing, del, rtt, e2e int64
		var off, unc float64
		var dups, flags uint32
		err := conn.QueryRow(ctx, "SELECT record_time, topic, partition, seq, broker_id, send_ts_ms, append_ts_ms, "+
			"ack_ts_ms, receive_ts_ms, ingest_ms, delivery_ms, rtt_ms, e2e_ms, broker_offset_ms, uncertainty_ms, "+
			"toString(status), duplicates, flags, trace_id, ver FROM probe_events").Scan(&rt, &topic, &part, &seq,
			&broker, &send, &app, &ack, &recv, &ing, &del, &rtt, &e2e, &off, &unc, &status, &dups, &flags, &trace, &ver)
		if err != nil {
			t.Fatal(err)
		}
		if !rt.Equal(time.UnixMilli(probe.SendMs)) || topic != probe.Topic || part != 2 || seq != 1<<40 ||
			broker != 3 || send != probe.SendMs || app != probe.AppendMs || ack != probe.AckMs ||
			recv != probe.ReceiveMs || ing != 3 || del != 9 || rtt != 9 || e2e != 12 || off != -1.5 || unc != 0.5 ||
			status != "ok" || dups != 2 || flags != 4 || trace != probe.TraceID || ver != uint64(ver) {
			t.Errorf("probe read back wrong: %v %s %d %d %d %d %d %d %d %v %v %s %d %d %s", rt, topic, part, seq,
				broker, send, app, ack, recv, off, unc, status, dups, flags, trace)
		}
	})
	t.Run("lag", func(t *testing.T) {
		var gotAt time.Time
		var atMs, committed, logStart, end, lagN, expired, timeLag int64
		var cluster, group, topic, status, pstatus string
		var part int32
		var flags uint32
		err := conn.QueryRow(ctx, "SELECT at, at_ms, cluster, consumer_group, topic, partition, committed, log_start, "+
			"end_offset, lag, expired, time_lag_ms, toString(status), toString(partition_status), flags "+
			"FROM lag_snapshots").Scan(&gotAt, &atMs, &cluster, &group, &topic, &part, &committed, &logStart, &end,
			&lagN, &expired, &timeLag, &status, &pstatus, &flags)
		if err != nil {
			t.Fatal(err)
		}
		if !gotAt.Equal(at.Truncate(time.Second)) || atMs != at.UnixMilli() || cluster != "prod" ||
			group != "orders-svc" || topic != "orders" || part != 7 || committed != 5100 || logStart != 5000 ||
			end != 5200 || lagN != 100 || expired != 3 || timeLag != 4321 || status != "WARN" ||
			pstatus != "STALL" || flags != 9 {
			t.Errorf("lag read back: %v %d %s %s %s %d %d %d %d %d %d %d %s %s %d", gotAt, atMs, cluster, group, topic,
				part, committed, logStart, end, lagN, expired, timeLag, status, pstatus, flags)
		}
	})
	t.Run("clock", func(t *testing.T) {
		var gotAt time.Time
		var atMs int64
		var host, kind string
		var off, unc float64
		var samples uint32
		err := conn.QueryRow(ctx, "SELECT at, at_ms, host, toString(kind), offset_ms, uncertainty_ms, samples "+
			"FROM clock_offsets").Scan(&gotAt, &atMs, &host, &kind, &off, &unc, &samples)
		if err != nil {
			t.Fatal(err)
		}
		if !gotAt.Equal(at.Truncate(time.Second)) || atMs != at.UnixMilli() || host != "broker-2" ||
			kind != "bracketed" || off != 2500.25 || unc != 0.75 || samples != 31 {
			t.Errorf("clock read back: %v %d %s %s %v %v %d", gotAt, atMs, host, kind, off, unc, samples)
		}
	})
}

func TestDuplicatesCollapseByKey(t *testing.T) {
	s, conn := migratedStore(t, nil)
	ctx := testCtx(t)
	// Two writers stand for a collector before and after a crash: the second has an empty dedup window, so the
	// re-delivered rows reach ClickHouse and must collapse there.
	v := int64(1000)
	clock := func() time.Time { v++; return time.UnixMilli(v) }
	first := newTestWriter(t, s, nil, clock)
	rows := latencyRows(0, 100)
	for i := range rows.Latency {
		rows.Latency[i].AppendMs = 1764374400000 + int64(i)
		rows.Latency[i].E2EMs = 5
	}
	writeAndFlush(t, first, rows)
	again := latencyRows(50, 100) // offsets 50..149: 50 re-delivered, 50 new
	for i := range again.Latency {
		again.Latency[i].AppendMs = 1764374400000 + 50 + int64(i)
		again.Latency[i].E2EMs = 7 // a refined correction: the later version must win
	}
	second := newTestWriter(t, s, nil, clock)
	writeAndFlush(t, second, again)

	var raw, final uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_events").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_events FINAL").Scan(&final); err != nil {
		t.Fatal(err)
	}
	if raw != 200 || final != 150 {
		t.Fatalf("count %d raw, %d FINAL; want 200 inserted and 150 distinct keys", raw, final)
	}
	var e2eSum int64
	if err := conn.QueryRow(ctx, "SELECT toInt64(sum(e) ) FROM (SELECT argMax(e2e_ms, ver) AS e FROM latency_events "+
		"GROUP BY topic, consumer_group, partition, offset, replay_class)").Scan(&e2eSum); err != nil {
		t.Fatal(err)
	}
	// Offsets 0..49 keep 5; 50..149 were last written with 7.
	if e2eSum != 50*5+100*7 {
		t.Errorf("sum of argMax(e2e_ms, ver) = %d, want %d", e2eSum, 50*5+100*7)
	}
	if err := conn.Exec(ctx, "OPTIMIZE TABLE latency_events FINAL"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count() FROM latency_events").Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != 150 {
		t.Errorf("after merging, %d rows remain, want 150", raw)
	}
}

func TestDropExpiredPartitions(t *testing.T) {
	s, conn := migratedStore(t, func(c *Config) { c.RetentionDays = 7; c.RollupRetentionDays = 30 })
	ctx := testCtx(t)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	w := newTestWriter(t, s, nil, nil)
	var rows Rows
	for i, age := range []time.Duration{40 * 24 * time.Hour, 10 * 24 * time.Hour, 7*24*time.Hour - time.Hour, time.Hour} {
		ms := now.Add(-age).UnixMilli()
		rows.Latency = append(rows.Latency, LatencyRow{Group: "g", Topic: "t", Offset: int64(i), Class: ClassLive,
			AppendMs: ms, ObservedMs: ms, E2EMs: 1, Valid: ValidE2E})
		rows.Lag = append(rows.Lag, LagRow{At: now.Add(-age), Cluster: "c", Group: "g", Topic: "t"})
	}
	writeAndFlush(t, w, rows)
	dropped, err := s.DropExpired(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	// Raw tables keep 7 days: the cutoff day is 2026-11-22, so the 40- and 10-day-old partitions go and the one of
	// 2026-11-22 11:00 (younger than 7 days) stays. The rollups keep 30 days: only their 40-day-old minute and
	// hour go, from both tiers.
	want := []DroppedPartition{
		{TableLatency, "20261020"}, {TableLatency, "20261119"},
		{TableLag, "20261020"}, {TableLag, "20261119"},
		{TableLatency1m, "20261020"}, {TableLatency1h, "20261020"},
	}
	if len(dropped) != len(want) {
		t.Fatalf("dropped %v, want %v", dropped, want)
	}
	for i := range want {
		if dropped[i] != want[i] {
			t.Fatalf("dropped %v, want %v", dropped, want)
		}
	}
	for table, n := range map[string]uint64{TableLatency: 2, TableLag: 2} {
		var got uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("%s has %d rows after retention, want %d", table, got, n)
		}
	}
	var rollupLive uint64
	if err := conn.QueryRow(ctx, "SELECT sumMerge(live) FROM latency_1m WHERE stage = 'e2e'").Scan(&rollupLive); err != nil {
		t.Fatal(err)
	}
	if rollupLive != 3 {
		t.Errorf("rollup live count after retention = %d, want 3", rollupLive)
	}
	if again, err := s.DropExpired(ctx, now); err != nil || len(again) != 0 {
		t.Errorf("second DropExpired dropped %v, %v; want nothing", again, err)
	}
}

func TestRetentionCutoff(t *testing.T) {
	tests := []struct {
		now  string
		days int
		want string
	}{
		{"2026-11-29T10:00:00Z", 1, "2026-11-28"},
		// Just after midnight the cutoff still keeps the whole previous day.
		{"2026-11-29T00:00:01Z", 1, "2026-11-28"},
		{"2026-03-01T12:00:00Z", 1, "2026-02-28"},
		// A time in another zone is taken in UTC, like the partitions.
		{"2026-11-29T01:00:00+05:00", 14, "2026-11-14"},
	}
	for _, tt := range tests {
		now, _ := time.Parse(time.RFC3339, tt.now)
		if got := RetentionCutoff(now, tt.days).Format("2006-01-02"); got != tt.want {
			t.Errorf("RetentionCutoff(%s, %d) = %s, want %s", tt.now, tt.days, got, tt.want)
		}
	}
}

func TestWriterRetriesWhileServerUnreachable(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	p := testenv.NewProxy(t, testenv.ClickHouseAddr(t))
	ctx := testCtx(t)
	s, err := Open(ctx, Config{Addr: []string{p.Addr()}, Database: db, DialTimeout: time.Second,
		Writer: WriterConfig{BatchRows: 500, FlushInterval: 20 * time.Millisecond, RetryInitial: 20 * time.Millisecond,
			RetryMax: 200 * time.Millisecond, InsertTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w := newTestWriter(t, s, reg, nil)
	writeAndFlush(t, w, latencyRows(0, 500)) // a connection to the server is now pooled

	p.Down() // port closed, pooled connections cut
	var mu sync.Mutex
	var acks []error
	for i := range 4 {
		if err := w.Write(ctx, latencyRows(int64(500+i*500), 500), func(err error) {
			mu.Lock()
			acks = append(acks, err)
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "retries against the closed port", func() bool {
		return testutil.ToFloat64(w.m.retries.WithLabelValues(TableLatency)) >= 2
	})
	mu.Lock()
	if len(acks) != 0 {
		t.Fatalf("acks %v while the server was unreachable: offsets would be committed for unwritten rows", acks)
	}
	mu.Unlock()
	p.Up() // the same port answers again
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acks) != 4 {
		t.Fatalf("%d acks, want 4", len(acks))
	}
	for _, err := range acks {
		if err != nil {
			t.Fatalf("ack error %v after the server came back", err)
		}
	}
	var n, distinct uint64
	if err := conn.QueryRow(ctx, "SELECT count(), uniqExact(offset) FROM latency_events").Scan(&n, &distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != 2500 {
		t.Fatalf("%d distinct offsets in ClickHouse, want 2500: rows were lost", distinct)
	}
	t.Logf("%d rows inserted for 2500 keys, %v retries", n, testutil.ToFloat64(w.m.retries.WithLabelValues(TableLatency)))
}

func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	_, err = Open(testCtx(t), Config{Addr: []string{addr}, DialTimeout: time.Second})
	if err == nil {
		t.Fatal("Open on a closed port succeeded")
	}
}
