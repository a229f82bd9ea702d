package store

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestWriterGiveUpKeepsRepeatedRowsOnRealServer, on the real server and made deterministic: the
// writer's take hook holds the first batch (rows 0-9) between being taken and being prepared; meanwhile a second
// Write repeats rows 5-9 (as a re-read after an earlier give-up does) and the proxy to ClickHouse goes down. The first
// batch then exhausts retry_max_elapsed and is given up; its ack brings the proxy back, so the second batch (rows
// 10-14) is stored. Acknowledging the second Write would leave rows 5-9 nowhere, their offsets committed by the
// collector; its ack carries the give-up, and the re-read that follows stores all 15 rows.
func TestWriterGiveUpKeepsRepeatedRowsOnRealServer(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	px := testenv.NewProxy(t, testenv.ClickHouseAddr(t))
	ctx := testCtx(t)
	s, err := Open(ctx, Config{Addr: []string{px.Addr()}, Database: db, DialTimeout: time.Second,
		Writer: WriterConfig{BatchRows: 10, FlushInterval: time.Hour, RetryInitial: 20 * time.Millisecond,
			RetryMax: 100 * time.Millisecond, RetryMaxElapsed: 500 * time.Millisecond, InsertTimeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	taken, release := make(chan struct{}), make(chan struct{})
	w, err := newWriter(s.inserter(), s.cfg.Writer, WriterOptions{takeHook: func(seq uint64) {
		if seq == 1 {
			close(taken)
			<-release
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Close(cctx)
	})

	acks := make(chan error, 3)
	if err := w.Write(ctx, partitionRows(0, 0, 10), func(err error) {
		px.Up() // on the writer's sender goroutine, before the next batch is sent
		acks <- err
	}); err != nil {
		t.Fatal(err)
	}
	<-taken // batch 1 (rows 0-9) is out of pending: the next Write starts batch 2
	if err := w.Write(ctx, partitionRows(0, 5, 15), func(err error) { acks <- err }); err != nil {
		t.Fatal(err)
	}
	px.Down()
	close(release)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acks; err == nil {
		t.Fatal("batch 1 was acknowledged although ClickHouse was unreachable for longer than retry_max_elapsed")
	}
	second := <-acks
	stored := func() uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT uniqExact(partition, offset) FROM latency_events").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if second == nil {
		t.Fatalf("the write repeating rows 5-9 was acknowledged with %d of 15 rows stored: rows 5-9 are lost", stored())
	}
	t.Logf("second write's ack: %v", second)
	// The caller reads again from its commit (offset 0) and writes the same rows.
	if err := w.Write(ctx, partitionRows(0, 0, 15), func(err error) { acks <- err }); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-acks; err != nil {
		t.Fatalf("re-read write: %v", err)
	}
	if n := stored(); n != 15 {
		t.Fatalf("%d rows stored by key after the re-read, want 15", n)
	}
}
