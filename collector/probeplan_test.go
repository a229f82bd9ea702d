package collector

import (
	"reflect"
	"testing"

	"github.com/tidemark/tidemark/internal/kafka"
)

// TestPlanProbeTopic: one row per situation the planner meets, each with the exact plan; the comment says why it is
// the smallest change that gets every live broker a partition it leads.
func TestPlanProbeTopic(t *testing.T) {
	bs := func(ids ...int32) []kafka.BrokerInfo {
		out := make([]kafka.BrokerInfo, len(ids))
		for i, id := range ids {
			out[i] = kafka.BrokerInfo{ID: id}
		}
		return out
	}
	racked := func(pairs ...any) []kafka.BrokerInfo {
		var out []kafka.BrokerInfo
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, kafka.BrokerInfo{ID: int32(pairs[i].(int)), Rack: pairs[i+1].(string)})
		}
		return out
	}
	// part: replicas, leader, ISR (nil: all replicas in sync).
	part := func(id int32, leader int32, replicas []int32, isr ...int32) kafka.PartitionLayout {
		if isr == nil {
			isr = replicas
		}
		return kafka.PartitionLayout{ID: id, Replicas: replicas, Leader: leader, ISR: isr}
	}
	spread := []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 3, []int32{3, 1, 2})}
	tests := []struct {
		name    string
		brokers []kafka.BrokerInfo
		parts   []kafka.PartitionLayout
		rf      int
		want    probePlan
	}{
		// As created (EnsureTopic with SpreadLeaders): each broker leads the partition it prefers.
		{name: "in shape", brokers: bs(1, 2, 3), parts: spread, rf: 3, want: probePlan{}},
		// Broker 3 stopped: Kafka moved partition 2 to broker 1 (in sync). Every live broker leads one; broker 3 keeps
		// its replicas (it may be back), nothing moves, and broker 3 is no longer probed.
		{name: "broker stopped", brokers: bs(1, 2), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}, 1, 2), part(1, 2, []int32{2, 3, 1}, 2, 1), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{}},
		// Broker 3 back and in sync but not leading its partition: a preferred leader election hands it back.
		{name: "broker back in sync", brokers: bs(1, 2, 3), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 1, []int32{3, 1, 2})},
			want:  probePlan{elect: []int32{2}}},
		// Back but still catching up: an election would fail; the next reconcile makes it.
		{name: "broker back, not in sync yet", brokers: bs(1, 2, 3), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{}},
		// A fourth broker joins: no partition can be given to it without taking one from a broker that leads only
		// it, so a new partition led by it is added (nothing existing moves). Followers: fewest replicas, then id.
		{name: "broker joins", brokers: bs(1, 2, 3, 4), parts: spread, rf: 3,
			want: probePlan{add: [][]int32{{4, 1, 2}}}},
		// Broker 3 left for good and broker 4 joined: partition 2, whose preferred leader is gone, is handed to broker
		// 4 (one replica copies it); it is elected once broker 4 is in sync, not in this plan.
		{name: "broker replaced", brokers: bs(1, 2, 4), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}, 1, 2), part(1, 2, []int32{2, 3, 1}, 2, 1), part(2, 1, []int32{3, 1, 2}, 1, 2)},
			want:  probePlan{reassign: map[int32][]int32{2: {4, 1, 2}}}},
		// Broker 4 already replicates the orphaned partition: reordering moves no data, and it is elected at once.
		{name: "reorder an orphan", brokers: bs(1, 2, 4), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 4}), part(1, 2, []int32{2, 4, 1}), part(2, 1, []int32{3, 4, 1}, 4, 1)},
			want:  probePlan{reassign: map[int32][]int32{2: {4, 3, 1}}, elect: []int32{2}}},
		// Broker 1 prefers two partitions and broker 2 none, but replicates one of them: reordered, elected.
		{name: "reorder a surplus", brokers: bs(1, 2), rf: 2,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2}), part(1, 1, []int32{1, 2})},
			want:  probePlan{reassign: map[int32][]int32{0: {2, 1}}, elect: []int32{0}}},
		// Racks: the joining broker 4 (rack b) gets followers on rack a first (one of each rack per partition), and
		// partition 0, whose two live replicas share rack a while broker 3 is on rack b, has its last one moved.
		{name: "racks", brokers: racked(1, "a", 2, "a", 3, "b", 4, "b"), rf: 2,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2}), part(1, 2, []int32{2, 3}), part(2, 3, []int32{3, 1})},
			want:  probePlan{add: [][]int32{{4, 1}}, reassign: map[int32][]int32{0: {1, 4}}}},
		// A partition under reassignment is never touched, even when its preferred leader is gone.
		{name: "reassignment in progress", brokers: bs(1, 2, 4), rf: 3,
			parts: []kafka.PartitionLayout{part(0, 1, []int32{1, 2, 3}), part(1, 2, []int32{2, 3, 1}),
				{ID: 2, Replicas: []int32{3, 1, 2, 4}, ISR: []int32{1, 2}, Leader: 1, Reassigning: true}},
			want: probePlan{add: [][]int32{{4, 1, 2}}}},
		// One broker: replication is capped at the live brokers.
		{name: "single broker joins", brokers: bs(1, 2), rf: 3, parts: []kafka.PartitionLayout{part(0, 1, []int32{1})},
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
		})
	}
}
