package promexport

import (
	"fmt"
	"testing"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestStaleCommitSeries (Burrow #854): a commit a Stable group left on a partition none of its members is assigned
// is not lag, so the partition has no lag, time-lag, committed, flag or kafka_exporter series that a panel or an
// alert on the partition series would show as lag; its committed offset and age are in their own series. On the
// i03 timeline at 12:06, group g's commits on legacy/0..2 are 500, made at 11:00 (3,960 s before), with HW 1,600 (a
// lag of 1,100 if they were counted).
func TestStaleCommitSeries(t *testing.T) {
	for _, gran := range []Granularity{GranularityPartition, GranularityPartitionLag} {
		t.Run(string(gran), func(t *testing.T) {
			ss := playSeries(t, "i03_unassigned_commits.jsonl", func(c *Config) {
				c.Granularity, c.KafkaExporterCompat = gran, true
			})[6]
			for p := 0; p < 3; p++ {
				at := fmt.Sprintf(`group="g",partition="%d",topic="legacy"`, p)
				// every per-partition series of the partition is gone, the flag too: the stale-commit pair says it
				if n := countSeries(ss, "", at); n != 2 {
					t.Errorf("%d series with %s, want only the 2 stale-commit series", n, at)
				}
				kat := fmt.Sprintf(`consumergroup="g",partition="%d",topic="legacy"`, p)
				if n := countSeries(ss, "", kat); n != 0 {
					t.Errorf("%d kafka_exporter series with %s, want none", n, kat)
				}
				if v := value(t, ss, "tidemark_lag_stale_commit_offset", at); v != 500 {
					t.Errorf("stale commit offset %s = %v, want 500", at, v)
				}
				if v := value(t, ss, "tidemark_lag_stale_commit_age_seconds", at); v != 3960 {
					t.Errorf("stale commit age %s = %v, want 3960 (12:06 - 11:00)", at, v)
				}
			}
			// r has no commit on legacy/1 and does not subscribe to legacy: no lag and no stale commit either
			if n := countSeries(ss, "", `group="r",partition="1",topic="legacy"`); n != 0 {
				t.Errorf("%d series for r legacy/1, want none", n)
			}
			// r's legacy/0 is still committed on (10 s before the first poll): lag, shown as such
			if v := value(t, ss, "tidemark_lag_partition_offsets", `group="r",partition="0",topic="legacy"`); v != 1100 {
				t.Errorf("r legacy/0 lag %v, want 1100", v)
			}
			// the Empty group e keeps its lag on the same commits (case C11)
			if v := value(t, ss, "kafka_consumergroup_lag", `consumergroup="e",partition="2",topic="legacy"`); v != 1100 {
				t.Errorf("e legacy/2 kafka_consumergroup_lag %v, want 1100", v)
			}
			if n := countSeries(ss, "tidemark_lag_stale_commit_offset", `group="e"`); n != 0 {
				t.Errorf("%d stale commit series for the Empty group e, want none", n)
			}
			if gran == GranularityPartition {
				// the kafka_exporter offset sum adds what its partition series show: no stale commit
				if v := value(t, ss, "kafka_consumergroup_current_offset_sum", `consumergroup="g",topic="legacy"`); v != 0 {
					t.Errorf("g legacy kafka_consumergroup_current_offset_sum %v, want 0", v)
				}
			}
		})
	}
}
