package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/benchproc"
	"github.com/tidemark/tidemark/latency/instrument"
)

// commitStalled commits, for n groups named prefix+"stalled-g", the high watermark of now divided by g on every
// partition of the orders topic: groups that consumed so far and stopped (no members), lagging more as the load
// goes on.
func (c *kcluster) commitStalled(n int) error {
	client, err := sarama.NewClient(c.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(c.orders)
	if err != nil {
		return err
	}
	for g := 1; g <= n; g++ {
		om, err := sarama.NewOffsetManagerFromClient(c.prefix+"stalled-"+strconv.Itoa(g), client)
		if err != nil {
			return err
		}
		for _, p := range parts {
			hw, err := client.GetOffset(c.orders, p, sarama.OffsetNewest)
			if err != nil {
				return err
			}
			pom, err := om.ManagePartition(c.orders, p)
			if err != nil {
				return err
			}
			pom.MarkOffset(hw/int64(g), "bench-scale stalled group")
			pom.AsyncClose()
		}
		om.Commit()
		if err := om.Close(); err != nil {
			return err
		}
	}
	return nil
}

// readLog reads every partition of topic from its log start to the high watermark of now and calls fn per record.
func readLog(brokers []string, topic string, fn func(partition int32, value []byte) error) error {
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer c.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		hw, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return err
		}
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		if hw <= start {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, start)
		if err != nil {
			return err
		}
		for off := start; off < hw; {
			select {
			case m := <-pc.Messages():
				off = m.Offset + 1
				if err := fn(p, m.Value); err != nil {
					pc.Close()
					return err
				}
			case <-time.After(30 * time.Second):
				pc.Close()
				return fmt.Errorf("read %s/%d: stuck at offset %d of %d", topic, p, off, hw)
			}
		}
		pc.Close()
	}
	return nil
}

// readReceipts decodes the receipts topic: receipts per key, as the application's emitter wrote them. The emitter's
// producer acknowledgements share the topic (ack batches, which make no latency row); they must decode as such.
func (c *kcluster) readReceipts() (map[receiptKey]int, error) {
	sent := map[receiptKey]int{}
	var buf []instrument.Receipt
	var acks []instrument.Ack
	err := readLog(c.brokers, c.receipts, func(_ int32, v []byte) error {
		var err error
		if instrument.IsAckBatch(v) {
			if acks, err = instrument.DecodeAckBatch(acks[:0], v); err != nil {
				return fmt.Errorf("receipts topic %s holds an ack batch the emitter did not write: %w", c.receipts, err)
			}
			return nil
		}
		if buf, err = instrument.DecodeReceiptBatch(buf[:0], v); err != nil {
			return fmt.Errorf("receipts topic %s holds a record the emitter did not write: %w", c.receipts, err)
		}
		for _, r := range buf {
			sent[receiptKey{r.Group, r.Topic, r.Partition, r.Offset}]++
		}
		return nil
	})
	return sent, err
}

// waitStored waits until latency_events (read through the first server) holds every sent key, or nothing new
// arrived for 30 s (then what is missing is lost, and counted so), or the survivor died.
func (s *stage) waitStored(ctx context.Context, survivor *replica, sent map[receiptKey]int) error {
	last, lastChange := -1, time.Now()
	for {
		var n uint64
		if err := s.ch.conns[0].QueryRow(ctx, `SELECT uniqExact(consumer_group, topic, partition, offset) FROM `+s.db+
			`.latency_events WHERE source = 'receipt'`).Scan(&n); err != nil {
			return fmt.Errorf("count stored receipts: %w", err)
		}
		if int(n) >= len(sent) {
			logf("ClickHouse holds all %d receipt keys", n)
			return nil
		}
		if int(n) != last {
			last, lastChange = int(n), time.Now()
		}
		if survivor.proc.Exited() {
			return fmt.Errorf("%s exited: %v\n%s", survivor.name, survivor.proc.Wait(0), survivor.proc.Tail(30))
		}
		if time.Since(lastChange) > 30*time.Second {
			logf("ClickHouse holds %d of %d receipt keys and gained none for 30 s; the rest counts as lost", n, len(sent))
			return nil
		}
		time.Sleep(time.Second)
	}
}

