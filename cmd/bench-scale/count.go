package main

// The pure parts of the bench: what counts as lost, duplicated, falsely lost, mismatched and failed over, computed
// from what ClickHouse, Kafka's log and Kafka's own consumer-groups command say (count_test.go tests each).

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
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

// gpKey is one group-partition.
type gpKey struct {
	Group, Topic string
	Partition    int32
}

func (k gpKey) String() string { return fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition) }

// cgRow is a data row of `kafka-consumer-groups.sh --describe`: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET
// LAG CONSUMER-ID HOST CLIENT-ID (the last three may be "-").
var cgRow = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)`)

// parseConsumerGroups reads `kafka-consumer-groups.sh --describe --all-groups` output and returns the LAG of every
// group-partition of a group named with prefix that has a commit (a "-" LAG, no commit, is left out, as Tidemark's
// offset lag of such a partition depends on lag.groups[].reset). Headers, blank lines and notices are skipped.
func parseConsumerGroups(r io.Reader, prefix string) (map[gpKey]int64, error) {
	out := map[gpKey]int64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := cgRow.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "GROUP" || !strings.HasPrefix(m[1], prefix) || m[6] == "-" {
			continue
		}
		p, err := strconv.ParseInt(m[3], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("partition %q: %w", m[3], err)
		}
		lag, err := strconv.ParseInt(m[6], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("lag %q of %s %s/%s: %w", m[6], m[1], m[2], m[3], err)
		}
		out[gpKey{m[1], m[2], int32(p)}] = lag
	}
	return out, sc.Err()
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
	At     time.Time
	Active []bool
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
