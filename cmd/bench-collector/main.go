// Command bench-collector measures the collector's receipts pipeline (Kafka → decode → latency engine → batched
// writer → ClickHouse) against baselines that do everything the pipeline does but Tidemark's own work, on the same
// receipts in the same run, in alternating rounds:
//
//   - pipeline_rows_per_s: the shipped binary, built by the bench: `tidemark run` with a user's configuration
//     (userConfig: memory_limit_mb, addresses, the receipts path; nothing tuned), a fresh receipts group each round,
//     measured from outside from its first consumed record until its /metrics says ClickHouse acknowledged every
//     row (polled every 100 ms);
//   - raw_pipeline_per_s: the same transport without Tidemark's work (baseline.go): the collector's consumer
//     settings, and store.Writer, the writer `tidemark run` uses, with the settings `tidemark run --print-config`
//     reports for that configuration (streamed blocks, batch_rows, max_rows, max_bytes, flush interval) and the
//     same GC settings, fed pre-built rows of the same shape (the partition's row shape read back from the
//     pipeline's own rows) one Write per consumed batch; only decoding, correction, row building and dedup are
//     left out;
//   - raw_consume_per_s: the consumer alone (receipts counted from each record's header);
//   - raw_insert_per_s: the writer alone over the same pre-built rows.
//
// Each round runs every phase once; the order alternates (pipeline first in even rounds, last in odd ones), every
// phase starts on an empty latency_events with ClickHouse's merges settled. Figures are medians over the rounds
// with min and max; pipeline_vs_raw_pipeline is the median of the per-round ratios (target ≥ 0.85: what decode,
// correction, row building and dedup cost), pipeline_ratio = pipeline / min(raw consume, raw insert). rss_mb is
// the `tidemark run` process's peak RSS (VmHWM). The last line printed is the JSON result, with its provenance
// (commit, versions, load average at the end of each phase, rounds). Run it with `make bench-collector` (starts
// the stack); -rounds (env BENCH_ROUNDS) and -receipts shorten a quick run.
//
// -replicas 2 (BENCH_REPLICAS=2, `make bench-collector BENCH_REPLICAS=2`) then runs one `tidemark run` process, then
// two sharing one receipts group (replicas.go), with the same user configuration, measured from outside; the JSON
// line adds their throughput, the ratio two / one and each process's peak RSS.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency/instrument"
)

// memoryLimitMB is the memory budget the user's configuration gives `tidemark run` (memory_limit_mb): the value
// docs/collector.md recommends on a 300 MB budget. The shipped binary sizes its writer from it.
var memoryLimitMB = 250

func main() {
	n := flag.Int("receipts", 400000, "receipts to push through each measurement")
	perRecord := flag.Int("per-record", 256, "receipts per Kafka record (the emitter's default batch)")
	flag.IntVar(&memoryLimitMB, "memory-limit-mb", memoryLimitMB, "memory_limit_mb of the user's configuration")
	defRounds := 5
	if v, err := strconv.Atoi(os.Getenv("BENCH_ROUNDS")); err == nil {
		defRounds = v
	}
	rounds := flag.Int("rounds", defRounds, "alternated rounds of every phase (env BENCH_ROUNDS; 5 or more for figures to quote)")
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
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench-collector: -rounds must be >= 1")
		os.Exit(2)
	}
	brokers := strings.Split(os.Getenv("TIDEMARK_KAFKA_BROKERS"), ",")
	chAddr := os.Getenv("TIDEMARK_CLICKHOUSE_ADDR")
	if brokers[0] == "" || chAddr == "" {
		fmt.Fprintln(os.Stderr, "bench-collector: TIDEMARK_KAFKA_BROKERS and TIDEMARK_CLICKHOUSE_ADDR must be set (make bench-collector sets them)")
		os.Exit(2)
	}
	if err := bench(brokers, chAddr, *n, *perRecord, *rounds, *replicas); err != nil {
		fmt.Fprintln(os.Stderr, "bench-collector:", err)
		os.Exit(1)
	}
}

