// Command bench-collector measures the collector's receipts pipeline (Kafka → decode → latency engine → batched
// writer → ClickHouse) against the two raw baselines it is built from, on the same data in the same run:
//
//   - raw_consume_per_s: sarama reading the same receipts topic as fast as it can (a consumer group, receipts counted
//     from each record's header, nothing decoded);
//   - raw_insert_per_s: clickhouse-go inserting the rows the pipeline writes for those receipts (same keys, stamps,
//     hosts and trace ids), pre-built, in 50k-row columnar batches;
//   - raw_pipeline_per_s: the two together, concurrently, connected by a channel and nothing else: sarama consumes
//     the topic (counting receipts from the headers) and clickhouse-go inserts the pre-built rows of what was
//     consumed, each INSERT taking every batch_rows-sized batch released since the last (up to max_rows), as the
//     writer takes every pending row. On a 2-core machine consume, insert and ClickHouse's own
//     insert work share the cores, so this, not min(raw consume, raw insert), is the physical limit of any
//     consume → insert pipeline here;
//   - pipeline_rows_per_s: the collector, from start until ClickHouse acknowledged every row.
//
// pipeline_vs_raw_pipeline = pipeline / raw_pipeline (target ≥ 0.85: what our decode, correction, row building and
// encoding cost), pipeline_ratio = pipeline / min(raw consume, raw insert) (target ≥ 0.7); rss_mb is the pipeline's
// peak RSS (VmHWM, target ≤ 300). The last line printed is the JSON result. Run it with `make bench-collector`
// (starts the stack); BENCH_CPUPROFILE / BENCH_HEAPPROFILE / BENCH_ALLOCPROFILE write the pipeline's profiles
// (docs/performance.md).
//
// -replicas 2 (BENCH_REPLICAS=2, `make bench-collector BENCH_REPLICAS=2`) then runs the shipped binary on the same
// receipts: one `tidemark run` process, then two sharing one receipts group (replicas.go), each with a user's
// configuration, measured from outside; the JSON line adds their throughput, the ratio two / one and each
// process's peak RSS.
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

func main() {
	n := flag.Int("receipts", 400000, "receipts to push through each measurement")
	perRecord := flag.Int("per-record", 256, "receipts per Kafka record (the emitter's default batch)")
	flag.IntVar(&writerConfig.BatchRows, "batch-rows", writerConfig.BatchRows, "the pipeline writer's batch_rows")
	flag.IntVar(&writerConfig.MaxRows, "max-rows", writerConfig.MaxRows, "the pipeline writer's max_rows")
	flag.IntVar(&memoryLimitMB, "memory-limit-mb", memoryLimitMB, "the Go soft memory limit (MB) the pipeline runs under")
	defReplicas := 0
	if v, err := strconv.Atoi(os.Getenv("BENCH_REPLICAS")); err == nil {
		defReplicas = v
	}
	replicas := flag.Int("replicas", defReplicas, "also run 1 and this many `tidemark run` processes sharing the receipts group (0: none; env BENCH_REPLICAS)")
	flag.Parse()
	if *replicas == 1 || *replicas < 0 {
		fmt.Fprintln(os.Stderr, "bench-collector: -replicas is 0 (off) or the number of replicas to compare with one, >= 2")
		os.Exit(2)
	}
	brokers := strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ",")
	chAddr := os.Getenv("TIDEMARK_CLICKHOUSE_ADDR")
	if brokers[0] == "" || chAddr == "" {
		fmt.Fprintln(os.Stderr, "bench-collector: TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR must be set (make bench-collector sets them)")
		os.Exit(2)
	}
	if err := bench(brokers, chAddr, *n, *perRecord, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "bench-collector:", err)
		os.Exit(1)
	}
}

