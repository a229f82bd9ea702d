package lagexporter

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A snapshot's groups have their PartitionLags cut from shared chunks (Evaluator.partitionLags): each group's slice
// must be its own (no two overlap, none can grow into another's by append), a group without partitions keeps a
// non-nil empty slice (JSON "partitions": []), and the values are those of a group evaluated alone.
func TestGroupPartitionsCutFromChunks(t *testing.T) {
	cfg := &Config{Cluster: "test"}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	obs := &Observation{Time: at}
	for tn := range 3 {
		to := TopicObservation{Topic: fmt.Sprintf("t%d", tn), ID: fmt.Sprint(tn)}
		for p := range 700 { // groups of 700 partitions: a chunk of 2,048 holds 2 of them, its tail is left
			to.Partitions = append(to.Partitions, PartitionObservation{Partition: int32(p), HighWatermark: 100, LastStable: 100})
		}
		obs.Topics = append(obs.Topics, to)
	}
	for g := range 9 {
		gr := GroupObservation{Group: fmt.Sprintf("g%d", g), State: "Empty"}
		if g != 4 { // g4 has no commits nor members: no partitions
			for p := range 700 {
				gr.Offsets = append(gr.Offsets, CommittedOffset{Topic: fmt.Sprintf("t%d", g%3), Partition: int32(p), Offset: int64(g)})
			}
		}
		obs.Groups = append(obs.Groups, gr)
	}
	snap := NewEvaluator(cfg).Apply(obs)
	type span struct{ from, to uintptr }
	var spans []span
	for _, g := range snap.Groups {
		want := 700
		if g.Group == "g4" {
			want = 0
			if g.Partitions == nil {
				t.Errorf("g4: Partitions nil, want empty")
			}
			if b, _ := json.Marshal(g); !strings.Contains(string(b), `"partitions":[]`) {
				t.Errorf("g4: JSON %s, want partitions []", b)
			}
		}
		if len(g.Partitions) != want || cap(g.Partitions) != want {
			t.Fatalf("%s: %d partitions, capacity %d, want %d", g.Group, len(g.Partitions), cap(g.Partitions), want)
		}
		for i, p := range g.Partitions {
			if p.Partition != int32(i) || p.Committed != int64(g.Group[1]-'0') || p.Lag != 100-p.Committed {
				t.Fatalf("%s: partition %d is %+v", g.Group, i, p)
			}
		}
		if want > 0 {
			from := uintptr(unsafe.Pointer(&g.Partitions[0]))
			spans = append(spans, span{from, from + uintptr(want)*unsafe.Sizeof(PartitionLag{})})
		}
	}
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			if a.from < b.to && b.from < a.to {
				t.Fatalf("two groups' partitions overlap: %v %v", a, b)
			}
		}
	}
}
