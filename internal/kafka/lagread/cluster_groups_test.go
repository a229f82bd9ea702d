package lagread

import (
	"fmt"
	"testing"

	"github.com/tidemark/tidemark/lagexporter"
)

// TestMergeListingsCoordinatorMoved: broker 2 coordinated g and stopped; its __consumer_offsets partition is now led
// by broker 1, which lists g. g is one group, coordinated by broker 1, without error (its offsets are read there);
// h, which only broker 2 listed, stays, marked stale.
func TestMergeListingsCoordinatorMoved(t *testing.T) {
	last := map[int32][]lagexporter.GroupObservation{2: {{Group: "g", State: "Empty"}, {Group: "h", State: "Empty"}}}
	res := map[int32]groupsResult{
		1: {ok: true, groups: []lagexporter.GroupObservation{{Group: "g", State: "Empty"}}},
		2: {ok: false},
		3: {ok: true},
	}
	out, coordOf, _ := mergeListings([]int32{1, 2, 3}, res, last)
	got := fmt.Sprint(out)
	want := fmt.Sprint([]lagexporter.GroupObservation{{Group: "g", State: "Empty"},
		{Group: "h", State: "Empty", Error: "coordinator broker 2 did not answer ListGroups"}})
	if got != want {
		t.Errorf("groups\n got %s\nwant %s", got, want)
	}
	if coordOf["g"] != 1 || coordOf["h"] != 2 {
		t.Errorf("coordinators %v, want g: 1, h: 2", coordOf)
	}
	if len(last[2]) != 1 || last[2][0].Group != "h" {
		t.Errorf("broker 2's kept listing %v, want only h", last[2])
	}
	// broker 2 leaves the metadata: its listing is forgotten
	if out, _, _ := mergeListings([]int32{1, 3}, map[int32]groupsResult{1: res[1], 3: res[3]}, last); len(out) != 1 || len(last) != 2 {
		t.Errorf("after broker 2 left: groups %v, kept listings of %d brokers, want g alone and 2", out, len(last))
	}
}