type result struct {
	Receipts          int     `json:"receipts"`
	PipelineRowsPerS  float64 `json:"pipeline_rows_per_s"`
	RawConsumePerS    float64 `json:"raw_consume_per_s"`
	RawInsertPerS     float64 `json:"raw_insert_per_s"`
	RawPipelinePerS   float64 `json:"raw_pipeline_per_s"`
	PipelineRatio     float64 `json:"pipeline_ratio"`
	PipelineVsRaw     float64 `json:"pipeline_vs_raw_pipeline"`
	RSSMB             float64 `json:"rss_mb"`
	PipelineSeconds   float64 `json:"pipeline_seconds"`
	RawConsumeSeconds float64 `json:"raw_consume_seconds"`
	RawInsertSeconds  float64 `json:"raw_insert_seconds"`
	RawPipelineSecs   float64 `json:"raw_pipeline_seconds"`
	LoadAvg           string  `json:"loadavg"`
	MemoryLimitMB     int     `json:"memory_limit_mb"`
	// PipelineStartupSeconds is from Run to the first consumed record (topic checks, connections, group join).
	PipelineStartupSeconds float64 `json:"pipeline_startup_seconds"`
	// ClickHouse's own account of the INSERTs into latency_events (system.query_log, when the server logs queries:
	// deploy/local's does) per phase: INSERTs, and server CPU (user + system) per row in µs. Equal CPU per row
	// means ClickHouse does the same work for the writer's rows and the baseline's: same table, same views.
	RawPipelineInserts    int     `json:"raw_pipeline_inserts,omitempty"`
	RawPipelineCHCPUUsRow float64 `json:"raw_pipeline_ch_cpu_us_per_row,omitempty"`
	PipelineInserts       int     `json:"pipeline_inserts,omitempty"`
	PipelineCHCPUUsRow    float64 `json:"pipeline_ch_cpu_us_per_row,omitempty"`
	// PipelineGCCPUSeconds is the Go garbage collector's CPU in the pipeline phase (runtime/metrics), which the
	// memory limit drives: the collector's main cost besides ClickHouse (docs/performance.md).
	PipelineGCCPUSeconds float64 `json:"pipeline_gc_cpu_s"`
	// Load-independent figures of the pipeline phase (runtime/metrics, whole process: the collector, sarama and
	// clickhouse-go): heap bytes and objects allocated per receipt, garbage collections, and the largest live heap
	// (after a collection) seen by the 5 ms poll. They move with the code, not with the machine's load.
	PipelineAllocBytesPerReceipt float64 `json:"pipeline_alloc_bytes_per_receipt"`
	PipelineAllocsPerReceipt     float64 `json:"pipeline_allocs_per_receipt"`
	PipelineGCCycles             uint64  `json:"pipeline_gc_cycles"`
	PipelinePeakLiveMB           float64 `json:"pipeline_peak_live_mb"`
	// With -replicas N: the shipped binary, 1 process then N (replicas.go).
	Replicas *replicaResult `json:"replicas,omitempty"`
}

// insertStats returns ClickHouse's count of INSERTs into latency_events that started in [from, to] and their
// server CPU (user + system) per inserted row in µs, from system.query_log; zeros when the server logs no queries.
func insertStats(ctx context.Context, st *store.Store, from, to time.Time) (inserts int, usPerRow float64) {
	_ = st.Conn().Exec(ctx, "SYSTEM FLUSH LOGS")
	var n, rows, us uint64
	err := st.Conn().QueryRow(ctx, `SELECT count(), sum(written_rows),
		sum(ProfileEvents.Values[indexOf(ProfileEvents.Names, 'UserTimeMicroseconds')] +
		    ProfileEvents.Values[indexOf(ProfileEvents.Names, 'SystemTimeMicroseconds')])
		FROM system.query_log
		WHERE type = 2 AND query LIKE 'INSERT INTO latency_events%' AND query_start_time >= ? AND query_start_time <= ?`,
		from.Truncate(time.Second), to).Scan(&n, &rows, &us)
	if err != nil || rows == 0 {
		return 0, 0
	}
	return int(n), float64(us) / float64(rows)
}

// heapStats reads the process's cumulative heap allocations (bytes, objects), garbage collections and the live
// heap marked by the last collection (runtime/metrics).
func heapStats() (allocBytes, allocObjects, cycles, liveBytes uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"},
		{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	return v(0), v(1), v(2), v(3)
}

// gcCPUSeconds is the garbage collector's CPU so far (runtime/metrics /cpu/classes/gc/total:cpu-seconds).
func gcCPUSeconds() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// memoryLimitMB is the Go soft memory limit the pipeline runs under: the value docs/collector.md recommends for
// `tidemark run` (memory_limit_mb) on a 300 MB budget. The GC then works harder near the limit instead of letting
// the heap double.
var memoryLimitMB = 250

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	return c
}

