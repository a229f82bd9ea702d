package collector

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
)

// TestPlanProbeTopic: one row per situation the planner meets, each with the exact plan; the comment says why it is
// the smallest change that gets every live broker a partition it leads.
func TestPlanProbeTopic(t *testing.T) {
	bs := func(ids ...int32) []topicadmin.BrokerInfo {
		out := make([]topicadmin.BrokerInfo, len(ids))
		for i, id := range ids {
			out[i] = topicadmin.BrokerInfo{ID: id}
		}
		return out
	}
	racked := func(pairs ...any) []topicadmin.BrokerInfo {
		var out []topicadmin.BrokerInfo
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, topicadmin.BrokerInfo{ID: int32(pairs[i].(int)), Rack: pairs[i+1].(string)})
		}
		return out
	}
	// part: replicas, leader, ISR (nil: all replicas in sync).
	part := func(id int32, leader int32, replicas []int32, isr ...int32) topicadmin.PartitionLayout {
		if isr == nil {
			isr = replicas
		}
		return topicadmin.PartitionLayout{ID: id, Replicas: replicas, Leader: leader, ISR: isr}
	}
	spread := []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 3, []int32{3, 1, 2})}
	tests := []struct {
		name    string
		brokers []topicadmin.BrokerInfo
		parts   []topicadmin.PartitionLayout
		rf      int
		want    probePlan
	}{
		// As created (topicadmin.Ensure with SpreadLeaders): each broker leads the partition it prefers.
		{name: "in shape", brokers: bs(1, 2, 3), parts: spread, rf: 3, want: probePlan{}},
		// Broker 3 stopped: Kafka moved partition 2 to broker 1 (in sync). Every live broker leads one; broker 3 keeps
		// its replicas (it may be back), nothing moves, and broker 3 is no longer probed.
		{name: "broker stopped", brokers: bs(1, 2), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}, 1, 2), part(1, 2, []int32{2, 3, 1}, 2, 1), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{}},
		// Broker 3 back and in sync but not leading its partition: a preferred leader election hands it back.
		{name: "broker back in sync", brokers: bs(1, 2, 3), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 1, []int32{3, 1, 2})},
			want:  probePlan{elect: []int32{2}}},
		// Back but still catching up: an election would fail; the next reconcile makes it.
		{name: "broker back, not in sync yet", brokers: bs(1, 2, 3), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{}},
		// A fourth broker joins: no partition can be given to it without taking one from a broker that leads only
		// it, so a new partition led by it is added (nothing existing moves). Followers: fewest replicas, then id.
		{name: "broker joins", brokers: bs(1, 2, 3, 4), parts: spread, rf: 3,
			want: probePlan{add: [][]int32{{4, 1, 2}}}},
		// Broker 3 left for good and broker 4 joined: partition 2, whose preferred leader is gone, is handed to broker
		// 4 (one replica copies it); it is elected once broker 4 is in sync, not in this plan.
		{name: "broker replaced", brokers: bs(1, 2, 4), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}, 1, 2), part(1, 2, []int32{2, 3, 1}, 2, 1), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{reassign: map[int32][]int32{2: {4, 1, 2}}}},
		// Broker 4 already replicates the orphaned partition: reordering moves no data, and it is elected at once.
		{name: "reorder an orphan", brokers: bs(1, 2, 4), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 4}), part(1, 2, []int32{2, 4, 1}), part(2, 1, []int32{3, 4, 1}, 4, 1)},
			want:  probePlan{reassign: map[int32][]int32{2: {4, 3, 1}}, elect: []int32{2}}},
		// Broker 1 prefers two partitions and broker 2 none, but replicates one of them: reordered, elected.
		{name: "reorder a surplus", brokers: bs(1, 2), rf: 2,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2}), part(1, 1, []int32{1, 2})},
			want:  probePlan{reassign: map[int32][]int32{0: {2, 1}}, elect: []int32{0}}},
		// Racks: the joining broker 4 (rack b) gets followers on rack a first (one of each rack per partition), and
		// partition 0, whose two live replicas share rack a while broker 3 is on rack b, has its last one moved.
		{name: "racks", brokers: racked(1, "a", 2, "a", 3, "b", 4, "b"), rf: 2,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2}), part(1, 2, []int32{2, 3}), part(2, 3, []int32{3, 1})},
			want:  probePlan{add: [][]int32{{4, 1}}, reassign: map[int32][]int32{0: {1, 4}}}},
		// A partition under reassignment is never touched, even when its preferred leader is gone.
		{name: "reassignment in progress", brokers: bs(1, 2, 4), rf: 3,
			parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}),
				{ID: 2, Replicas: []int32{3, 1, 2, 4}, ISR: []int32{1, 2}, Leader: 1, Reassigning: true}},
			want: probePlan{add: [][]int32{{4, 1, 2}}}},
		// One broker: replication is capped at the live brokers.
		{name: "single broker joins", brokers: bs(1, 2), rf: 3, parts: []topicadmin.PartitionLayout{part(0, 1, []int32{1})},
			want: probePlan{add: [][]int32{{2, 1}}}},
		{name: "no brokers", brokers: nil, parts: spread, rf: 3, want: probePlan{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planProbeTopic(tc.brokers, tc.parts, tc.rf)
			if len(got.reassign) == 0 {
				got.reassign = nil
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("plan\n got %+v\nwant %+v", got, tc.want)
			}
			if err := checkProbePlan(tc.brokers, tc.parts, tc.rf, got); err != nil {
				t.Error(err)
			}
		})
	}
}