type result struct {
	*benchproc.Provenance
	Receipts      int `json:"receipts"`
	MemoryLimitMB int `json:"memory_limit_mb"`
	// Writer and MaxBatch are the effective settings of `tidemark run` for the user's configuration, which the
	// baselines copy.
	Writer   store.WriterConfig `json:"writer"`
	MaxBatch int                `json:"max_batch"`
	// ShapeMatch is the fraction of the first pipeline phase's rows whose corrected fields equal their partition's
	// most common shape, the one the baselines write.
	ShapeMatch       float64          `json:"baseline_shape_match"`
	PipelineRowsPerS benchproc.Spread `json:"pipeline_rows_per_s"`
	RawPipelinePerS  benchproc.Spread `json:"raw_pipeline_per_s"`
	RawConsumePerS   benchproc.Spread `json:"raw_consume_per_s"`
	RawInsertPerS    benchproc.Spread `json:"raw_insert_per_s"`
	// PipelineVsRaw and PipelineRatio are per-round ratios (the two phases of a round ran minutes apart at most).
	PipelineVsRaw benchproc.Spread `json:"pipeline_vs_raw_pipeline"`
	PipelineRatio benchproc.Spread `json:"pipeline_ratio"`
	RSSMB         benchproc.Spread `json:"rss_mb"`
	// PipelineStartupSeconds is from process start to the first consumed record (topic checks, connections, group
	// join), outside the measured time.
	PipelineStartupSeconds benchproc.Spread `json:"pipeline_startup_seconds"`
	// Load-independent costs per receipt: the `tidemark run` process's CPU (µs), heap bytes and heap objects
	// allocated (its /metrics, from the last scrape before the first consumed record to the end of the phase), and
	// the bench process's CPU in the raw pipeline (getrusage: the transport alone). They move with the code, not
	// with the machine's load.
	PipelineCPUUsPerReceipt      benchproc.Spread `json:"pipeline_cpu_us_per_receipt"`
	RawPipelineCPUUsPerReceipt   benchproc.Spread `json:"raw_pipeline_cpu_us_per_receipt"`
	PipelineAllocBytesPerReceipt benchproc.Spread `json:"pipeline_alloc_bytes_per_receipt"`
	PipelineAllocsPerReceipt     benchproc.Spread `json:"pipeline_allocs_per_receipt"`
	// Rows acknowledged beyond n (re-deliveries) and distinct keys stored, per pipeline round.
	PipelineRedelivered []int `json:"pipeline_redelivered"`
	PipelineStoredKeys  []int `json:"pipeline_stored_keys"`
	// ClickHouse's own account of the INSERTs into latency_events (system.query_log) per phase: INSERTs and
	// server CPU (user + system) per row in µs. Equal CPU per row means ClickHouse does the same work for the
	// pipeline's rows and the baseline's.
	PipelineInserts       benchproc.Spread `json:"pipeline_inserts"`
	PipelineCHCPUUsRow    benchproc.Spread `json:"pipeline_ch_cpu_us_per_row"`
	RawPipelineInserts    benchproc.Spread `json:"raw_pipeline_inserts"`
	RawPipelineCHCPUUsRow benchproc.Spread `json:"raw_pipeline_ch_cpu_us_per_row"`
	// With -replicas N: the shipped binary, 1 process then N (replicas.go).
	Replicas *replicaResult `json:"replicas,omitempty"`
}

// insertStats returns ClickHouse's count of INSERTs into latency_events that started in [from, to] and their
// server CPU (user + system) per inserted row in µs, from system.query_log; NaN when the server logs no queries.
func insertStats(ctx context.Context, st *store.Store, from, to time.Time) (inserts, usPerRow float64) {
	_ = st.Conn().Exec(ctx, "SYSTEM FLUSH LOGS")
	var n, rows, us uint64
	err := st.Conn().QueryRow(ctx, `SELECT count(), sum(written_rows),
		sum(ProfileEvents.Values[indexOf(ProfileEvents.Names, 'UserTimeMicroseconds')] +
		    ProfileEvents.Values[indexOf(ProfileEvents.Names, 'SystemTimeMicroseconds')])
		FROM system.query_log
		WHERE type = 2 AND query LIKE 'INSERT INTO latency_events%' AND query_start_time >= ? AND query_start_time <= ?`,
		from.Truncate(time.Second), to).Scan(&n, &rows, &us)
	if err != nil || rows == 0 {
		return math.NaN(), math.NaN()
	}
	return float64(n), float64(us) / float64(rows)
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	return c
}

// truncate empties latency_events and its rollups, so every phase inserts into the same empty tables.
func truncate(ctx context.Context, st *store.Store) error {
	for _, t := range []string{"latency_events", "latency_1m", "latency_1h"} {
		if err := st.Conn().Exec(ctx, "TRUNCATE TABLE IF EXISTS "+t); err != nil {
			return fmt.Errorf("truncate %s: %w", t, err)
		}
	}
	return nil
}