func bench(brokers []string, chAddr string, n, perRecord, replicas int) error {
	ctx := context.Background()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "bench-receipts-" + run
	const partitions = 6
	if _, err := kafka.EnsureTopic(brokers, saramaConfig(), kafka.TopicSpec{Name: topic, Partitions: partitions}); err != nil {
		return err
	}
	defer func() {
		if adm, err := sarama.NewClusterAdmin(brokers, saramaConfig()); err == nil {
			_ = adm.DeleteTopic(topic)
			_ = adm.Close()
		}
	}()
	n -= n % partitions // every partition gets the same number of receipts
	fmt.Fprintf(os.Stderr, "producing %d receipts to %s...\n", n, topic)
	records, err := produce(brokers, topic, n, perRecord, partitions)
	if err != nil {
		return err
	}

	db := "tidemark_bench"
	cfg := store.Config{Addr: []string{chAddr}, Database: db}
	st, err := store.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	_ = st.Conn().Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}

	var res result
	res.Receipts = n
	res.MemoryLimitMB = memoryLimitMB
	// quiesce waits (up to 60 s) until ClickHouse runs no merge, so one phase's background merges do not slow the
	// next phase's inserts (they made run-to-run results swing by 2×).
	quiesce := func() {
		for i := 0; i < 240; i++ {
			var m uint64
			if err := st.Conn().QueryRow(ctx, "SELECT count() FROM system.merges").Scan(&m); err != nil || m == 0 {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	quiesce()
	fmt.Fprintln(os.Stderr, "raw consume...")
	if res.RawConsumeSeconds, err = rawConsume(brokers, topic, n); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "peak RSS %.0f MB\n", peakRSSMB())
	quiesce()
	fmt.Fprintln(os.Stderr, "raw insert...")
	if res.RawInsertSeconds, err = rawInsert(ctx, chAddr, db, n); err != nil {
		return err
	}
	if err := st.Conn().Exec(ctx, "TRUNCATE TABLE latency_events"); err != nil {
		return fmt.Errorf("truncate after the raw insert: %w", err)
	}
	fmt.Fprintf(os.Stderr, "peak RSS %.0f MB\n", peakRSSMB())
	quiesce()
	fmt.Fprintln(os.Stderr, "raw pipeline...")
	time.Sleep(1100 * time.Millisecond) // query_log's start times have 1 s resolution: phases get seconds of their own
	rawFrom := time.Now()
	if res.RawPipelineSecs, err = rawPipeline(ctx, brokers, topic, chAddr, db, n, writerConfig.BatchRows, writerConfig.MaxRows); err != nil {
		return err
	}
	res.RawPipelineInserts, res.RawPipelineCHCPUUsRow = insertStats(ctx, st, rawFrom, time.Now())
	if err := st.Conn().Exec(ctx, "TRUNCATE TABLE latency_events"); err != nil {
		return fmt.Errorf("truncate after the raw pipeline: %w", err)
	}
	fmt.Fprintf(os.Stderr, "peak RSS %.0f MB\n", peakRSSMB())
	fmt.Fprintln(os.Stderr, "pipeline...")
	// rss_mb is the pipeline's own peak: return the baselines' memory to the OS and reset the peak (Linux resets
	// VmHWM when 5 is written to clear_refs), so the raw phases' buffers are not charged to the collector.
	quiesce()
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	debug.SetMemoryLimit(int64(memoryLimitMB) << 20)
	time.Sleep(1100 * time.Millisecond)
	pipeFrom, gc0 := time.Now(), gcCPUSeconds()
	ab0, ao0, cy0, _ := heapStats()
	var peakLive uint64
	if res.PipelineSeconds, res.PipelineStartupSeconds, err = pipeline(ctx, st, brokers, topic, n, records, &peakLive); err != nil {
		return err
	}
	res.PipelineGCCPUSeconds = gcCPUSeconds() - gc0
	ab1, ao1, cy1, _ := heapStats()
	res.PipelineAllocBytesPerReceipt = float64(ab1-ab0) / float64(n)
	res.PipelineAllocsPerReceipt = float64(ao1-ao0) / float64(n)
	res.PipelineGCCycles = cy1 - cy0
	res.PipelinePeakLiveMB = float64(peakLive) / (1 << 20)
	res.PipelineInserts, res.PipelineCHCPUUsRow = insertStats(ctx, st, pipeFrom, time.Now())
	res.RawConsumePerS = float64(n) / res.RawConsumeSeconds
	res.RawInsertPerS = float64(n) / res.RawInsertSeconds
	res.PipelineRowsPerS = float64(n) / res.PipelineSeconds
	res.RawPipelinePerS = float64(n) / res.RawPipelineSecs
	res.PipelineRatio = res.PipelineRowsPerS / min(res.RawConsumePerS, res.RawInsertPerS)
	res.PipelineVsRaw = res.PipelineRowsPerS / res.RawPipelinePerS
	res.RSSMB = peakRSSMB()
	if replicas > 0 {
		debug.SetMemoryLimit(math.MaxInt64) // the bench process only watches from here on
		if res.Replicas, err = replicaPhases(ctx, st, brokers, chAddr, topic, n, replicas, quiesce); err != nil {
			return err
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// produce writes n receipts of realistic shape (every stamp, a trace, three producer and two consumer hosts) in
// records of perRecord, keyed by source partition like the instrumentation's emitter, and returns how many records
// it wrote.
func produce(brokers []string, topic string, n, perRecord, partitions int) (records int, err error) {
	c := saramaConfig()
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	now := time.Now()
	var msgs []*sarama.ProducerMessage
	perPart := n / partitions
	for part := 0; part < partitions; part++ {
		for first := 0; first < perPart; first += perRecord {
			k := min(perRecord, perPart-first)
			rs := make([]instrument.Receipt, k)
			for j := range rs {
				off := int64(first + j)
				base := now.Add(time.Duration(off) * time.Millisecond)
				rs[j] = instrument.Receipt{
					Group: "bench-app", Topic: "orders", Partition: int32(part), Offset: off,
					RecordTimestampMs: base.Add(3 * time.Millisecond).UnixMilli(), HasRecordTimestamp: true,
					TimestampType: instrument.TimestampLogAppend,
					ProduceNs:     base.Add(2500 * time.Millisecond).UnixNano(), ProduceHost: "p" + strconv.Itoa(int(off%3)),
					ReceiveNs: base.Add(10 * time.Millisecond).UnixNano(), ProcessedNs: base.Add(15 * time.Millisecond).UnixNano(),
					Host: "c" + strconv.Itoa(part%2), TraceID: [16]byte{byte(off), 1}, SpanID: [8]byte{2}, HasTrace: true,
				}
			}
			v, err := instrument.AppendReceiptBatch(nil, rs)
			if err != nil {
				return 0, err
			}
			records++
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: int32(part), Value: sarama.ByteEncoder(v)})
			if len(msgs) == 200 {
				if err := p.SendMessages(msgs); err != nil {
					return 0, err
				}
				msgs = msgs[:0]
			}
		}
	}
	if len(msgs) > 0 {
		return records, p.SendMessages(msgs)
	}
	return records, nil
}

// rawConsume reads the topic with a fresh consumer group and counts receipts from each record's batch header.
func rawConsume(brokers []string, topic string, n int) (float64, error) {
	var got atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	stop := time.AfterFunc(5*time.Minute, cancel)
	defer stop.Stop()
	err := kafka.RunGroup(ctx, kafka.GroupConfig{Brokers: brokers, Sarama: saramaConfig(), Group: "bench-raw-" + topic,
		Topics: []string{topic}, Oldest: true, MaxBatch: 1000},
		func(_ context.Context, b kafka.Batch, mark func(int64)) error {
			for i := range b.Records {
				cnt, _ := binary.Uvarint(b.Records[i].Value[1:])
				if got.Add(int64(cnt)) >= int64(n) {
					cancel()
				}
			}
			mark(b.Records[len(b.Records)-1].Offset + 1)
			return nil
		})
	if err != nil {
		return 0, err
	}
	if got.Load() < int64(n) {
		return 0, fmt.Errorf("raw consume read %d of %d receipts", got.Load(), n)
	}
	return time.Since(start).Seconds(), nil
}

// rawInsert inserts n latency rows with clickhouse-go directly: columnar 50k-row batches, one connection. The rows
// are built before the clock starts (building them inside it charged Go's row building to ClickHouse's insert and
// made raw_insert_per_s a floor, not the insert's limit).
func rawInsert(ctx context.Context, addr, db string, n int) (float64, error) {
	conn, err := rawConn(addr, db)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	const batch = 50000
	now := time.Now()
	var batches [][]any
	for done := 0; done < n; done += batch {
		batches = append(batches, buildRows(now, done, min(batch, n-done)))
	}
	start := time.Now()
	for _, cols := range batches {
		if err := insertRows(ctx, conn, cols); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds(), nil
}

// rawPipeline consumes the topic with sarama and inserts, concurrently, the pre-built rows of what it consumed:
// every batchRows receipts consumed release one pre-built batch (the last one partial), handed over by a channel,
// and each INSERT takes every released batch (up to maxRows rows), as the writer takes every pending row. That is
// the physical limit of a consume → insert pipeline on this machine. The insert side is staged like the writer's
// (one INSERT is appended while the one before it is sent), so the baseline has the pipeline's concurrency and
// batching and none of its work. The clock runs from the first consumed record to the last insert's ack.
func rawPipeline(ctx context.Context, brokers []string, topic, addr, db string, n, batchRows, maxRows int) (float64, error) {
	conn, err := rawConn(addr, db)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	now := time.Now()
	var batches [][]any
	for done := 0; done < n; done += batchRows {
		batches = append(batches, buildRows(now, done, min(batchRows, n-done)))
	}
	ready := make(chan int, len(batches)) // index of a batch whose receipts have been consumed
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := time.AfterFunc(5*time.Minute, cancel)
	defer stop.Stop()
	var first atomic.Int64 // unix nanos of the first consumed record
	consumed := make(chan error, 1)
	go func() {
		var got int64
		next := 0
		consumed <- kafka.RunGroup(cctx, kafka.GroupConfig{Brokers: brokers, Sarama: saramaConfig(), Group: "bench-rawpipe-" + topic,
			Topics: []string{topic}, Oldest: true, MaxBatch: 1000},
			func(_ context.Context, b kafka.Batch, mark func(int64)) error {
				first.CompareAndSwap(0, time.Now().UnixNano())
				for i := range b.Records {
					cnt, _ := binary.Uvarint(b.Records[i].Value[1:])
					got += int64(cnt)
				}
				for next < len(batches) && (got >= int64((next+1)*batchRows) || got >= int64(n)) {
					ready <- next
					next++
				}
				mark(b.Records[len(b.Records)-1].Offset + 1)
				return nil
			})
	}()
	prepared := make(chan driver.Batch) // unbuffered: one batch prepared ahead of the one being sent
	sent := make(chan error, 1)
	go func() {
		var err error
		for b := range prepared {
			if err == nil {
				if err = b.Send(); err != nil {
					err = fmt.Errorf("send raw insert: %w", err)
				}
			} else {
				_ = b.Abort()
			}
		}
		sent <- err
	}()
	var prepErr error
	// Like the writer, which takes every pending row when its sender is free, one INSERT carries every batch
	// consumed so far (at least one, up to maxRows rows): while ClickHouse is the bottleneck inserts grow, so the
	// baseline pays no more per-INSERT overhead than the pipeline does.
	for taken := 0; taken < len(batches) && prepErr == nil; {
		var take [][]any
		select {
		case i := <-ready:
			take = append(take, batches[i])
		case err := <-consumed:
			prepErr = fmt.Errorf("raw pipeline consumer stopped early: %v", err)
			continue
		}
	more:
		for (len(take)+1)*batchRows <= maxRows {
			select {
			case i := <-ready:
				take = append(take, batches[i])
			default:
				break more
			}
		}
		taken += len(take)
		b, err := prepareRows(ctx, conn, take...)
		if err != nil {
			prepErr = err
			break
		}
		prepared <- b
	}
	close(prepared)
	if err := errors.Join(prepErr, <-sent); err != nil {
		return 0, err
	}
	elapsed := time.Since(time.Unix(0, first.Load())).Seconds()
	cancel()
	<-consumed
	return elapsed, nil
}

func rawConn(addr, db string) (clickhouse.Conn, error) {
	return clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, Auth: clickhouse.Auth{Database: db, Username: "default"},
		Settings: clickhouse.Settings{"max_execution_time": 60}, Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4}})
}