// checkProbePlan checks what every plan must satisfy, whatever the layout: replica lists of distinct brokers, any
// new preferred leader live; new partitions of min(rf, live brokers) live replicas; reassignments only of partitions that exist and
// are not under reassignment, keeping their size unless fewer brokers are live; once applied, every live broker the preferred leader of at least one
// partition and no broker that was one before losing it; elections only of live, in-sync preferred leaders that are
// not leading and were replicas already.
func checkProbePlan(brokers []topicadmin.BrokerInfo, parts []topicadmin.PartitionLayout, rf int, plan probePlan) error {
	live := map[int32]bool{}
	for _, b := range brokers {
		live[b.ID] = true
	}
	if len(brokers) == 0 {
		if !plan.empty() {
			return fmt.Errorf("no live broker, plan %+v", plan)
		}
		return nil
	}
	byID := map[int32]topicadmin.PartitionLayout{}
	for _, p := range parts {
		byID[p.ID] = p
	}
	distinct := func(rs []int32) bool {
		c := slices.Clone(rs)
		slices.Sort(c)
		return len(slices.Compact(c)) == len(rs)
	}
	prefers := map[int32]int{}
	before := map[int32]int{}
	for _, p := range parts {
		if len(p.Replicas) > 0 {
			before[p.Replicas[0]]++
		}
		rs := p.Replicas
		if m, ok := plan.reassign[p.ID]; ok {
			rs = m
		}
		if len(rs) > 0 {
			prefers[rs[0]]++
		}
	}
	want := max(1, min(rf, len(brokers)))
	for i, rs := range plan.add {
		if len(rs) != want || !distinct(rs) {
			return fmt.Errorf("new partition %d: replicas %v, want %d distinct", i, rs, want)
		}
		for _, r := range rs {
			if !live[r] {
				return fmt.Errorf("new partition %d: replica %d is not live", i, r)
			}
		}
		prefers[rs[0]]++
	}
	for id, rs := range plan.reassign {
		p, ok := byID[id]
		switch {
		case !ok:
			return fmt.Errorf("reassignment of partition %d, which does not exist", id)
		case p.Reassigning:
			return fmt.Errorf("partition %d is under reassignment and was reassigned again", id)
		case !distinct(rs) || (!live[rs[0]] && rs[0] != p.Replicas[0]):
			// a new preferred leader is live; a gone one stays only where the move was for racks, not for it
			return fmt.Errorf("partition %d: %v reassigned to %v: want distinct replicas, a new preferred leader live", id, p.Replicas, rs)
		case len(rs) != len(p.Replicas) && (len(rs) != min(len(p.Replicas), len(brokers)) || slices.ContainsFunc(rs, func(r int32) bool { return !live[r] })):
			// a partition keeps its size, or (a gone replica replaced) shrinks only to the live brokers there are
			return fmt.Errorf("partition %d: %v reassigned to %v: want as many replicas, or every live broker", id, p.Replicas, rs)
		}
	}
	for _, b := range brokers {
		if prefers[b.ID] == 0 {
			return fmt.Errorf("live broker %d is the preferred leader of no partition after the plan %+v", b.ID, plan)
		}
	}
	for id, n := range before {
		if live[id] && n > 0 && prefers[id] == 0 {
			return fmt.Errorf("broker %d lost its only preferred partition", id)
		}
	}
	for _, id := range plan.elect {
		p := byID[id]
		pref := p.Replicas[0]
		if m, ok := plan.reassign[id]; ok {
			pref = m[0]
		}
		if p.Reassigning || !live[pref] || p.Leader == pref || !slices.Contains(p.ISR, pref) || !slices.Contains(p.Replicas, pref) {
			return fmt.Errorf("election of partition %d (%+v) for preferred leader %d", id, p, pref)
		}
	}
	return nil
}

