package lagexporter

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

// The states of a group carry their topic in the group's runs (groupState.topics), not each its own name and id.
// Under churn (partitions and topics added and removed, a topic recreated under a new id) the walk must hand out, for
// every (topic, partition), the state it had last cycle when the topic's incarnation is the same, and a fresh one
// otherwise: what the states with their own topic and id did. A reference model tracks each state by a mark.
func TestStateWalkCarriesStatesUnderChurn(t *testing.T) {
	if s := unsafe.Sizeof(gpState{}); s != 112 {
		t.Errorf("gpState is %d B, want 112", s)
	}
	type tp struct {
		topic string
		p     int32
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ids := map[string]string{}
	gs := &groupState{}
	var scratch []topicRun
	last := map[tp]int64{} // the mark of each state handed out last cycle
	lastID := map[string]string{}
	mark := int64(0)
	for cycle := range 400 {
		// this cycle's partitions: a few topics of a few partitions each, sorted as evalGroup walks them
		for _, name := range []string{"a", "b", "c", "d"} {
			if ids[name] == "" || rng.IntN(20) == 0 {
				ids[name] = fmt.Sprintf("%s-%d", name, cycle) // (re)created: a new incarnation
			}
		}
		var parts []tp
		for _, name := range []string{"a", "b", "c", "d"} {
			if rng.IntN(4) == 0 {
				continue // not in the group's scope this cycle
			}
			for p := range int32(1 + rng.IntN(5)) {
				if rng.IntN(6) != 0 {
					parts = append(parts, tp{name, p})
				}
			}
		}
		w := newStateWalk(gs, 3, len(parts), scratch)
		now := map[tp]int64{}
		for _, k := range parts {
			st := w.state(k.topic, k.p, ids[k.topic])
			if st.partition != k.p || len(st.ring) != 3 {
				t.Fatalf("cycle %d: %v got the state of partition %d, ring %d", cycle, k, st.partition, len(st.ring))
			}
			if m, ok := last[k]; ok && lastID[k.topic] == ids[k.topic] {
				if st.committed != m {
					t.Fatalf("cycle %d: %v got state %d, want its own %d", cycle, k, st.committed, m)
				}
			} else {
				if st.committed != 0 || st.next != 0 || st.full {
					t.Fatalf("cycle %d: %v (new, or a new incarnation) got a used state %+v", cycle, k, st)
				}
				mark++
				st.committed = mark
				st.ring[0] = ringSample{committed: mark} // the ring goes with the state
			}
			now[k] = st.committed
		}
		scratch = w.done(gs)
		// what is kept: the states in order, each one's topic from the runs
		if len(gs.parts) != len(parts) {
			t.Fatalf("cycle %d: %d states kept, want %d", cycle, len(gs.parts), len(parts))
		}
		if n := len(gs.topics); n > 0 && int(gs.topics[n-1].end) != len(parts) {
			t.Fatalf("cycle %d: runs end at %d, want %d", cycle, gs.topics[n-1].end, len(parts))
		}
		c := runCursor{runs: gs.topics}
		for i, k := range parts {
			if r := c.at(i); r.name != k.topic || r.id != ids[k.topic] || gs.parts[i].partition != k.p ||
				gs.parts[i].ring[0].committed != gs.parts[i].committed {
				t.Fatalf("cycle %d: state %d is %s/%s %d, want %v of %s", cycle, i, r.name, r.id, gs.parts[i].partition, k, ids[k.topic])
			}
		}
		if !slices.IsSortedFunc(gs.topics, func(a, b topicRun) int { return cmpTP(a.name, 0, b.name, 0) }) {
			t.Fatalf("cycle %d: runs not in topic order: %v", cycle, gs.topics)
		}
		last, lastID = now, maps.Clone(ids)
	}
}

// A group's kept commits give back the read they were kept from: every commit, in its order, with its topic, for
// sorted reads and for a timeline's unsorted one (a topic in several runs), reusing their arrays across reads.
func TestKeptCommitsGiveBackTheRead(t *testing.T) {
	if s := unsafe.Sizeof(keptCommit{}); s != 16 {
		t.Errorf("keptCommit is %d B, want 16", s)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	gs := &groupState{}
	var scratch []CommittedOffset
	for round := range 300 {
		var offs []CommittedOffset
		for range rng.IntN(30) {
			offs = append(offs, CommittedOffset{Topic: []string{"a", "b", "c"}[rng.IntN(3)], Partition: rng.Int32N(8), Offset: rng.Int64N(1000)})
		}
		if round%2 == 0 {
			slices.SortStableFunc(offs, cmpOffset)
		}
		g := GroupObservation{Group: "g", State: "Stable", Offsets: slices.Clone(offs)}
		gs.keep(&g)
		var last GroupObservation
		last, scratch = gs.last(scratch)
		if len(offs) == 0 {
			offs = nil
		}
		if !slices.Equal(last.Offsets, offs) || last.Group != "g" || last.State != "Stable" {
			t.Fatalf("round %d: kept %v, got back %v", round, offs, last.Offsets)
		}
	}
	// a commit with a commit time is kept whole
	when := time.Unix(1_700_000_000, 0)
	g := GroupObservation{Group: "g", Offsets: []CommittedOffset{{Topic: "a", Partition: 1, Offset: 5, CommitTime: when}}}
	gs.keep(&g)
	if last, _ := gs.last(nil); !slices.Equal(last.Offsets, g.Offsets) || gs.kept != nil || gs.keptTopics != nil {
		t.Fatalf("kept whole: got back %v, kept %v %v", last.Offsets, gs.kept, gs.keptTopics)
	}
}