// insertRows inserts one batch of columns built by buildRows.
func insertRows(ctx context.Context, conn clickhouse.Conn, cols []any) error {
	b, err := prepareRows(ctx, conn, cols)
	if err != nil {
		return err
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("send raw insert: %w", err)
	}
	return nil
}

// prepareRows starts one INSERT of the batches of columns built by buildRows, in order, and appends them, ready
// to send.
func prepareRows(ctx context.Context, conn clickhouse.Conn, batches ...[]any) (driver.Batch, error) {
	b, err := conn.PrepareBatch(ctx, `INSERT INTO latency_events (record_time, observed_time, consumer_group, topic,
		partition, offset, replay_class, source, event_ts_ms, append_ts_ms, receive_ts_ms, processed_ts_ms,
		ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms, ingest_ms, queue_ms, process_ms, e2e_ms,
		uncertainty_ms, valid, flags, producer_host, broker_host, consumer_host, trace_id, span_id, ver)`)
	if err != nil {
		return nil, fmt.Errorf("prepare raw insert: %w", err)
	}
	for _, cols := range batches {
		for c, v := range cols {
			if err := b.Column(c).Append(v); err != nil {
				_ = b.Abort()
				return nil, fmt.Errorf("append column %d: %w", c, err)
			}
		}
	}
	return b, nil
}

