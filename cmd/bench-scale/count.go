package main

// The pure parts of the bench: what counts as lost, duplicated, falsely lost, mismatched and failed over, computed
// from what ClickHouse, Kafka's log and Kafka's own consumer-groups command say (count_test.go tests each).

import (
	"encoding/binary"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/tidemark/tidemark/internal/benchproc"
)

// receiptKey is the source record a receipt reports on: latency_events' key without replay_class, so a receipt
// stored twice under two replay classes (a replica that rebuilt the path's state wrongly after a rebalance) counts
// as a duplicate, not as two receipts.
type receiptKey struct {
	Group, Topic string
	Partition    int32
	Offset       int64
}

// receiptCounts compares the receipts the receipts topic holds (sent: key → receipts with that key in the log) with
// the rows ClickHouse holds (stored: key → rows with that key). lost counts keys sent and not stored; duplicated
// counts rows beyond one per key; extra counts stored keys nobody sent (a row the collector invented).
func receiptCounts(sent, stored map[receiptKey]int) (lost, duplicated, extra int) {
	for k := range sent {
		if stored[k] == 0 {
			lost++
		}
	}
	for k, n := range stored {
		if n > 1 {
			duplicated += n - 1
		}
		if sent[k] == 0 {
			extra += n
		}
	}
	return lost, duplicated, extra
}

// probeKey is one probe: the replica that sent it ("" when the build has no instance ids), its partition and its
// sequence number.
type probeKey struct {
	Instance  string
	Partition int32
	Seq       uint64
}

// decodeProbe reads a probe record's value as the collector writes it: version 1 is [1][seq u64][send ns i64] (17
// bytes), version 2 appends [len u8][instance id] (18+len bytes), big-endian. ok is false for anything else.
func decodeProbe(v []byte) (seq uint64, instance string, ok bool) {
	switch {
	case len(v) == 17 && v[0] == 1:
		return binary.BigEndian.Uint64(v[1:9]), "", true
	case len(v) >= 18 && v[0] == 2 && len(v) == 18+int(v[17]):
		return binary.BigEndian.Uint64(v[1:9]), string(v[18:]), true
	}
	return 0, "", false
}

// falseProbeLoss counts the probes reported lost that the probe topic's log holds: delivered to Kafka and readable,
// yet counted lost (a replica that did not read the partition its probe went to). When ClickHouse stores no
// instance (an older schema), keys are compared without it.
func falseProbeLoss(lost []probeKey, delivered map[probeKey]bool, withInstance bool) int {
	n := 0
	for _, k := range lost {
		if !withInstance {
			k.Instance = ""
		}
		if delivered[k] {
			n++
		}
	}
	return n
}

// gpKey, groupOffsets and ourOffsets are benchproc's (internal/benchproc/lagcheck.go): bench-lag checks lag the
// same way.
type (
	gpKey        = benchproc.GroupPartition
	groupOffsets = benchproc.GroupOffsets
	ourOffsets   = benchproc.ExportedOffsets
)

// parseGroupOffsets is benchproc.ParseGroupOffsets.
func parseGroupOffsets(r io.Reader, prefix string) (map[gpKey]groupOffsets, error) {
	return benchproc.ParseGroupOffsets(r, prefix)
}

// parseConsumerGroups is parseGroupOffsets' LAG column alone.
func parseConsumerGroups(r io.Reader, prefix string) (map[gpKey]int64, error) {
	offs, err := parseGroupOffsets(r, prefix)
	if err != nil {
		return nil, err
	}
	out := make(map[gpKey]int64, len(offs))
	for k, o := range offs {
		out[k] = o.Lag
	}
	return out, nil
}

// liveLagMismatches is benchproc.LiveLagMismatches.
func liveLagMismatches(before, after map[gpKey]groupOffsets, ours map[gpKey]ourOffsets) ([]string, int) {
	return benchproc.LiveLagMismatches(before, after, ours)
}