func bench(brokers []string, chAddr string, n, perRecord, rounds, replicas int) error {
	ctx := context.Background()
	prov := benchproc.NewProvenance(ctx, "github.com/IBM/sarama", "github.com/ClickHouse/clickhouse-go/v2")
	prov.Rounds = rounds
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	topic := "bench-receipts-" + run
	const partitions = 6
	if _, err := topicadmin.Ensure(brokers, saramaConfig(), topicadmin.Spec{Name: topic, Partitions: partitions}); err != nil {
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
	now := time.Now()
	if _, err := produce(brokers, topic, now, n, perRecord, partitions); err != nil {
		return err
	}

	db := "tidemark_bench"
	st, err := store.Open(ctx, store.Config{Addr: []string{chAddr}, Database: db})
	if err != nil {
		return err
	}
	defer st.Close()
	_ = st.Conn().Exec(ctx, "DROP DATABASE IF EXISTS "+db)
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	if major, minor, patch, err := st.ServerVersion(); err == nil {
		prov.Peers["clickhouse"] = fmt.Sprintf("%d.%d.%d", major, minor, patch)
	}
	if v := kafkaVersion(); v != "" {
		prov.Peers["kafka"] = v
	}

	dir, err := os.MkdirTemp("", "bench-collector-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(os.Stderr, "building tidemark...")
	bins, err := benchproc.Build(ctx, dir, "./cmd/tidemark")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "print-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(userConfig(brokers, chAddr, db, topic, "bench-print", 0)), 0o644); err != nil {
		return err
	}
	eff, err := readEffective(ctx, bins[0], cfgPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "tidemark run's effective writer: %+v, max_batch %d, max_wait %v\n", eff.ClickHouse.Writer,
		eff.Collector.MaxBatch, eff.Collector.MaxWait)

	res := result{Provenance: prov, Receipts: n, MemoryLimitMB: memoryLimitMB, Writer: eff.ClickHouse.Writer,
		MaxBatch: eff.Collector.MaxBatch}
	// quiesce waits (up to 60 s) until ClickHouse runs no merge, so one phase's background merges do not slow the
	// next phase's inserts.
	quiesce := func() {
		for i := 0; i < 240; i++ {
			var m uint64
			if err := st.Conn().QueryRow(ctx, "SELECT count() FROM system.merges").Scan(&m); err != nil || m == 0 {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	var (
		pipe, rawPipe, rawCons, rawIns, vsRaw, ratio, rss, startup []float64
		pIns, pCPU, rIns, rCPU                                     []float64
		pUs, rUs, pAlloc, pAllocs                                  []float64
		fill                                                       *rowFiller
	)
	type phase struct {
		name string
		run  func() error
	}
	pipelinePhase := phase{"pipeline", func() error {
		from := time.Now()
		ph, err := replicaPhase(ctx, st, bins[0], dir, brokers, chAddr, topic, n, 1, eff.ClickHouse.Writer.BatchRows, "pipe"+strconv.Itoa(len(pipe)))
		if err != nil {
			return err
		}
		pipe, rss, startup = append(pipe, ph.rowsPerS), append(rss, ph.rss[0]), append(startup, ph.startup)
		pUs, pAlloc, pAllocs = append(pUs, ph.cpuUsPerReceipt), append(pAlloc, ph.allocBytesPerReceipt), append(pAllocs, ph.allocsPerReceipt)
		res.PipelineRedelivered = append(res.PipelineRedelivered, ph.redelivered)
		res.PipelineStoredKeys = append(res.PipelineStoredKeys, ph.storedKeys)
		i, c := insertStats(ctx, st, from, time.Now())
		pIns, pCPU = append(pIns, i), append(pCPU, c)
		if fill == nil { // the first pipeline phase: the rows the baselines copy
			shapes, match, err := readShape(ctx, st)
			if err != nil {
				return err
			}
			fill, res.ShapeMatch = newRowFiller(now, perRecord, shapes), match
		}
		return nil
	}}
	rawPipelinePhase := phase{"raw_pipeline", func() error {
		from, cpu0 := time.Now(), cpuSeconds()
		rate, err := rawPipeline(ctx, st, eff, fill, brokers, topic, n)
		if err != nil {
			return err
		}
		rawPipe, rUs = append(rawPipe, rate), append(rUs, (cpuSeconds()-cpu0)*1e6/float64(n))
		i, c := insertStats(ctx, st, from, time.Now())
		rIns, rCPU = append(rIns, i), append(rCPU, c)
		return nil
	}}
	rawConsumePhase := phase{"raw_consume", func() error {
		secs, err := rawConsume(ctx, eff, brokers, topic, n)
		rawCons = append(rawCons, float64(n)/secs)
		return err
	}}
	rawInsertPhase := phase{"raw_insert", func() error {
		rate, err := rawInsert(ctx, st, eff, fill, n, partitions)
		rawIns = append(rawIns, rate)
		return err
	}}
	for r := 0; r < rounds; r++ {
		order := []phase{pipelinePhase, rawPipelinePhase, rawConsumePhase, rawInsertPhase}
		if r%2 == 1 {
			order = []phase{rawInsertPhase, rawConsumePhase, rawPipelinePhase, pipelinePhase}
		}
		for _, ph := range order {
			if err := truncate(ctx, st); err != nil {
				return err
			}
			quiesce()
			time.Sleep(1100 * time.Millisecond) // query_log's start times have 1 s resolution: phases get seconds of their own
			fmt.Fprintf(os.Stderr, "round %d/%d: %s...\n", r+1, rounds, ph.name)
			if err := ph.run(); err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, ph.name, err)
			}
			prov.Phase(ph.name)
		}
		i := len(pipe) - 1
		vsRaw = append(vsRaw, pipe[i]/rawPipe[i])
		ratio = append(ratio, pipe[i]/min(rawCons[i], rawIns[i]))
		fmt.Fprintf(os.Stderr, "round %d: pipeline %.0f rows/s, raw pipeline %.0f, raw consume %.0f, raw insert %.0f: pipeline/raw pipeline %.2f, load %s\n",
			r+1, pipe[i], rawPipe[i], rawCons[i], rawIns[i], vsRaw[i], benchproc.LoadAvg())
	}
	res.PipelineRowsPerS, res.RawPipelinePerS = benchproc.NewSpread(pipe), benchproc.NewSpread(rawPipe)
	res.RawConsumePerS, res.RawInsertPerS = benchproc.NewSpread(rawCons), benchproc.NewSpread(rawIns)
	res.PipelineVsRaw, res.PipelineRatio = benchproc.NewSpread(vsRaw), benchproc.NewSpread(ratio)
	res.RSSMB, res.PipelineStartupSeconds = benchproc.NewSpread(rss), benchproc.NewSpread(startup)
	res.PipelineInserts, res.PipelineCHCPUUsRow = benchproc.NewSpread(pIns), benchproc.NewSpread(pCPU)
	res.RawPipelineInserts, res.RawPipelineCHCPUUsRow = benchproc.NewSpread(rIns), benchproc.NewSpread(rCPU)
	res.PipelineCPUUsPerReceipt, res.RawPipelineCPUUsPerReceipt = benchproc.NewSpread(pUs), benchproc.NewSpread(rUs)
	res.PipelineAllocBytesPerReceipt, res.PipelineAllocsPerReceipt = benchproc.NewSpread(pAlloc), benchproc.NewSpread(pAllocs)
	if replicas > 0 {
		if res.Replicas, err = replicaPhases(ctx, st, bins[0], dir, brokers, chAddr, topic, n, replicas, eff.ClickHouse.Writer.BatchRows, quiesce); err != nil {
			return err
		}
		prov.Phase("replicas")
	}
	fmt.Fprintf(os.Stderr, "median of %d rounds (min–max): pipeline %.0f (%.0f–%.0f) rows/s, raw pipeline %.0f (%.0f–%.0f), pipeline/raw pipeline %.2f (%.2f–%.2f)\n",
		rounds, res.PipelineRowsPerS.Median, res.PipelineRowsPerS.Min, res.PipelineRowsPerS.Max,
		res.RawPipelinePerS.Median, res.RawPipelinePerS.Min, res.RawPipelinePerS.Max,
		res.PipelineVsRaw.Median, res.PipelineVsRaw.Min, res.PipelineVsRaw.Max)
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return nil
}

// cpuSeconds is this process's CPU time so far (user + system, getrusage), 0 if unreadable.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// kafkaVersion is the Kafka release of the local stack's jars (TIDEMARK_KAFKA_LIB names a directory like
// kafka-4.4.0/lib), "" when unknown.
func kafkaVersion() string {
	lib := os.Getenv("TIDEMARK_KAFKA_LIB")
	if v, ok := strings.CutPrefix(filepath.Base(filepath.Dir(lib)), "kafka-"); ok {
		return v
	}
	return ""
}

// produce writes n receipts of realistic shape (every stamp, a trace, three producer and two consumer hosts) in
// records of perRecord, keyed by source partition like the instrumentation's emitter, and returns how many records
// it wrote. Receipt offset o of source partition p sits in receipts record o/perRecord of partition p (the
// topic is new), its stamps at now + o ms: rowFiller relies on both.
func produce(brokers []string, topic string, now time.Time, n, perRecord, partitions int) (records int, err error) {
	c := saramaConfig()
	c.Producer.Return.Successes = true
	c.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(brokers, c)
	if err != nil {
		return 0, err
	}
	defer p.Close()
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
