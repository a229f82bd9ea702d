package timeline

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
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
		// a second object on one line is an error, not dropped silently
		{"two objects on a line", good + good, "x.jsonl:1: trailing data after the JSON object"},
		{"garbage after the object", good + ` x`, "x.jsonl:1: trailing data"},
		// duplicates are errors, not accepted with the last one winning
		{"duplicate partition", `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":5},{"partition":0,"log_start":0,"high_watermark":9}]}]}`,
			"x.jsonl:1: topics[0].partitions[1]: duplicate partition t/0"},
		{"duplicate topic", `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t"},{"topic":"t"}]}`, `x.jsonl:1: topics[1]: duplicate topic "t"`},
		{"duplicate offset", `{"time":"2026-11-29T12:00:00Z","groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":1},{"topic":"t","partition":0,"offset":2}]}]}`,
			`x.jsonl:1: groups[0].offsets[1]: duplicate offset of group "g" on t/0`},
		{"duplicate group", `{"time":"2026-11-29T12:00:00Z","groups":[{"group":"g"},{"group":"g"}]}`, `x.jsonl:1: groups[1]: duplicate group "g"`},
		// QA: config-line errors name the file and line and the key as written in the config line
		{"config bad regexp", "# c\n" + `{"config":{"group_allow":["app-(.*"]}}`, "x.jsonl:2: config: group_allow[0]: error parsing regexp: missing closing ): `app-(.*`"},
		{"config window 1", `{"config":{"status_window":1}}`, "x.jsonl:1: config: status_window: must be >= 2, got 1"},
		{"config granularity", `{"config":{"granularity":"cluster"}}`, `x.jsonl:1: config: granularity: "cluster" is not one of partition, partition_lag, topic`},
		{"config duration", `{"config":{"status_stop_after":"5 minutes"}}`, `x.jsonl:1: config: status_stop_after: time: unknown unit`},
		{"config negative duration", `{"config":{"status_simple_consumer_window":"-1s"}}`, `x.jsonl:1: config: status_simple_consumer_window: must be > 0, got -1s`},
		{"config negative offset threshold", `{"config":{"status_warn_offset_lag":-1}}`, `x.jsonl:1: config: status_warn_offset_lag: must be >= 0`},
		// step_ms of -1e12 or 1e308 would give time lags of centuries (and overflow time.Duration)
		{"step_ms huge", `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":2,"timestamp":"2026-11-29T11:00:00Z","step_ms":1e308}]}`,
			"x.jsonl:1: log[0].step_ms: 1e+308 is outside ±8.64e+07"},
		{"step_ms very negative", `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":2,"timestamp":"2026-11-29T11:00:00Z","step_ms":-1e12}]}`,
			"x.jsonl:1: log[0].step_ms: -1e+12 is outside"},
		// a legal step over a huge run still spans centuries
		{"run spans too long", `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":100000000,"timestamp":"2026-11-29T11:00:00Z","step_ms":86400000}]}`,
			"x.jsonl:1: log[0]: step_ms × (to − from) = 8.64e+15 ms spans more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.body), "x.jsonl")
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

// TestRecordThenEval records a timeline from one loop and replays it: the replay's snapshots equal the live ones.
func TestRecordThenEval(t *testing.T) {
	tl, err := ReadFile("testdata/c30_replay.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	live, rec := recordLive(t, tl, &ConfigBlock{Cluster: "test"})
	i := 0
	err = Eval(context.Background(), rec, caseConfig(t, rec), func(_ int, s *Snapshot) error {
		a, b := live[i].Group("g").Partitions[0], s.Group("g").Partitions[0]
		a.CommitTime, b.CommitTime = time.Time{}, time.Time{}
		if !a.Equal(&b) {
			t.Errorf("line %d: replay %+v != live %+v", i+1, b, a)
		}
		i++
		return nil
	})
	if err != nil || i != len(live) {
		t.Fatalf("eval: %v after %d of %d lines", err, i, len(live))
	}
}

// recordLive runs a loop over tl's lines, as `tidemark lag record` does on a live cluster (a Writer with the config
// block as the recorder), and returns the live snapshots and the recorded timeline read back.
func recordLive(t *testing.T, tl *Timeline, block *ConfigBlock) ([]*Snapshot, *Timeline) {
	t.Helper()
	var buf bytes.Buffer
	tw := NewWriter(&buf, block)
	tc := NewPlayer(tl)
	var now time.Time
	loop, err := NewLoop(caseConfig(t, tl), tc, func() time.Time { return now })
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
	rec, err := Read(&buf, "recorded")
	if err != nil {
		t.Fatalf("read back recorded timeline: %v", err)
	}
	return live, rec
}

// countingCluster wraps a Player and counts record reads.
type countingCluster struct {
	*Player
	reads int
}

func (c *countingCluster) ReadRecords(ctx context.Context, reqs []RecordRequest) ([]RecordProbe, error) {
	c.reads += len(reqs)
	return c.Player.ReadRecords(ctx, reqs)
}

// TestProbeCache: a steady lagging group costs one record read, not one per cycle.
func TestProbeCache(t *testing.T) {
	tl, err := ReadFile("testdata/c23_old_commit.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingCluster{Player: NewPlayer(tl)}
	var now time.Time
	loop, err := NewLoop(caseConfig(t, tl), cc, func() time.Time { return now })
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
	tl, err := Read(strings.NewReader(body), "inline")
	if err != nil {
		t.Fatal(err)
	}
	var snaps []*Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error { snaps = append(snaps, s); return nil }); err != nil {
		t.Fatal(err)
	}
	g := snaps[1].Group("g")
	// p0 has no leader: the last known HW (100) is shown against the new commit 95, flagged stale, 30 s old.
	p0 := g.Partition("t", 0)
	if !p0.Known || p0.Lag != 5 || !p0.Flags.Has(FlagStale) || p0.StaleFor() != 30*time.Second {
		t.Errorf("stale p0: %+v, want known lag 5 stale for 30s", *p0)
	}
	// but the sums leave it out and count it unknown: 10 from p1 only, not complete.
	if g.Total.Lag != 10 || g.Total.Unknown != 1 || g.Total.Complete {
		t.Errorf("sum %d unknown %d complete %v, want 10 1 false", g.Total.Lag, g.Total.Unknown, g.Total.Complete)
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
	tl, err := Read(strings.NewReader(body), "inline")
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

// TestTimelineEdgeTimestamps: a 1970/<=0 timestamp in a timeline log is missing, exactly like NO_TIMESTAMP (kind
// no_timestamp) and like the live reader; a year-9999 timestamp leaves the time lag unknown and flagged.
func TestTimelineEdgeTimestamps(t *testing.T) {
	line := func(log string) string {
		return `{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","id":"t1","partitions":[{"partition":0,"leader":1,"log_start":0,"high_watermark":12}]}],` +
			`"groups":[{"group":"g","state":"Stable","offsets":[{"topic":"t","partition":0,"offset":10}]}],"log":[` + log + `]}`
	}
	const tail = `{"topic":"t","partition":0,"from":11,"to":12,"timestamp":"2026-11-29T11:59:58Z"}`
	tests := []struct {
		name      string
		log       string
		timeLag   time.Duration
		timeKnown bool
		flags     Flags
	}{
		// the reference: kind no_timestamp at offset 10, record 11 gives 2 s, a lower bound (C27)
		{"no_timestamp kind", `{"topic":"t","partition":0,"from":10,"to":11,"kind":"no_timestamp"},` + tail, 2 * time.Second, true, FlagLowerBound},
		// the epoch is the same as no_timestamp, not a 56-year time lag
		{"epoch", `{"topic":"t","partition":0,"from":10,"to":11,"timestamp":"1970-01-01T00:00:00Z"},` + tail, 2 * time.Second, true, FlagLowerBound},
		{"before the epoch", `{"topic":"t","partition":0,"from":10,"to":11,"timestamp":"1969-12-31T23:59:59.999Z"},` + tail, 2 * time.Second, true, FlagLowerBound},
		// year 9999 with offset lag 2 is flagged, not time lag 0. A single line has a one-point history,
		// so the interpolation fallback has nothing before the record: the time lag stays unknown.
		{"year 9999", `{"topic":"t","partition":0,"from":10,"to":12,"timestamp":"9999-01-01T00:00:00Z"}`, 0, false, FlagFutureTimestamp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := Read(strings.NewReader(line(tc.log)), "x.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			cfg := caseConfig(t, tl)
			var snap *Snapshot
			if err := Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error { snap = s; return nil }); err != nil {
				t.Fatal(err)
			}
			p := mustPart(t, mustGroup(t, snap, "g"), "t", 0)
			if p.Lag != 2 || p.TimeLag != tc.timeLag || p.TimeLagKnown != tc.timeKnown || p.Flags != tc.flags {
				t.Fatalf("lag %d time lag %v known %v flags %q, want 2 %v %v %q", p.Lag, p.TimeLag, p.TimeLagKnown, p.Flags,
					tc.timeLag, tc.timeKnown, tc.flags)
			}
		})
	}
}

// TestFutureTimestampInterpolated: with a history of end offsets, a future record timestamp falls back to the
// interpolated age of the backlog (flags future_timestamp and estimated) instead of 0.
func TestFutureTimestampInterpolated(t *testing.T) {
	obs := func(at string, hw int) string {
		return `{"time":"` + at + `","topics":[{"topic":"t","id":"t1","partitions":[{"partition":0,"leader":1,"log_start":0,"high_watermark":` +
			strconv.Itoa(hw) + `}]}],"groups":[{"group":"g","state":"Stable","offsets":[{"topic":"t","partition":0,"offset":10}]}],` +
			`"log":[{"topic":"t","partition":0,"from":10,"to":` + strconv.Itoa(max(hw, 10)) + `,"timestamp":"9999-01-01T00:00:00Z"}]}`
	}
	body := obs("2026-11-29T11:58:00Z", 10) + "\n" + obs("2026-11-29T11:59:00Z", 11) + "\n" + obs("2026-11-29T12:00:00Z", 15)
	tl, err := Read(strings.NewReader(body), "x.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var snap *Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error { snap = s; return nil }); err != nil {
		t.Fatal(err)
	}
	p := mustPart(t, mustGroup(t, snap, "g"), "t", 0)
	// record 10 was appended between 11:58 (HW 10) and 11:59 (HW 11): estimated 11:59, 60 s before the last poll
	if p.Lag != 5 || p.TimeLag != time.Minute || !p.TimeLagKnown || p.Flags != FlagFutureTimestamp|FlagEstimated {
		t.Fatalf("lag %d time lag %v known %v flags %q, want 5 1m0s true %q", p.Lag, p.TimeLag, p.TimeLagKnown, p.Flags,
			FlagFutureTimestamp|FlagEstimated)
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":5}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":3}]}]}`))
	f.Add([]byte(`{"config":{"groups":[{"match":"g","isolation":"read_committed"}]}}` + "\n" + `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":5,"timestamp":"2026-11-29T11:00:00Z","step_ms":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, err := Read(strings.NewReader(string(b)), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		cfg := &Config{}
		if tl.Config != nil && tl.Config.Apply(cfg) != nil {
			return
		}
		cfg.SetDefaults()
		if cfg.Validate() != nil {
			return
		}
		// any accepted timeline evaluates without panicking and never yields negative lag
		_ = Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error {
			for _, g := range s.Groups {
				for _, p := range g.Partitions {
					if p.Lag < 0 || p.RawLag < 0 || p.TimeLag < 0 || p.ExpiredOffsets < 0 {
						t.Fatalf("negative value in %+v", p)
					}
				}
			}
			return nil
		})
	})
}
