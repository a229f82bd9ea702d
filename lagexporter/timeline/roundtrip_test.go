package timeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// faultyCluster answers from a timeline like the Player and fails, per cycle, the way the live reader does: a whole
// call failing, partial CycleErrors, failed partitions with an error code, a failed record read.
type faultyCluster struct {
	*Player
	cycle int
}

func (f *faultyCluster) Metadata(ctx context.Context) ([]TopicObservation, error) {
	switch f.cycle {
	case 2:
		return nil, errors.New("dial tcp 127.0.0.1:23092: connect: connection refused") // nothing at all
	case 5:
		out, _ := f.Player.Metadata(ctx)
		return out, CycleErrors{{Kind: ErrKindMetadata, Subject: "topic gone", Message: "UNKNOWN_TOPIC_OR_PARTITION"}}
	}
	return f.Player.Metadata(ctx)
}

func (f *faultyCluster) Groups(ctx context.Context) ([]GroupObservation, error) {
	switch f.cycle {
	case 3:
		out, _ := f.Player.Groups(ctx)
		return out, CycleErrors{{Kind: ErrKindGroups, Subject: "broker 2", Message: "list groups: EOF"}}
	case 6:
		return nil, errors.New("list groups: no brokers known (read metadata first)")
	}
	return f.Player.Groups(ctx)
}

func (f *faultyCluster) CommittedOffsets(ctx context.Context, groups []string) ([]GroupObservation, error) {
	out, err := f.Player.CommittedOffsets(ctx, groups)
	if f.cycle == 3 {
		for i := range out {
			if out[i].Group == "behind" {
				out[i] = GroupObservation{Group: "behind", Error: "COORDINATOR_NOT_AVAILABLE"}
			}
		}
		return out, CycleErrors{{Kind: ErrKindCommitted, Subject: "group behind", Message: "COORDINATOR_NOT_AVAILABLE"}}
	}
	return out, err
}

func (f *faultyCluster) ListOffsets(ctx context.Context, topics []TopicObservation) ([]TopicObservation, error) {
	out, err := f.Player.ListOffsets(ctx, topics)
	if f.cycle == 4 {
		for i := range out {
			p := &out[i].Partitions[0]
			*p = PartitionObservation{Partition: p.Partition, Leader: 2, Error: "connect broker 2: connection refused", ErrorCode: ErrCodeNetwork}
		}
		return out, CycleErrors{
			{Kind: ErrKindListOffsets, Subject: "broker 2", Message: "connect broker 2: connection refused"},
			{Kind: ErrKindUnavailable, Subject: "q/1", Message: "no leader"},
			{Kind: ErrKindConfigs, Subject: "q", Message: "describe configs: EOF"},
		}
	}
	return out, err
}

func (f *faultyCluster) ReadRecords(ctx context.Context, reqs []RecordRequest) ([]RecordProbe, error) {
	out, err := f.Player.ReadRecords(ctx, reqs)
	if f.cycle == 5 && len(out) > 0 {
		out[0].Error = "fetch: EOF"
		return out, CycleErrors{{Kind: ErrKindRecords, Subject: "broker 1", Message: "fetch: EOF"}}
	}
	return out, err
}

// TestRecordEvalKeepsEveryError: a recorded incident replays with the same counters. Every kind
// of failure the live loop can see (a cycle that reads nothing, partial errors of each kind, partitions failing with
// a code, a failed record read, a cycle past its deadline) is written by `lag record` and played back by `lag eval`:
// the replay's health after every cycle and its snapshots equal the live ones.
func TestRecordEvalKeepsEveryError(t *testing.T) {
	src, err := ReadFile("testdata/i12_catch_up.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	src.Append(src.Lines[len(src.Lines)-1]) // 7 cycles: one more at the last line's time
	src.Lines[6].Time = src.Lines[6].Time.Add(time.Minute)
	cfg := caseConfig(t, src)
	fc := &faultyCluster{Player: NewPlayer(src)}
	var buf bytes.Buffer
	tw := NewWriter(&buf, &ConfigBlock{Cluster: cfg.Cluster})
	var now time.Time
	live, err := NewLoop(cfg, fc, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	live.SetRecorder(tw.Write)
	type result struct {
		snap   string // JSON of the snapshot, "" when the cycle failed
		health Health
	}
	var want []result
	for {
		tm, _, ok := fc.Advance()
		if !ok {
			break
		}
		now, fc.cycle = tm, fc.cycle+1
		ctx := context.Background()
		if fc.cycle == 5 { // this cycle ran out of time
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, time.Unix(0, 0))
			defer cancel()
		}
		s, err := live.Cycle(ctx)
		if (err != nil) != (fc.cycle == 2 || fc.cycle == 6) {
			t.Fatalf("cycle %d: err %v", fc.cycle, err)
		}
		want = append(want, result{snapJSON(t, s), live.Health()})
	}
	if len(want) != 7 {
		t.Fatalf("%d live cycles, want 7", len(want))
	}
	h := want[6].health
	wantErrs := map[ErrorKind]uint64{ErrKindMetadata: 2, ErrKindGroups: 2, ErrKindCommitted: 1, ErrKindListOffsets: 1,
		ErrKindUnavailable: 1, ErrKindConfigs: 1, ErrKindRecords: 1, ErrKindCycleTimeout: 1}
	if h.Cycles != 7 || !maps.Equal(h.Errors, wantErrs) {
		t.Fatalf("live health %+v, want 7 cycles and errors %v (the fixture failed to fail)", h, wantErrs)
	}
	if n := want[3].health.PartitionErrors[PartitionErrorKey{Topic: "q", Partition: 0, Code: ErrCodeNetwork}]; n != 1 {
		t.Fatalf("live partition errors after cycle 4: %v, want q/0 NETWORK 1", want[3].health.PartitionErrors)
	}

	rec, err := Read(&buf, "recorded")
	if err != nil {
		t.Fatalf("read back the recorded timeline: %v", err)
	}
	if len(rec.Lines) != 7 || rec.Lines[1].Failed != ErrKindMetadata || rec.Lines[5].Failed != ErrKindGroups {
		t.Fatalf("recorded %d lines (failed: %q, %q), want 7 with lines 2 and 6 failed", len(rec.Lines), rec.Lines[1].Failed, rec.Lines[5].Failed)
	}
	i := 0
	err = Play(context.Background(), rec, caseConfig(t, rec), func(p Poll) error {
		got := result{snapJSON(t, p.Snapshot), p.Health}
		w := want[i]
		if got.snap != w.snap {
			t.Errorf("cycle %d: replayed snapshot\n%s\nwant\n%s", i+1, got.snap, w.snap)
		}
		w.health.LastDuration, got.health.LastDuration = 0, 0 // the live clock moved during the cycle; a replay's does not
		if got.health.Cycles != w.health.Cycles || !maps.Equal(got.health.Errors, w.health.Errors) ||
			!maps.Equal(got.health.PartitionErrors, w.health.PartitionErrors) ||
			!maps.Equal(got.health.InvalidTimestamps, w.health.InvalidTimestamps) || !got.health.LastSuccess.Equal(w.health.LastSuccess) {
			t.Errorf("cycle %d: replayed health %+v, want %+v", i+1, got.health, w.health)
		}
		i++
		return nil
	})
	if err != nil || i != 7 {
		t.Fatalf("play: %v after %d of 7 cycles", err, i)
	}
}

func snapJSON(t *testing.T, s *Snapshot) string {
	t.Helper()
	if s == nil {
		return ""
	}
	cp := *s
	cp.CycleDuration = 0
	b, err := json.Marshal(&cp)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
