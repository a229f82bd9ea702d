package promexport

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	. "github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// healthSource serves a replayed poll: its snapshot and the loop's health after it.
type healthSource struct{ p timeline.Poll }

func (h healthSource) Latest() *Snapshot { return h.p.Snapshot }
func (h healthSource) Health() Health    { return h.p.Health }

// playSeries replays a case timeline and returns the series the collector exposes after each poll.
func playSeries(t *testing.T, file string, mutate func(*Config)) [][]series {
	t.Helper()
	tl, err := timeline.ReadFile(filepath.Join(caseDir, file))
	if err != nil {
		t.Fatal(err)
	}
	cfg := caseConfig(t, tl)
	if mutate != nil {
		mutate(cfg)
	}
	var out [][]series
	if err := timeline.Play(context.Background(), tl, cfg, func(p timeline.Poll) error {
		out = append(out, gatherSeries(t, NewCollector(cfg, healthSource{p})))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnomalySeries pins the exposed values of every anomaly, retention and catch-up series, on the i* timelines.
func TestAnomalySeries(t *testing.T) {
	type want struct {
		poll        int
		name, label string
		value       float64 // NaN: absent
	}
	absent := math.NaN()
	for _, tc := range []struct {
		file  string
		wants []want
	}{
		{"i01_rewind_then_died.jsonl", []want{
			{1, "tidemark_lag_group_replaying", `group="g"`, 1},
			{1, "tidemark_lag_group_status", `status="REWIND"`, 1},
			// dead and replaying: both at once
			{24, "tidemark_lag_group_replaying", `group="g"`, 1},
			{24, "tidemark_lag_group_status", `status="STOP"`, 1},
			{24, "tidemark_lag_group_catch_up_seconds", `group="g"`, math.Inf(1)},
		}},
		{"i02_end_offset_decreased.jsonl", []want{
			{0, "tidemark_topic_end_offset_decreases_total", `topic="t"`, 0},
			{1, "tidemark_topic_end_offset_decreases_total", `topic="t"`, 1},
			{1, "tidemark_lag_partition_flag", `flag="end_offset_decreased",group="g"`, 1},
			{1, "tidemark_lag_partition_ahead_offsets", `group="g"`, 100},
			{2, "tidemark_lag_partition_flag", `flag="end_offset_decreased",group="g"`, absent},
			{2, "tidemark_lag_group_replaying", `group="g"`, 0},
			{2, "tidemark_lag_group_replaying", `group="h"`, 1},
		}},
		{"i03_unassigned_commits.jsonl", []want{
			{6, "tidemark_lag_topic_unassigned_committed_partitions", `group="g",topic="legacy"`, 3},
			{6, "tidemark_lag_topic_offsets", `group="g",topic="legacy"`, 0},
			{6, "tidemark_lag_group_offsets", `group="g"`, 50},
			{6, "tidemark_lag_group_status", `group="g",status="OK"`, 1},
			{6, "tidemark_lag_stale_commit_offset", `group="g",partition="2",topic="legacy"`, 500},
			{6, "tidemark_lag_partition_offsets", `group="g",partition="2",topic="legacy"`, absent},
			{6, "tidemark_lag_topic_unassigned_committed_partitions", `group="e",topic="legacy"`, 0},
		}},
		{"i04_committed_ahead.jsonl", []want{
			{1, "tidemark_lag_partition_ahead_offsets", `group="mm2"`, 40},
			{1, "tidemark_lag_group_status", `status="AHEAD"`, 1},
			{1, "tidemark_lag_partition_offsets", `group="mm2"`, 0},
			{3, "tidemark_lag_partition_ahead_offsets", `group="mm2"`, absent},
			{3, "tidemark_lag_group_status", `status="OK"`, 1},
		}},
		{"i05_open_transactions_and_compaction.jsonl", []want{
			{0, "tidemark_partition_open_transaction_offsets", `topic="tx"`, 20},
			{0, "tidemark_partition_open_transaction_offsets", `partition="0",topic="c"`, 0},
			{0, "tidemark_lag_partition_control_offsets", `partition="0",topic="c"`, 1},
			{0, "tidemark_lag_partition_compacted_offsets", `partition="0",topic="c"`, 2},
			{0, "tidemark_lag_partition_control_offsets", `partition="1",topic="c"`, 2},
			{0, "tidemark_lag_partition_compacted_offsets", `partition="1",topic="c"`, absent},
		}},
		{"i07_invalid_timestamps.jsonl", []want{
			{2, "tidemark_lag_exporter_invalid_timestamps_total", `reason="missing"`, 1},
			{2, "tidemark_lag_exporter_invalid_timestamps_total", `reason="wrong_unit"`, 1},
			{2, "tidemark_lag_exporter_invalid_timestamps_total", `reason="future"`, 1},
		}},
		{"i08_stale_partitions.jsonl", []want{
			{2, "tidemark_lag_partition_stale_seconds", `partition="0"`, 120},
			{2, "tidemark_lag_partition_stale_seconds", `partition="1"`, 60},
			{2, "tidemark_lag_topic_unknown_partitions", `topic="t"`, 2},
			{2, "tidemark_lag_exporter_partition_errors_total", `code="LEADER_NOT_AVAILABLE",partition="0",topic="t"`, 2},
			{2, "tidemark_lag_exporter_partition_errors_total", `code="NOT_LEADER_OR_FOLLOWER",partition="1",topic="t"`, 1},
			{3, "tidemark_lag_exporter_partition_errors_total", `topic="t"`, absent},
			{3, "tidemark_lag_partition_stale_seconds", `partition="0"`, absent},
		}},
		{"i11_retention.jsonl", []want{
			{0, "tidemark_lag_partition_retention_margin_seconds", `topic="r"`, 60},
			{0, "tidemark_lag_partition_retention_margin_bytes", `topic="r"`, 200000},
			{0, "tidemark_lag_topic_retention_margin_seconds", `topic="r"`, 60},
			{0, "tidemark_lag_partition_retention_margin_seconds", `topic="cmp"`, absent},
			{0, "tidemark_lag_topic_retention_margin_seconds", `topic="u"`, absent},
			{2, "tidemark_lag_topic_unread_records_deleted_total", `topic="r"`, 200},
			{2, "tidemark_lag_topic_retention_margin_bytes", `topic="r"`, 600000},
		}},
		{"i12_catch_up.jsonl", []want{
			{0, "tidemark_lag_group_catch_up_seconds", `group="drain"`, absent},
			{5, "tidemark_lag_group_catch_up_seconds", `group="drain"`, 300},
			{5, "tidemark_lag_group_catch_up_seconds", `group="behind"`, math.Inf(1)},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			polls := playSeries(t, tc.file, nil)
			for _, w := range tc.wants {
				ss := polls[w.poll]
				if math.IsNaN(w.value) {
					if n := countSeries(ss, w.name, w.label); n != 0 {
						t.Errorf("poll %d: %d series %s{%s}, want none", w.poll+1, n, w.name, w.label)
					}
					continue
				}
				if v := value(t, ss, w.name, w.label); v != w.value {
					t.Errorf("poll %d: %s{%s} = %v, want %v", w.poll+1, w.name, w.label, v, w.value)
				}
			}
		})
	}
	// at topic granularity the per-partition anomaly series go with the others; the topic and group ones stay
	ss := playSeries(t, "i11_retention.jsonl", func(c *Config) { c.Granularity = GranularityTopic })[2]
	for _, name := range []string{"tidemark_lag_partition_retention_margin_seconds", "tidemark_partition_open_transaction_offsets"} {
		if n := countSeries(ss, name, ""); n != 0 {
			t.Errorf("topic granularity: %d series %s", n, name)
		}
	}
	if v := value(t, ss, "tidemark_lag_topic_retention_margin_seconds", `topic="r"`); v != 140 {
		t.Errorf("topic granularity: topic retention margin %v, want 140", v)
	}
	ss = playSeries(t, "i08_stale_partitions.jsonl", func(c *Config) { c.Granularity = GranularityTopic })[2]
	if n := countSeries(ss, "tidemark_lag_exporter_partition_errors_total", ""); n != 0 {
		t.Errorf("topic granularity: %d partition error series, want 0", n)
	}
}