// compareLag waits until the replica serves, as the cluster's active exporter, a lag snapshot observed after frozen,
// then compares its tidemark_lag_partition_offsets{cluster} with the cluster's own consumer-groups command for the
// bench's groups.
func (s *stage) compareLag(ctx context.Context, c *kcluster, r *replica, frozen time.Time) (mism []string, compared int, err error) {
	deadline := time.Now().Add(60 * time.Second)
	var fams benchproc.Families
	for {
		fams, err = benchproc.Scrape(ctx, r.url("/metrics"))
		if err == nil && s.isActive(fams, c.name) {
			at, ok := fams.Value("tidemark_lag_exporter_snapshot_timestamp_seconds", map[string]string{"cluster": c.name})
			if ok && at > float64(frozen.UnixNano())/1e9 {
				break
			}
		}
		if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("%s served no active lag snapshot of %s newer than %v within 60 s (last scrape error %v)",
				r.name, c.name, frozen.Format(time.RFC3339Nano), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	ours := map[gpKey]int64{}
	fams.Each("tidemark_lag_partition_offsets", func(l map[string]string, v float64) {
		if l["cluster"] != c.name {
			return
		}
		p, _ := strconv.Atoi(l["partition"])
		ours[gpKey{Group: l["group"], Topic: l["topic"], Partition: int32(p)}] = int64(v)
	})
	out, err := s.describeGroups(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	theirs, err := parseConsumerGroups(strings.NewReader(out), c.prefix)
	if err != nil {
		return nil, 0, err
	}
	logf("lag of %s: kafka-consumer-groups lists %d bench group-partitions with commits, %s exports %d",
		c.name, len(theirs), r.name, len(ours))
	return lagMismatches(theirs, ours), len(theirs), nil
}

// describeGroups runs Kafka's own `kafka-consumer-groups.sh --describe --all-groups` (its tool class) on c.
func (s *stage) describeGroups(ctx context.Context, c *kcluster) (string, error) {
	out, err := benchproc.DescribeGroups(ctx, s.kafkaLib, c.brokers)
	if err != nil {
		return "", fmt.Errorf("%s: %w", c.name, err)
	}
	return out, nil
}

// liveLagLoop compares, until ctx ends (the load is over), each cluster's lag as the active replica serves it with
// Kafka's command run just before and just after the scrape (liveLagMismatches), adding to res's LiveLag fields.
// The scrape must serve a snapshot whose reads began after the first command returned (benchproc.SnapshotReadsFrom),
// so every offset in it was read between the two commands. A round without an active replica serving such a snapshot
// within 15 s (the failover) is skipped and logged.
func (s *stage) liveLagLoop(ctx context.Context, res *result) {
	for ctx.Err() == nil {
		for _, c := range s.clusters {
			out, err := s.describeGroups(ctx, c)
			if err != nil {
				if ctx.Err() == nil {
					logf("live lag check on %s: %v", c.name, err)
				}
				return
			}
			beforeAt := time.Now()
			before, err := parseGroupOffsets(strings.NewReader(out), c.prefix)
			if err != nil {
				logf("live lag check on %s: %v", c.name, err)
				continue
			}
			ours, ok := s.snapshotAfter(ctx, c, beforeAt, 15*time.Second)
			if !ok {
				logf("live lag check on %s: no active replica served a snapshot newer than %s", c.name, beforeAt.Format("15:04:05.000"))
				continue
			}
			if out, err = s.describeGroups(ctx, c); err != nil {
				if ctx.Err() == nil {
					logf("live lag check on %s: %v", c.name, err)
				}
				return
			}
			after, err := parseGroupOffsets(strings.NewReader(out), c.prefix)
			if err != nil {
				logf("live lag check on %s: %v", c.name, err)
				continue
			}
			mism, compared := liveLagMismatches(before, after, ours)
			res.LiveLagChecks++
			res.LiveLagCompared += compared
			res.LiveLagMismatches += len(mism)
			logf("live lag check on %s: %d group-partitions compared, %d outside Kafka's bracket", c.name, compared, len(mism))
			for i, m := range mism {
				if i == 5 {
					logf("... %d more", len(mism)-5)
					break
				}
				logf("live lag mismatch on %s: %s", c.name, m)
			}
		}
	}
}

// snapshotAfter scrapes the live replicas every 100 ms until one is c's active lag exporter serving a snapshot whose
// reads began after `after`, and returns that snapshot's committed offsets and lags of the bench's groups.
func (s *stage) snapshotAfter(ctx context.Context, c *kcluster, after time.Time, timeout time.Duration) (map[gpKey]ourOffsets, bool) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, r := range s.replicas {
			if r.proc.Exited() {
				continue
			}
			fams, err := benchproc.Scrape(ctx, r.url("/metrics"))
			if err != nil || !s.isActive(fams, c.name) {
				continue
			}
			if from, ok := benchproc.SnapshotReadsFrom(fams, c.name); !ok || from.Before(after) {
				continue
			}
			ours := benchproc.SnapshotOffsets(fams, c.name, c.prefix)
			return ours, true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, false
}

// count fills the ClickHouse and probe-log figures, after every replica stopped. On a ClickHouse cluster every
// replica is synced and counted on its own; the worst replica's figures are reported.
func (s *stage) count(ctx context.Context, res *result, sent map[receiptKey]int, killAt time.Time) error {
	for _, t := range []string{"latency_events", "probe_events", "lag_snapshots", "latency_1m", "latency_1h"} {
		if err := s.ch.sync(ctx, s.db, t); err != nil {
			return err
		}
	}
	inserted, keys := 0, 0
	for i, conn := range s.ch.conns {
		stored := map[receiptKey]int{}
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k receiptKey
			var n uint64
			if err := sc(&k.Group, &k.Topic, &k.Partition, &k.Offset, &n); err != nil {
				return err
			}
			stored[k] = int(n)
			return nil
		}, `SELECT consumer_group, topic, partition, offset, toUInt64(count()) FROM `+s.db+`.`+s.ch.local("latency_events")+
			` FINAL WHERE source = 'receipt' GROUP BY consumer_group, topic, partition, offset`); err != nil {
			return fmt.Errorf("stored receipts on %s: %w", s.ch.addrs[i], err)
		}
		lost, dup, extra := receiptCounts(sent, stored)
		if len(s.ch.conns) > 1 {
			logf("ClickHouse replica %s: %d lost, %d duplicated, %d extra", s.ch.addrs[i], lost, dup, extra)
		}
		res.RowsLost, res.RowsDuplicated, res.RowsExtra = max(res.RowsLost, lost), max(res.RowsDuplicated, dup), max(res.RowsExtra, extra)
		var n uint64
		if err := conn.QueryRow(ctx, `SELECT count() FROM `+s.db+`.bench_receipt_inserts`).Scan(&n); err != nil {
			return fmt.Errorf("count inserts: %w", err)
		}
		inserted += int(n) // an insert reaches one replica's local table, whose view counts it; replication does not
		if i == 0 {
			keys = len(stored)
		}
	}
	res.RowsReinserted = inserted - keys
	if err := s.countRollups(ctx, res); err != nil {
		return err
	}

	conn := s.ch.conns[0]
	var hasInstance uint64
	if err := conn.QueryRow(ctx, `SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = 'instance'`,
		s.db, s.ch.local("probe_events")).Scan(&hasInstance); err != nil {
		return err
	}
	instCol := "''"
	if hasInstance > 0 {
		instCol = "instance"
	}
	for _, c := range s.clusters {
		var lost []probeKey
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k probeKey
			if err := sc(&k.Instance, &k.Partition, &k.Seq); err != nil {
				return err
			}
			lost = append(lost, k)
			return nil
		}, `SELECT `+instCol+`, partition, seq FROM `+s.db+`.`+s.ch.local("probe_events")+` FINAL WHERE topic = ? AND status = 'lost'`, c.probe); err != nil {
			return fmt.Errorf("lost probes: %w", err)
		}
		delivered := map[probeKey]bool{}
		if err := readLog(c.brokers, c.probe, func(p int32, v []byte) error {
			if seq, inst, ok := decodeProbe(v); ok {
				if hasInstance == 0 {
					inst = ""
				}
				delivered[probeKey{inst, p, seq}] = true
			}
			return nil
		}); err != nil {
			return err
		}
		res.ProbesDelivered += len(delivered)
		res.ProbesReportedLost += len(lost)
		res.FalseProbeLoss += falseProbeLoss(lost, delivered, hasInstance > 0)

		var ats []int64
		if err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var at int64
			if err := sc(&at); err != nil {
				return err
			}
			ats = append(ats, at)
			return nil
		}, `SELECT DISTINCT at_ms FROM `+s.db+`.`+s.ch.local("lag_snapshots")+` WHERE cluster = ?`, c.name); err != nil {
			return fmt.Errorf("lag snapshots: %w", err)
		}
		last := killAt
		for _, at := range ats {
			last = time.UnixMilli(max(last.UnixMilli(), at))
		}
		res.LagSnapshotMaxGapS = max(res.LagSnapshotMaxGapS, maxGap(ats, killAt, last).Seconds())
	}
	return nil
}

