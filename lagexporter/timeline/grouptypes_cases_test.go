package timeline

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// evalAs replays testdata/<name> with every group given group type typ (as ListGroups v5 would list it), so a case
// written for classic groups runs on KIP-848 or streams groups.
func evalAs(t *testing.T, name, typ string) []*Snapshot {
	t.Helper()
	tl, err := ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	for i := range tl.Lines {
		for j := range tl.Lines[i].Groups {
			tl.Lines[i].Groups[j].GroupType = typ
		}
	}
	var out []*Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error {
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestClassicCasesHoldForCommittingGroupTypes: KIP-848 consumer groups and streams groups commit offsets, so every
// acceptance case written for classic groups (C01 transaction markers, C03 read order, C05 log start, C06/C10
// partitions without a commit, C11 an empty group's growing lag, C12 STOP, C14 simple consumers, C15 series of deleted
// groups, C16 cardinality, C21/C23/C27 time lag, C30 replays, ...) and every i* timeline (a rewound group that
// dies, falling end offsets, unassigned stale commits, commits ahead of the end, retention margins, catch-up, ...)
// gives the same snapshots, number for number and status for status, when its groups are of those types; only
// group_type differs. A rule keyed on the type by mistake
// (a share-group rule leaking to them, a member rule that only sees classic members) fails here.
func TestClassicCasesHoldForCommittingGroupTypes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "[ci]*.jsonl"))
	if err != nil || len(files) < 25 {
		t.Fatalf("case timelines %v (%v), want the c* acceptance cases and the i* anomaly timelines", files, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		classic := evalAs(t, name, "")
		for _, typ := range []string{GroupConsumer, GroupStreams} {
			t.Run(strings.TrimSuffix(name, ".jsonl")+"/"+typ, func(t *testing.T) {
				got := evalAs(t, name, typ)
				if len(got) != len(classic) {
					t.Fatalf("%d snapshots, classic %d", len(got), len(classic))
				}
				for i := range got {
					for j := range got[i].Groups {
						if g := &got[i].Groups[j]; g.GroupType != typ {
							t.Fatalf("line %d: %s has type %q, want %q", i+1, g.Group, g.GroupType, typ)
						}
						got[i].Groups[j].GroupType = GroupClassic
					}
					if !reflect.DeepEqual(got[i], classic[i]) {
						a, _ := json.Marshal(got[i])
						b, _ := json.Marshal(classic[i])
						t.Fatalf("line %d differs from the classic group's snapshot:\n%s: %s\nclassic: %s", i+1, typ, a, b)
					}
				}
			})
		}
	}
}

