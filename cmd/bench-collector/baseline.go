package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/collector"
	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

// effective is what `tidemark run` runs with for the user's configuration (read from `tidemark run
// --print-config`): the writer's settings after memory_limit_mb sized them, and the receipts path's consumer batch
// shape. The baselines run the same.
type effective struct {
	MemoryLimitMB int `yaml:"memory_limit_mb"`
	ClickHouse    struct {
		Writer store.WriterConfig `yaml:"writer"`
	} `yaml:"clickhouse"`
	Collector struct {
		MaxBatch int           `yaml:"max_batch"`
		MaxWait  time.Duration `yaml:"max_wait"`
	} `yaml:"collector"`
}

// readEffective runs `bin run --config cfg --print-config` and parses the settings the baselines copy.
func readEffective(ctx context.Context, bin, cfg string) (effective, error) {
	var e effective
	cmd := exec.CommandContext(ctx, bin, "run", "--config", cfg, "--print-config")
	cmd.Env = benchproc.CleanEnv()
	out, err := cmd.Output()
	if err != nil {
		return e, fmt.Errorf("tidemark run --print-config: %w", err)
	}
	if err := yaml.Unmarshal(out, &e); err != nil {
		return e, fmt.Errorf("parse tidemark run --print-config: %w", err)
	}
	if e.ClickHouse.Writer.BatchRows == 0 || e.Collector.MaxBatch == 0 {
		return e, fmt.Errorf("tidemark run --print-config has no clickhouse.writer.batch_rows or collector.max_batch:\n%s", out)
	}
	return e, nil
}

// rowShape is what the collector's correction puts into the rows of one receipts partition, read back from the
// rows the first pipeline phase stored (readShape): everything of a row that is not a copy of the receipt's own
// fields. The baselines write rows of this shape, so ClickHouse compresses, sorts and aggregates the same values.
type rowShape struct {
	Class                               store.ReplayClass
	Source                              store.Source
	IngestMs, QueueMs, ProcessMs, E2EMs int64
	UncertaintyMs                       float64
	Valid                               store.StageBits
	Flags                               uint32
	BrokerHost, Cluster                 string
}

// readShape returns each source partition's most common row shape in latency_events and the fraction of the
// stored rows that have it (1 when the correction settled at once; the rest differ only in the corrected stages,
// validity or flags of the engine's first records).
func readShape(ctx context.Context, st *store.Store) (map[int32]rowShape, float64, error) {
	rows, err := st.Conn().Query(ctx, `SELECT partition, toInt8(replay_class), toInt8(source), ingest_ms, queue_ms,
		process_ms, e2e_ms, uncertainty_ms, valid, flags, broker_host, toString(cluster), count() AS c
		FROM latency_events WHERE consumer_group = 'bench-app'
		GROUP BY partition, replay_class, source, ingest_ms, queue_ms, process_ms, e2e_ms, uncertainty_ms, valid,
			flags, broker_host, cluster
		ORDER BY c DESC LIMIT 1 BY partition`)
	if err != nil {
		return nil, 0, fmt.Errorf("read the pipeline's row shape: %w", err)
	}
	defer rows.Close()
	shapes := map[int32]rowShape{}
	var modal uint64
	for rows.Next() {
		var (
			s         rowShape
			part      int32
			cls, src  int8
			valid     uint8
			c         uint64
			broker, k string
		)
		if err := rows.Scan(&part, &cls, &src, &s.IngestMs, &s.QueueMs, &s.ProcessMs, &s.E2EMs, &s.UncertaintyMs,
			&valid, &s.Flags, &broker, &k, &c); err != nil {
			return nil, 0, fmt.Errorf("read the pipeline's row shape: %w", err)
		}
		s.Class, s.Source, s.Valid, s.BrokerHost, s.Cluster = store.ReplayClass(cls), store.Source(src), store.StageBits(valid), broker, k
		shapes[part] = s
		modal += c
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("read the pipeline's row shape: %w", err)
	}
	var total uint64
	if err := st.Conn().QueryRow(ctx, "SELECT count() FROM latency_events WHERE consumer_group = 'bench-app'").Scan(&total); err != nil || total == 0 {
		return nil, 0, fmt.Errorf("count the pipeline's rows (%d): %v", total, err)
	}
	return shapes, float64(modal) / float64(total), nil
}