// buildRows builds rows done..done+k-1 as columns: the same rows the pipeline writes for these receipts (per-row
// offsets, stamps, hosts and trace ids).
func buildRows(now time.Time, done, k int) []any {
	var (
		times, obs                                               = make([]time.Time, k), make([]time.Time, k)
		groups, topics, phost, bhost, chost, tids, sids          = mk[string](k), mk[string](k), mk[string](k), mk[string](k), mk[string](k), mk[string](k), mk[string](k)
		parts                                                    = mk[int32](k)
		offs, ev, ap, rc, pr, in, qu, pc, e2, inc, quc, pcc, e2c = mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k), mk[int64](k)
		class, src                                               = mk[int8](k), mk[int8](k)
		unc                                                      = mk[float64](k)
		valid                                                    = mk[uint8](k)
		flags                                                    = mk[uint32](k)
		ver                                                      = mk[uint64](k)
	)
	for i := 0; i < k; i++ {
		row := done + i
		part, off := row%6, int64(row/6)
		base := now.Add(time.Duration(off) * time.Millisecond)
		times[i], obs[i] = base, base.Add(15*time.Millisecond)
		groups[i], topics[i], parts[i], offs[i], class[i], src[i] = "bench-app", "orders", int32(part), off, 1, 2
		ev[i], ap[i] = base.Add(2500*time.Millisecond).UnixMilli(), base.Add(3*time.Millisecond).UnixMilli()
		rc[i], pr[i] = base.Add(10*time.Millisecond).UnixMilli(), base.Add(15*time.Millisecond).UnixMilli()
		in[i], qu[i], pc[i], e2[i] = ap[i]-ev[i], rc[i]-ap[i], pr[i]-rc[i], pr[i]-ev[i]
		inc[i], quc[i], pcc[i], e2c[i] = 0, 7, 5, 12
		unc[i], valid[i], flags[i], ver[i] = 1.5, 0xff, 8, uint64(now.UnixMilli())
		phost[i], bhost[i], chost[i] = "p"+strconv.Itoa(int(off%3)), "broker-1", "c"+strconv.Itoa(part%2)
		tids[i] = hex.EncodeToString([]byte{byte(off), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		sids[i] = "0200000000000000"
	}
	return []any{times, obs, groups, topics, parts, offs, class, src, ev, ap, rc, pr, in, qu, pc, e2,
		inc, quc, pcc, e2c, unc, valid, flags, phost, bhost, chost, tids, sids, ver}
}

// writerConfig is the writer the pipeline runs with (-batch-rows, -max-rows change it): 25k-row batches and at
// most 100k rows held, within docs/collector.md's ~300 MB budget. Four batches of room (the store's default
// max_rows:batch_rows ratio) let the consumers fill the next batches while the writer sends one and prepares the
// one after it; measured on the 2-core machine, 50k/100k left ClickHouse idle while the first batch filled and
// while the consumers waited for room (ratio 0.54-0.57), 50k/150k did no better (0.50), 25k/100k gave 0.80.
var writerConfig = store.WriterConfig{BatchRows: 25000, MaxRows: 100000}

// pipeline runs the collector's receipts path until ClickHouse acknowledged n rows.
//
// The input is finite: once the collector has consumed every record, the bench flushes the writer, as the raw insert
// sends its last partial batch at once; otherwise that batch would wait for the writer's flush ticker (up to
// flush_interval, 1 s, a quarter of the run), which a continuous stream never pays per row.
//
// peakLive receives the largest live heap (bytes marked by a collection) seen while it polls the collector's
// counters.
func pipeline(ctx context.Context, st *store.Store, brokers []string, topic string, n, records int, peakLive *uint64) (elapsed, startup float64, err error) {
	wcfg := st.Config()
	wcfg.Writer = writerConfig
	wst, err := store.Open(ctx, wcfg)
	if err != nil {
		return 0, 0, err
	}
	defer wst.Close()
	reg := prometheus.NewRegistry()
	w, err := store.NewWriter(wst, store.WriterOptions{Registerer: reg})
	fmt.Fprintf(os.Stderr, "writer: %+v\n", wst.Config().Writer)
	if err != nil {
		return 0, 0, err
	}
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		return 0, 0, err
	}
	m := collector.NewMetrics(nil)
	c, err := collector.New(collector.Config{
		DeadLetterTopic:  "bench-dlq-" + topic,
		ReplayStateTopic: "bench-state-" + topic,
		Receipts:         collector.ReceiptsConfig{Enabled: true, Topic: topic, Group: "bench-pipe-" + topic},
		MaxBatch:         10,
	}, collector.Options{Kafka: kafka.ClientConfig{Brokers: brokers}, Engine: eng, Sink: w, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	if p := os.Getenv("BENCH_ALLOCPROFILE"); p != "" { // allocations of the pipeline phase: go tool pprof -base P.base P
		writeProfile("allocs", p+".base")
		defer writeProfile("allocs", p)
	}
	if p := os.Getenv("BENCH_CPUPROFILE"); p != "" { // for finding the pipeline's hot spots
		if f, err := os.Create(p); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	start := time.Now()
	go func() { done <- c.Run(rctx) }()
	acked := m.RowsAcked.WithLabelValues(collector.PathReceipts)
	consumed := m.Records.WithLabelValues(collector.PathReceipts)
	deadline := time.Now().Add(5 * time.Minute)
	// The clock starts at the first consumed record: topic checks, connections and the group join (a few hundred
	// ms to seconds, once per process) are reported apart as pipeline_startup_seconds.
	var first time.Time
	for testutil.ToFloat64(acked) < float64(n) {
		if testutil.ToFloat64(consumed) >= float64(records) {
			fctx, fcancel := context.WithTimeout(ctx, time.Second)
			_ = w.Flush(fctx) // end of input: take the last partial batch now
			fcancel()
		}
		if first.IsZero() && testutil.ToFloat64(consumed) > 0 {
			first = time.Now()
		}
		if _, _, _, live := heapStats(); live > *peakLive {
			*peakLive = live
		}
		if time.Now().After(deadline) {
			cancel()
			return 0, 0, fmt.Errorf("pipeline acknowledged %v of %d rows in 5 minutes", testutil.ToFloat64(acked), n)
		}
		select {
		case err := <-done:
			cancel()
			return 0, 0, fmt.Errorf("collector stopped early: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed = time.Since(first).Seconds()
	startup = first.Sub(start).Seconds()
	if os.Getenv("BENCH_VERBOSE") != "" {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					fmt.Fprintf(os.Stderr, "%s count %d sum %.2f\n", mf.GetName(), h.GetSampleCount(), h.GetSampleSum())
				} else if c := m.GetCounter(); c != nil {
					fmt.Fprintf(os.Stderr, "%s %v %.2f\n", mf.GetName(), m.GetLabel(), c.GetValue())
				}
			}
		}
		fmt.Fprintf(os.Stderr, "collector blocked in Write %.2fs (summed over partitions)\n",
			testutil.ToFloat64(m.SinkBlocked.WithLabelValues(collector.PathReceipts)))
	}
	if p := os.Getenv("BENCH_HEAPPROFILE"); p != "" {
		writeProfile("heap", p)
	}
	cancel()
	<-done
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	_ = w.Close(cctx)
	if adm, err := sarama.NewClusterAdmin(brokers, saramaConfig()); err == nil {
		_ = adm.DeleteTopic("bench-dlq-" + topic)
		_ = adm.Close()
	}
	return elapsed, startup, nil
}

func mk[T any](n int) []T { return make([]T, n) }

// writeProfile writes the named runtime/pprof profile to path (errors ignored: profiles are a diagnostic).
func writeProfile(name, path string) {
	if f, err := os.Create(path); err == nil {
		_ = pprof.Lookup(name).WriteTo(f, 0)
		f.Close()
	}
}

// peakRSSMB reads the process's peak resident set size (VmHWM) from /proc, -1 when unreadable.
func peakRSSMB() float64 {
	v, err := benchproc.StatusMB(os.Getpid(), "VmHWM")
	if err != nil {
		return -1
	}
	return v
}