// settle returns the layout once plan has taken effect and every live replica caught up: replica lists as planned,
// each partition led by its preferred leader when live (else by its first live replica), the live replicas in sync;
// a partition under reassignment stays as it was (the planner leaves it alone).
func settle(brokers []topicadmin.BrokerInfo, parts []topicadmin.PartitionLayout, plan probePlan) []topicadmin.PartitionLayout {
	live := map[int32]bool{}
	for _, b := range brokers {
		live[b.ID] = true
	}
	var out []topicadmin.PartitionLayout
	next := int32(0)
	lay := func(id int32, rs []int32) topicadmin.PartitionLayout {
		p := topicadmin.PartitionLayout{ID: id, Replicas: rs, Leader: -1}
		for _, r := range rs {
			if live[r] {
				p.ISR = append(p.ISR, r)
				if p.Leader < 0 {
					p.Leader = r
				}
			}
		}
		return p
	}
	for _, p := range parts {
		next = max(next, p.ID+1)
		if p.Reassigning {
			out = append(out, p)
			continue
		}
		rs := p.Replicas
		if m, ok := plan.reassign[p.ID]; ok {
			rs = m
		}
		out = append(out, lay(p.ID, rs))
	}
	for i, rs := range plan.add {
		out = append(out, lay(next+int32(i), rs))
	}
	return out
}

// randomProbeLayout draws a cluster of 1–7 live brokers (ids 1–9, on 0–3 racks) and a probe topic of 0–8 partitions
// whose replicas may name brokers that are gone, some under reassignment, with random leaders and ISRs.
func randomProbeLayout(r *rand.Rand) ([]topicadmin.BrokerInfo, []topicadmin.PartitionLayout, int) {
	racks := r.IntN(4)
	ids := r.Perm(9)[:1+r.IntN(7)]
	var brokers []topicadmin.BrokerInfo
	for _, id := range ids {
		b := topicadmin.BrokerInfo{ID: int32(id + 1)}
		if racks > 0 {
			b.Rack = string(rune('a' + r.IntN(racks)))
		}
		brokers = append(brokers, b)
	}
	var parts []topicadmin.PartitionLayout
	for id := range int32(r.IntN(9)) {
		n := 1 + r.IntN(3)
		var rs []int32
		for _, x := range r.Perm(9)[:n] {
			rs = append(rs, int32(x+1))
		}
		p := topicadmin.PartitionLayout{ID: id, Replicas: rs, Leader: rs[r.IntN(n)], Reassigning: r.IntN(8) == 0}
		for _, x := range rs {
			if r.IntN(3) > 0 {
				p.ISR = append(p.ISR, x)
			}
		}
		parts = append(parts, p)
	}
	return brokers, parts, 1 + r.IntN(3)
}

// checkRandomProbePlan plans the layout seed draws and checks the plan's invariants (checkProbePlan); once the plan
// has taken effect and the replicas caught up, planning again must change nothing.
func checkRandomProbePlan(t *testing.T, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	brokers, parts, rf := randomProbeLayout(r)
	plan := planProbeTopic(brokers, parts, rf)
	if err := checkProbePlan(brokers, parts, rf, plan); err != nil {
		t.Fatalf("seed %d: brokers %+v parts %+v rf %d: %v", seed, brokers, parts, rf, err)
	}
	settled := settle(brokers, parts, plan)
	if again := planProbeTopic(brokers, settled, rf); !again.empty() {
		t.Fatalf("seed %d: brokers %+v parts %+v rf %d: plan %+v, then on the settled layout %+v: %+v", seed, brokers, parts, rf, plan, settled, again)
	}
}

// FuzzPlanProbeTopic: checkRandomProbePlan over the layouts the fuzzer's seeds draw.
func FuzzPlanProbeTopic(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42, 1234} {
		f.Add(seed)
	}
	f.Fuzz(checkRandomProbePlan)
}

// TestPlanProbeTopicRandomLayouts: checkRandomProbePlan over 5,000 seeded layouts in every go test run.
func TestPlanProbeTopicRandomLayouts(t *testing.T) {
	for seed := range uint64(5000) {
		checkRandomProbePlan(t, seed)
	}
}
