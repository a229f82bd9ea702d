package lagexporter

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestReadTimelineErrorsNameTheLine(t *testing.T) {
	good := `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":5}]}]}`
	tests := []struct {
		name, body, want string
	}{
		{"unknown field", good + "\n" + `{"time":"2026-11-29T12:00:01Z","topcs":[]}`, "x.jsonl:2: json: unknown field \"topcs\""},
		// a missing high watermark must not read as 0
		{"missing hw", `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0}]}]}`,
			"x.jsonl:1: partition 0: log_start and high_watermark are required"},
		// the -1 "no commit" sentinel is not an offset
		{"sentinel commit", `{"time":"2026-11-29T12:00:00Z","groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":-1}]}]}`,
			"x.jsonl:1: committed offset t/0: offset -1 is a sentinel"},
		{"no time", "\n# comment\n" + `{"topics":[]}`, "x.jsonl:3: time: required"},
		{"time goes back", good + "\n" + strings.Replace(good, "12:00:00", "11:00:00", 1), "x.jsonl:2: time 2026-11-29T11:00:00Z is before"},
		{"lso above hw", `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":5,"last_stable":6}]}]}`,
			"x.jsonl:1: partition 0: need 0 <= log_start <= last_stable <= high_watermark"},
		{"bad kind", `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":1,"kind":"ctrl"}]}`,
			"x.jsonl:1: log[0].kind: \"ctrl\" is not one of"},
		{"late config", good + "\n" + `{"config":{}}`, "x.jsonl:2: config must be on the first line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadTimeline(strings.NewReader(tc.body), "x.jsonl")
			if err == nil || !errors.Is(err, ErrTimeline) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrTimeline containing %q", err, tc.want)
			}
		})
	}
}

