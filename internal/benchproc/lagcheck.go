package benchproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The lag check the benchmarks share: Tidemark's exported lag against Apache Kafka's own consumer-groups command
// while offsets move.

// GroupPartition is one group-partition; String is "group topic/partition".
type GroupPartition struct {
	Group, Topic string
	Partition    int32
}

func (k GroupPartition) String() string {
	return fmt.Sprintf("%s %s/%d", k.Group, k.Topic, k.Partition)
}

// cgRow is a data row of `kafka-consumer-groups.sh --describe`: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET
// LAG CONSUMER-ID HOST CLIENT-ID (the last three may be "-").
var cgRow = regexp.MustCompile(`^(\S+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)`)

// GroupOffsets is one group-partition in `kafka-consumer-groups.sh --describe`: CURRENT-OFFSET (the committed
// offset), LOG-END-OFFSET and LAG.
type GroupOffsets struct{ Committed, End, Lag int64 }

// ParseGroupOffsets reads `kafka-consumer-groups.sh --describe --all-groups` output and returns the offsets of
// every group-partition of a group named with prefix that has a commit (a "-" CURRENT-OFFSET or LAG, no commit, is
// left out, as Tidemark's offset lag of such a partition depends on lag.groups[].reset). Headers, blank lines and
// notices are skipped; a data row whose numbers do not parse is an error.
func ParseGroupOffsets(r io.Reader, prefix string) (map[GroupPartition]GroupOffsets, error) {
	out := map[GroupPartition]GroupOffsets{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := cgRow.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "GROUP" || !strings.HasPrefix(m[1], prefix) || m[6] == "-" || m[4] == "-" {
			continue
		}
		p, err := strconv.ParseInt(m[3], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("partition %q: %w", m[3], err)
		}
		var o GroupOffsets
		for _, f := range []struct {
			dst  *int64
			text string
		}{{&o.Committed, m[4]}, {&o.End, m[5]}, {&o.Lag, m[6]}} {
			if *f.dst, err = strconv.ParseInt(f.text, 10, 64); err != nil {
				return nil, fmt.Errorf("offsets %q %q %q of %s %s/%s: %w", m[4], m[5], m[6], m[1], m[2], m[3], err)
			}
		}
		out[GroupPartition{m[1], m[2], int32(p)}] = o
	}
	return out, sc.Err()
}

// ExportedOffsets is Tidemark's view of one group-partition from one snapshot: tidemark_lag_partition_committed_offset
// and tidemark_lag_partition_offsets.
type ExportedOffsets struct{ Committed, Lag int64 }

// LiveLagMismatches checks Tidemark's snapshot (ours) against Kafka's command run before it (before) and after it
// (after), while the load moves offsets: committed and end offsets only grow, so a snapshot read between the two
// commands must have, per group-partition, before.Committed ≤ committed ≤ after.Committed and a lag within
// [max(0, before.End − after.Committed), after.End − before.Committed]. A group-partition both commands list and the
// snapshot lacks is a mismatch; one only one command lists (a first commit meanwhile) is not compared. It returns
// the mismatches sorted, one line each, and how many group-partitions it compared.
func LiveLagMismatches(before, after map[GroupPartition]GroupOffsets, ours map[GroupPartition]ExportedOffsets) (mism []string, compared int) {
	for k, b := range before {
		a, ok := after[k]
		if !ok {
			continue
		}
		compared++
		o, ok := ours[k]
		lo, hi := max(0, b.End-a.Committed), a.End-b.Committed
		switch {
		case !ok:
			mism = append(mism, fmt.Sprintf("%s: kafka committed %d..%d, tidemark none", k, b.Committed, a.Committed))
		case o.Committed < b.Committed || o.Committed > a.Committed:
			mism = append(mism, fmt.Sprintf("%s: kafka committed %d..%d, tidemark %d", k, b.Committed, a.Committed, o.Committed))
		case o.Lag < lo || o.Lag > hi:
			mism = append(mism, fmt.Sprintf("%s: kafka lag within %d..%d, tidemark %d", k, lo, hi, o.Lag))
		}
	}
	slices.Sort(mism)
	return mism, compared
}

// DescribeGroups runs Kafka's own `kafka-consumer-groups.sh --describe` (its tool class from the jars in kafkaLib)
// against brokers, for the named groups, or every group when none is named, and returns its output.
func DescribeGroups(ctx context.Context, kafkaLib string, brokers []string, groups ...string) (string, error) {
	args := []string{"-cp", kafkaLib + "/*", "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", strings.Join(brokers, ","), "--describe"}
	if len(groups) == 0 {
		args = append(args, "--all-groups")
	}
	for _, g := range groups {
		args = append(args, "--group", g)
	}
	out, err := exec.CommandContext(ctx, "java", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("kafka-consumer-groups --describe: %w", err)
	}
	return string(out), nil
}

// SnapshotOffsets reads one scrape's committed offset and lag of every group-partition of cluster whose group
// starts with groupPrefix (tidemark_lag_partition_committed_offset and tidemark_lag_partition_offsets); a
// group-partition without both is left out.
func SnapshotOffsets(f Families, cluster, groupPrefix string) map[GroupPartition]ExportedOffsets {
	committed, lag := map[GroupPartition]int64{}, map[GroupPartition]int64{}
	for name, m := range map[string]map[GroupPartition]int64{"tidemark_lag_partition_committed_offset": committed,
		"tidemark_lag_partition_offsets": lag} {
		f.Each(name, func(l map[string]string, v float64) {
			if l["cluster"] == cluster && strings.HasPrefix(l["group"], groupPrefix) {
				p, _ := strconv.Atoi(l["partition"])
				m[GroupPartition{l["group"], l["topic"], int32(p)}] = int64(v)
			}
		})
	}
	out := map[GroupPartition]ExportedOffsets{}
	for k, c := range committed {
		if l, ok := lag[k]; ok {
			out[k] = ExportedOffsets{Committed: c, Lag: l}
		}
	}
	return out
}

// SnapshotReadsFrom is when the reads behind the lag snapshot a scrape serves for cluster began: the snapshot's
// observation time (tidemark_lag_exporter_snapshot_timestamp_seconds, when the cycle's reads finished) minus the
// cycle's reads (tidemark_lag_exporter_cycle_duration_seconds). Every offset in the snapshot was read at or after
// it. ok is false when the scrape has no snapshot of cluster.
func SnapshotReadsFrom(f Families, cluster string) (from time.Time, ok bool) {
	at, ok := f.Value("tidemark_lag_exporter_snapshot_timestamp_seconds", map[string]string{"cluster": cluster})
	if !ok || at <= 0 {
		return time.Time{}, false
	}
	reads, _ := f.Value("tidemark_lag_exporter_cycle_duration_seconds", map[string]string{"cluster": cluster})
	return time.Unix(0, int64((at-reads)*1e9)), true
}