// TestTargetAssignmentInScope (C10 for KIP-848 and streams groups): the coordinator moves partitions in steps, so a
// member still reconciling (member epoch 6 below the assignment epoch 7) owns only orders/0 while its target adds the
// newly subscribed topic payments. payments is measured from the first cycle, before any commit or ownership,
// counted from the log start and flagged no_commit (C06), as it is once the member owns it.
func TestTargetAssignmentInScope(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tl := &Timeline{Name: "target", Config: &ConfigBlock{ReadRecords: ptr(false)}}
	line := func(owned map[string][]int32, target map[string][]int32, epoch int32) Line {
		return Line{Observation: Observation{Time: at,
			Topics: []TopicObservation{
				{Topic: "orders", ID: "o1", Partitions: []PartitionObservation{{Partition: 0, Leader: 1, LogStart: 0, HighWatermark: 50, LastStable: 50}}},
				{Topic: "payments", ID: "p1", Partitions: []PartitionObservation{
					{Partition: 0, Leader: 1, LogStart: 10, HighWatermark: 40, LastStable: 40},
					{Partition: 1, Leader: 1, LogStart: 0, HighWatermark: 20, LastStable: 20}}},
			},
			Groups: []GroupObservation{{Group: "orders-848", GroupType: GroupConsumer, State: "Reconciling", Epoch: 7,
				AssignmentEpoch: 7, Members: []Member{{MemberID: "m1", ClientID: "orders", Epoch: epoch, Assignment: owned, Target: target}},
				Offsets: []CommittedOffset{{Topic: "orders", Partition: 0, Offset: 45}}}},
		}}
	}
	tl.Append(line(map[string][]int32{"orders": {0}}, map[string][]int32{"orders": {0}, "payments": {0, 1}}, 6))
	tl.Append(line(map[string][]int32{"orders": {0}, "payments": {0, 1}}, nil, 7))
	tl.Lines[1].Time = at.Add(30 * time.Second)
	var snaps []*Snapshot
	if err := Eval(context.Background(), tl, caseConfig(t, tl), func(_ int, s *Snapshot) error {
		snaps = append(snaps, s)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, s := range snaps {
		g := mustGroup(t, s, "orders-848")
		wantPart(t, g, "orders", 0, 5, 5, 0)
		// payments/0: log start 10, HW 40 → 30; payments/1: 0..20 → 20; no commit on either
		wantPart(t, g, "payments", 0, 30, 30, FlagNoCommit)
		wantPart(t, g, "payments", 1, 20, 20, FlagNoCommit)
		if g.Total.Lag != 55 || g.Epoch != 7 || len(g.Members) != 1 {
			t.Fatalf("line %d: lag %d, epoch %d, %d members; want 55, 7, 1", i+1, g.Total.Lag, g.Epoch, len(g.Members))
		}
	}
	if m := mustGroup(t, snaps[0], "orders-848").Members[0]; m.Epoch != 6 || len(m.Target["payments"]) != 2 {
		t.Fatalf("reconciling member %+v, want epoch 6 with payments in its target", m)
	}
}

func ptr[T any](v T) *T { return &v }

// TestRecordThenEvalGroupTypes: `tidemark lag record` keeps everything the group types add (group type, epochs,
// members' epochs and target assignments, a share group's start offsets with the broker's lag and its reset policy,
// a streams group's topology), so `tidemark lag eval` of the recording gives the live snapshots exactly.
func TestRecordThenEvalGroupTypes(t *testing.T) {
	tl, err := ReadFile("testdata/g01_group_types.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for i := range tl.Lines { // a reconciling KIP-848 member: its target adds a partition it does not own yet
		for j := range tl.Lines[i].Groups {
			if g := &tl.Lines[i].Groups[j]; g.Group == "orders-848" {
				g.Members[0].Target = map[string][]int32{"clicks": {0}, "jobs": {1}}
			}
		}
	}
	live, rec := recordLive(t, tl, tl.Config)
	i := 0
	err = Eval(context.Background(), rec, caseConfig(t, rec), func(_ int, s *Snapshot) error {
		clearCommitTimes(s)
		clearCommitTimes(live[i])
		if !reflect.DeepEqual(s.Groups, live[i].Groups) {
			a, _ := json.Marshal(live[i].Groups)
			b, _ := json.Marshal(s.Groups)
			t.Errorf("line %d: replay differs from live:\nlive   %s\nreplay %s", i+1, a, b)
		}
		i++
		return nil
	})
	if err != nil || i != len(live) {
		t.Fatalf("eval: %v after %d of %d lines", err, i, len(live))
	}
	if g := live[0].Group("orders-848"); g == nil || g.Partition("jobs", 1) == nil || !g.Partition("jobs", 1).Flags.Has(FlagNoCommit) {
		t.Fatalf("orders-848 %+v: want jobs/1 in scope from the target assignment", g)
	}
}

// clearCommitTimes zeroes what a replay cannot know: the live loop's first-seen commit times.
func clearCommitTimes(s *Snapshot) {
	for i := range s.Groups {
		for j := range s.Groups[i].Partitions {
			s.Groups[i].Partitions[j].CommitTime = time.Time{}
		}
	}
}