// countRollups compares each rollup tier, per (cluster, topic, group) and minute or hour, with the distinct keys
// (partition, offset, replay class) latency_events holds in that bucket, read without FINAL (rollupDiff): a tier
// counting more in a bucket aggregated a re-inserted row twice, one counting fewer missed rows. A re-inserted row
// that FINAL collapses is still counted twice by the views, so the raw side is the distinct keys, never a row count.
// Through the Distributed tables on a ClickHouse cluster.
func (s *stage) countRollups(ctx context.Context, res *result) error {
	conn := s.ch.conns[0]
	read := func(q string) (map[rollupKey]int64, int64, error) {
		out := map[rollupKey]int64{}
		var total int64
		err := queryEach(ctx, conn, func(sc func(...any) error) error {
			var k rollupKey
			var n uint64
			if err := sc(&k.Cluster, &k.Topic, &k.Group, &k.Bucket, &n); err != nil {
				return err
			}
			out[k] += int64(n)
			total += int64(n)
			return nil
		}, q)
		return out, total, err
	}
	for _, tier := range []struct{ table, col, fn string }{{"latency_1m", "minute", "toStartOfMinute"}, {"latency_1h", "hour", "toStartOfHour"}} {
		raw, rawTotal, err := read(`SELECT toString(cluster), topic, consumer_group, toInt64(toUInt32(` + tier.fn + `(observed_time))),
			toUInt64(uniqExact(partition, offset, replay_class)) FROM ` + s.db + `.latency_events
			GROUP BY cluster, topic, consumer_group, ` + tier.fn + `(observed_time)`)
		if err != nil {
			return fmt.Errorf("distinct keys of latency_events by %s: %w", tier.col, err)
		}
		rolled, rollTotal, err := read(`SELECT toString(cluster), topic, consumer_group, toInt64(toUInt32(` + tier.col + `)),
			toUInt64(sumMerge(live) + sumMerge(flagged) + sumMerge(replay) + sumMerge(backfill) + sumMerge(redelivery))
			FROM ` + s.db + `.` + tier.table + ` WHERE stage = 'e2e' GROUP BY cluster, topic, consumer_group, ` + tier.col)
		if err != nil {
			return fmt.Errorf("count %s: %w", tier.table, err)
		}
		doubled, missing := rollupDiff(raw, rolled)
		logf("%s counts %d rows, latency_events holds %d distinct keys in the same buckets: %d doubled, %d missing",
			tier.table, rollTotal, rawTotal, doubled, missing)
		res.RollupRawRows = rawTotal
		res.RollupDoubleCounted = max(res.RollupDoubleCounted, doubled)
		res.RollupMissing = max(res.RollupMissing, missing)
	}
	return nil
}

// deleteTopics removes the run's topics (best effort).
func (s *stage) deleteTopics() {
	for _, c := range s.clusters {
		adm, err := sarama.NewClusterAdmin(c.brokers, saramaConfig())
		if err != nil {
			continue
		}
		if topics, err := adm.ListTopics(); err == nil {
			for t := range topics {
				if strings.HasPrefix(t, "bs-"+s.id+"-") {
					_ = adm.DeleteTopic(t)
				}
			}
		}
		_ = adm.Close()
	}
}