// lagMismatches compares each group-partition Kafka's command reports (theirs) with Tidemark's exported offset lag
// (ours, tidemark_lag_partition_offsets): a partition Tidemark does not export, or exports with another value, is a
// mismatch; partitions only Tidemark exports are not (the command does not list a group without commits). It returns
// the mismatches sorted, one line each.
func lagMismatches(theirs, ours map[gpKey]int64) []string {
	var out []string
	for k, want := range theirs {
		got, ok := ours[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: kafka %d, tidemark none", k, want))
		case got != want:
			out = append(out, fmt.Sprintf("%s: kafka %d, tidemark %d", k, want, got))
		}
	}
	slices.Sort(out)
	return out
}

// activeSample is one scrape round of every replica's tidemark_lag_exporter_active for one cluster: per replica,
// whether it answered with the gauge at 1 (a dead or unreachable replica is not active).
type activeSample struct {
	At     time.Time // when the round's scrapes had returned
	Active []bool
	Start  time.Time // when the round's first scrape began (zero: At)
}

// noActiveTime sums, over consecutive samples from `from` on, the time no replica was active: each interval
// between two samples counts when the earlier one had no active replica. It also returns the most replicas active
// in one sample (more than 1 is a split brain: two replicas exporting the same cluster's lag).
func noActiveTime(samples []activeSample, from time.Time) (gap time.Duration, maxActive int) {
	for i, s := range samples {
		n := 0
		for _, a := range s.Active {
			if a {
				n++
			}
		}
		maxActive = max(maxActive, n)
		if i+1 == len(samples) || s.At.Before(from) {
			continue
		}
		if n == 0 {
			gap += samples[i+1].At.Sub(s.At)
		}
	}
	return gap, maxActive
}

// failoverTime is the time from the kill (killAt) to the end of the first scrape round begun after it in which a
// replica is active: how long the cluster's lag went unserved because of the kill, counted from the kill itself
// (about one scrape when a survivor was already the active one). A round begun before the kill may have seen the
// victim alive, so it never counts. ok is false when no round after the kill saw an active replica.
func failoverTime(samples []activeSample, killAt time.Time) (d time.Duration, ok bool) {
	for _, s := range samples {
		start := s.Start
		if start.IsZero() {
			start = s.At
		}
		if start.Before(killAt) {
			continue
		}
		for _, a := range s.Active {
			if a {
				return s.At.Sub(killAt), true
			}
		}
	}
	return 0, false
}

// rollupKey is one (cluster, topic, group, time bucket) of a rollup tier; Bucket is the minute or hour, Unix s.
type rollupKey struct {
	Cluster, Topic, Group string
	Bucket                int64
}

// rollupDiff compares a rollup tier's row counts (rollup: per bucket, the e2e stage's live + flagged + replay +
// backfill + redelivery sums, one per row aggregated) with the distinct keys of latency_events in the same
// buckets (raw): per bucket, a rollup above raw aggregated a re-inserted row twice (doubled), below it missed rows
// (missing). Summed per bucket, so a double count in one minute cannot hide a miss in another.
func rollupDiff(raw, rollup map[rollupKey]int64) (doubled, missing int64) {
	for k, r := range rollup {
		if d := r - raw[k]; d > 0 {
			doubled += d
		}
	}
	for k, n := range raw {
		if d := n - rollup[k]; d > 0 {
			missing += d
		}
	}
	return doubled, missing
}

// loadgenCounts reads cmd/loadgen's final line ("loadgen ...  produced N  processed N  receipts sent N  dropped N"):
// the records its consumers processed and the receipts its emitters dropped or failed to send.
func loadgenCounts(line string) (processed, dropped int, err error) {
	m := loadgenLine.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, fmt.Errorf("no loadgen summary in %q", line)
	}
	processed, _ = strconv.Atoi(m[1])
	dropped, _ = strconv.Atoi(m[2])
	return processed, dropped, nil
}

var loadgenLine = regexp.MustCompile(`processed\s+(\d+)\s+receipts sent\s+\d+\s+dropped\s+(\d+)`)

// maxGap is the longest interval between consecutive snapshot times (ms, any order) within [from, to], the bounds
// counting as snapshot times: the longest the lag_snapshots table went without a row over the run.
func maxGap(atMs []int64, from, to time.Time) time.Duration {
	ts := []int64{from.UnixMilli(), to.UnixMilli()}
	for _, t := range atMs {
		if t >= ts[0] && t <= ts[1] {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	var g int64
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i]-ts[i-1])
	}
	return time.Duration(g) * time.Millisecond
}