// TestRecordThenEval records a timeline from one loop and replays it: the replay's snapshots equal the live ones.
func TestRecordThenEval(t *testing.T) {
	tl, err := ReadTimelineFile("testdata/c30_replay.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := caseConfig(t, tl)
	var buf bytes.Buffer
	tw := NewTimelineWriter(&buf, &TimelineConfigBlock{Cluster: "test"})
	tc := NewTimelineCluster(tl)
	var now time.Time
	loop, err := NewLoop(cfg, tc, func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	loop.SetRecorder(tw.Write)
	var live []*Snapshot
	for {
		tm, _, ok := tc.Advance()
		if !ok {
			break
		}
		now = tm
		s, err := loop.Cycle(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, s)
	}
	rec, err := ReadTimeline(&buf, "recorded")
	if err != nil {
		t.Fatalf("read back recorded timeline: %v", err)
	}
	i := 0
	err = Eval(context.Background(), rec, caseConfig(t, rec), func(_ int, s *Snapshot) error {
		a, b := live[i].Group("g").Partitions[0], s.Group("g").Partitions[0]
		a.CommitTime, b.CommitTime = time.Time{}, time.Time{}
		if a != b {
			t.Errorf("line %d: replay %+v != live %+v", i+1, b, a)
		}
		i++
		return nil
	})
	if err != nil || i != len(live) {
		t.Fatalf("eval: %v after %d of %d lines", err, i, len(live))
	}
}

// countingCluster wraps a TimelineCluster and counts record reads.
type countingCluster struct {
	*TimelineCluster
	reads int
}

func (c *countingCluster) ReadRecords(ctx context.Context, reqs []RecordRequest) ([]RecordProbe, error) {
	c.reads += len(reqs)
	return c.TimelineCluster.ReadRecords(ctx, reqs)
}

// TestProbeCache: a steady lagging group costs one record read, not one per cycle.
func TestProbeCache(t *testing.T) {
	tl, err := ReadTimelineFile("testdata/c23_old_commit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingCluster{TimelineCluster: NewTimelineCluster(tl)}
	var now time.Time
	loop, err := NewLoop(caseConfig(t, tl), cc, func() time.Time { return now }, nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		tm, _, ok := cc.Advance()
		if !ok {
			break
		}
		now = tm
		if _, err := loop.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if cc.reads != 1 {
		t.Fatalf("%d record reads over 2 cycles at the same committed offset, want 1 (cached)", cc.reads)
	}
}

func TestStaleAndRecreated(t *testing.T) {
	body := `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","id":"A","partitions":[{"partition":0,"log_start":0,"high_watermark":100},{"partition":1,"log_start":0,"high_watermark":50}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":90},{"topic":"t","partition":1,"offset":50}]}]}
{"time":"2026-11-29T12:00:30Z","topics":[{"topic":"t","id":"A","partitions":[{"partition":0,"leader":-1,"error":"LEADER_NOT_AVAILABLE"},{"partition":1,"log_start":0,"high_watermark":60}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":95},{"topic":"t","partition":1,"offset":50}]}]}
{"time":"2026-11-29T12:01:00Z","topics":[{"topic":"t","id":"B","partitions":[{"partition":0,"leader":-1,"error":"LEADER_NOT_AVAILABLE"},{"partition":1,"log_start":0,"high_watermark":3}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":95},{"topic":"t","partition":1,"offset":50}]}]}`
	tl, err := ReadTimeline(strings.NewReader(body), "inline")
	if err != nil {
		t.Fatal(err)
	}
	var snaps []*Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error { snaps = append(snaps, s); return nil }); err != nil {
		t.Fatal(err)
	}
	g := snaps[1].Group("g")
	// p0 has no leader: the last known HW (100) is used against the new commit 95, flagged stale.
	p0 := g.Partition("t", 0)
	if !p0.Known || p0.Lag != 5 || !p0.Flags.Has(FlagStale) {
		t.Errorf("stale p0: %+v, want known lag 5 stale", *p0)
	}
	if g.Total.Lag != 15 || g.Total.Unknown != 0 {
		t.Errorf("sum %d unknown %d, want 15 0", g.Total.Lag, g.Total.Unknown)
	}
	// topic re-created (id B): the old incarnation's offsets are not reused; p0 is unknown, not 0 and not stale.
	g = snaps[2].Group("g")
	p0 = g.Partition("t", 0)
	if p0.Known || !p0.Flags.Has(FlagUnavailable) || p0.Flags.Has(FlagStale) {
		t.Errorf("re-created p0: %+v, want unknown", *p0)
	}
	p1 := g.Partition("t", 1)
	if p1.Lag != 0 || !p1.Flags.Has(FlagAheadOfEnd) {
		t.Errorf("re-created p1: lag %d flags %s, want 0 ahead_of_end (old commit 50 > new HW 3)", p1.Lag, p1.Flags)
	}
	if g.Total.Unknown != 1 || g.Total.Lag != 0 {
		t.Errorf("aggregate %+v, want unknown 1, lag 0", g.Total)
	}
}

func TestInterpolationFallback(t *testing.T) {
	// HW 100 at 12:00:00, 110 at 12:00:30; the group sits at 105 and no record can be read: record 105 arrived
	// between 12:00:00 and 12:00:30, so at 12:01:00 the estimate is 30 s (at most one poll short), flagged estimated.
	body := `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":100}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":100}]}]}
{"time":"2026-11-29T12:00:30Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":110}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":105}]}]}
{"time":"2026-11-29T12:01:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":110}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":105}]}]}`
	tl, err := ReadTimeline(strings.NewReader(body), "inline")
	if err != nil {
		t.Fatal(err)
	}
	var snaps []*Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error { snaps = append(snaps, s); return nil }); err != nil {
		t.Fatal(err)
	}
	p := snaps[2].Group("g").Partition("t", 0)
	if p.TimeLag != 30*time.Second || p.Flags != FlagEstimated {
		t.Fatalf("time lag %v flags %s, want 30s estimated", p.TimeLag, p.Flags)
	}
}