// rowFiller writes the rows the collector stores for the receipts produce wrote: the receipt's own fields (keys,
// stamps, hosts, trace and span ids, the receipts record it came from) and the partition's rowShape. Every string
// is built in advance, so filling a row is a struct copy and a few integer fields (tens of ns, against the µs a row
// costs end to end): the rows are pre-built in all but their memory, which is taken from a pool and returned when
// the writer acknowledged them, so no more rows are live than the writer holds.
type rowFiller struct {
	now       time.Time
	perRecord int
	shapes    map[int32]rowShape
	traces    [256]string // trace id hex by the receipt offset's low byte (produce: TraceID {byte(off), 1})
	producers [3]string
	consumers [2]string
	pool      sync.Pool // *[]store.LatencyRow
}

func newRowFiller(now time.Time, perRecord int, shapes map[int32]rowShape) *rowFiller {
	f := &rowFiller{now: now, perRecord: perRecord, shapes: shapes}
	for i := range f.traces {
		f.traces[i] = hex.EncodeToString([]byte{byte(i), 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	}
	for i := range f.producers {
		f.producers[i] = "p" + strconv.Itoa(i)
	}
	for i := range f.consumers {
		f.consumers[i] = "c" + strconv.Itoa(i)
	}
	return f
}

// get returns an empty row slice from the pool.
func (f *rowFiller) get() *[]store.LatencyRow {
	if p, ok := f.pool.Get().(*[]store.LatencyRow); ok {
		return p
	}
	s := make([]store.LatencyRow, 0, f.perRecord)
	return &s
}

// put returns rows the writer acknowledged to the pool.
func (f *rowFiller) put(p *[]store.LatencyRow) {
	clear(*p)
	*p = (*p)[:0]
	f.pool.Put(p)
}

// appendRecord appends the rows of the k receipts of receipts-topic record (part, recOff): produce wrote receipt
// offsets recOff*perRecord... of source partition part into it, with stamps at now + offset ms.
func (f *rowFiller) appendRecord(dst []store.LatencyRow, part int32, recOff int64, k int) []store.LatencyRow {
	sh := f.shapes[part]
	tmpl := store.LatencyRow{
		Cluster: sh.Cluster, Group: "bench-app", Topic: "orders", Partition: part, Class: sh.Class, Source: sh.Source,
		IngestMs: sh.IngestMs, QueueMs: sh.QueueMs, ProcessMs: sh.ProcessMs, E2EMs: sh.E2EMs,
		UncertaintyMs: sh.UncertaintyMs, Valid: sh.Valid, Flags: sh.Flags, BrokerHost: sh.BrokerHost,
		ConsumerHost: f.consumers[part%2], SpanID: "0200000000000000", ReceiptPartition: part, ReceiptOffset: recOff,
	}
	base0 := f.now.UnixMilli()
	for j := 0; j < k; j++ {
		off := recOff*int64(f.perRecord) + int64(j)
		r := tmpl
		base := base0 + off
		r.Offset = off
		r.EventMs, r.AppendMs, r.ReceiveMs, r.ProcessedMs = base+2500, base+3, base+10, base+15
		r.IngestNaiveMs, r.QueueNaiveMs = r.AppendMs-r.EventMs, r.ReceiveMs-r.AppendMs
		r.ProcessNaiveMs, r.E2ENaiveMs = r.ProcessedMs-r.ReceiveMs, r.ProcessedMs-r.EventMs
		r.ProducerHost, r.TraceID = f.producers[off%3], f.traces[byte(off)]
		dst = append(dst, r)
	}
	return dst
}

// baselineWriter opens a Store with the shipped process's effective writer settings (its transport: the same
// clickhouse-go options, streamed blocks, batch sizes, bounds and flush interval) and returns its Writer, with the
// dedup window off (dedup is Tidemark's work, which the baselines leave out), and a restore func that closes both
// and puts back the bench process's GC settings. For the phase the bench process runs under the shipped process's
// GC settings: GOGC 75 and a soft memory limit of 90 % of memory_limit_mb (cmd/tidemark run.go).
func baselineWriter(ctx context.Context, st *store.Store, eff effective) (*store.Writer, func(), error) {
	cfg := st.Config()
	cfg.Writer = eff.ClickHouse.Writer
	cfg.Writer.DedupWindow = -1
	wst, err := store.Open(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	w, err := store.NewWriter(wst, store.WriterOptions{})
	if err != nil {
		wst.Close()
		return nil, nil, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	oldGC := debug.SetGCPercent(75)
	oldLimit := debug.SetMemoryLimit(-1)
	if eff.MemoryLimitMB > 0 {
		debug.SetMemoryLimit(int64(eff.MemoryLimitMB) << 20 * 9 / 10)
	}
	return w, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Close(cctx)
		wst.Close()
		debug.SetGCPercent(oldGC)
		debug.SetMemoryLimit(oldLimit)
	}, nil
}

// rawPipeline is the same-transport baseline of the whole pipeline: it consumes the receipts topic with the
// collector's consumer settings (a fresh group, batches of max_batch records, collector.ReceiptsBatchRows receipts or
// max_wait, collector.ReceiptsChannelBuffer records buffered) and hands each batch's
// pre-built rows (rowFiller) to store.Writer with `tidemark run`'s effective settings, one Write per batch as the
// receipts path does, marking the batch's offsets when the writer acknowledged it. What it leaves out is
// Tidemark's work: decoding receipts, clock and replay correction, building rows, dedup. It is timed like the
// pipeline (throughput, polled every pollEvery); the consume handlers (one goroutine per partition), the writer's
// acks and the poll share only atomics.
func rawPipeline(ctx context.Context, st *store.Store, eff effective, fill *rowFiller, brokers []string, topic string, n int) (rowsPerS float64, err error) {
	w, closeW, err := baselineWriter(ctx, st, eff)
	if err != nil {
		return 0, err
	}
	defer closeW()
	kc := kafka.ClientConfig{Brokers: brokers}
	kc.SetDefaults()
	sc, err := kc.Sarama()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := time.AfterFunc(5*time.Minute, cancel)
	defer stop.Stop()
	var (
		consumed, acked atomic.Int64
		consumerErr     = make(chan error, 1)
	)
	go func() {
		consumerErr <- kafka.RunGroup(cctx, kafka.GroupConfig{Brokers: brokers, Sarama: sc, Group: "bench-rawpipe-" + topic + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
			Topics: []string{topic}, Oldest: true, MaxBatch: eff.Collector.MaxBatch, MaxWait: eff.Collector.MaxWait,
			ChannelBuffer: collector.ReceiptsChannelBuffer, Weight: collector.ReceiptsWeight, MaxWeight: collector.ReceiptsBatchRows},
			func(ctx context.Context, b kafka.Batch, mark func(int64)) error {
				consumed.Add(int64(len(b.Records)))
				p := fill.get()
				rows := *p
				for i := range b.Records {
					cnt, _ := instrument.ReceiptBatchLen(b.Records[i].Value)
					rows = fill.appendRecord(rows, b.Partition, b.Records[i].Offset, int(cnt))
				}
				*p = rows
				k, next := int64(len(rows)), b.Records[len(b.Records)-1].Offset+1
				return w.Write(ctx, store.Rows{Latency: rows}, func(err error) {
					fill.put(p)
					if err == nil {
						mark(next)
						acked.Add(k)
					}
				})
			})
	}()
	samples, err := poll(ctx, n, 5*time.Minute, func() (float64, float64, error) {
		select {
		case err := <-consumerErr:
			return 0, 0, fmt.Errorf("the consumer stopped: %v", err)
		default:
		}
		return float64(consumed.Load()), float64(acked.Load()), nil
	})
	if err != nil {
		return 0, fmt.Errorf("raw pipeline: %w", err)
	}
	cancel()
	<-consumerErr
	rate, _, ok := throughput(samples, n, eff.ClickHouse.Writer.BatchRows)
	if !ok {
		return 0, fmt.Errorf("raw pipeline: no throughput from %d samples", len(samples))
	}
	return rate, nil
}

// rawInsert is the same-transport baseline of the insert alone: the pre-built rows of every receipts record, one
// Write per record in produce's order, to store.Writer with `tidemark run`'s effective settings (no Kafka), timed
// like the pipeline (throughput) from the first Write.
func rawInsert(ctx context.Context, st *store.Store, eff effective, fill *rowFiller, n, partitions int) (float64, error) {
	w, closeW, err := baselineWriter(ctx, st, eff)
	if err != nil {
		return 0, err
	}
	defer closeW()
	var written, acked atomic.Int64
	perPart := n / partitions
	writeErr := make(chan error, 1)
	go func() {
		for part := 0; part < partitions; part++ {
			for rec := int64(0); int(rec)*fill.perRecord < perPart; rec++ {
				k := min(fill.perRecord, perPart-int(rec)*fill.perRecord)
				p := fill.get()
				*p = fill.appendRecord(*p, int32(part), rec, k)
				written.Add(int64(k))
				if err := w.Write(ctx, store.Rows{Latency: *p}, func(err error) {
					fill.put(p)
					if err == nil {
						acked.Add(int64(k))
					}
				}); err != nil {
					writeErr <- err
					return
				}
			}
		}
		writeErr <- nil
	}()
	samples, err := poll(ctx, n, 5*time.Minute, func() (float64, float64, error) {
		return float64(written.Load()), float64(acked.Load()), nil
	})
	if err != nil {
		return 0, fmt.Errorf("raw insert: %w", err)
	}
	if err := <-writeErr; err != nil {
		return 0, fmt.Errorf("raw insert: %w", err)
	}
	rate, _, ok := throughput(samples, n, eff.ClickHouse.Writer.BatchRows)
	if !ok {
		return 0, fmt.Errorf("raw insert: no throughput from %d samples", len(samples))
	}
	return rate, nil
}

// rawConsume reads the topic with a fresh consumer group, the collector's consumer settings, and counts receipts
// from each record's batch header (nothing decoded, nothing written). The clock runs from the group's assignment
// (so the fetches are timed: the whole topic arrives in a few fetches) to the last receipt.
func rawConsume(ctx context.Context, eff effective, brokers []string, topic string, n int) (float64, error) {
	kc := kafka.ClientConfig{Brokers: brokers}
	kc.SetDefaults()
	sc, err := kc.Sarama()
	if err != nil {
		return 0, err
	}
	var got, first, last atomic.Int64 // first: unix nanos the session was assigned its partitions
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := time.AfterFunc(5*time.Minute, cancel)
	defer stop.Stop()
	err = kafka.RunGroup(ctx, kafka.GroupConfig{Brokers: brokers, Sarama: sc, Group: "bench-raw-" + topic + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Topics: []string{topic}, Oldest: true, MaxBatch: eff.Collector.MaxBatch, MaxWait: eff.Collector.MaxWait,
		ChannelBuffer: collector.ReceiptsChannelBuffer, Weight: collector.ReceiptsWeight, MaxWeight: collector.ReceiptsBatchRows,
		OnAssigned: func(map[string][]int32) { first.CompareAndSwap(0, time.Now().UnixNano()) }},
		func(_ context.Context, b kafka.Batch, mark func(int64)) error {
			var k int64
			for i := range b.Records {
				cnt, _ := instrument.ReceiptBatchLen(b.Records[i].Value)
				k += int64(cnt)
			}
			mark(b.Records[len(b.Records)-1].Offset + 1)
			if got.Add(k) >= int64(n) && last.CompareAndSwap(0, time.Now().UnixNano()) {
				cancel()
			}
			return nil
		})
	if err != nil {
		return 0, err
	}
	if got.Load() < int64(n) {
		return 0, fmt.Errorf("raw consume read %d of %d receipts", got.Load(), n)
	}
	return time.Duration(last.Load() - first.Load()).Seconds(), nil
}
