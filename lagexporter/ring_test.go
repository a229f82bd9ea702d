package lagexporter_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestWindowTimesUnderChurn checks the evaluator's compact status windows (sample times kept once per group cycle,
// a partition's own only once it misses one of its group's samples) against the plain definition: every
// group-partition's window is the last status.window (committed, lag, observation time) samples of the cycles in
// which its lag was known and fresh, since its state was made. The catch-up fit reads every sample's lag and time,
// so it is compared exactly, cycle by cycle, over a random churn of partitions that become unknown or stale, leave
// the group's scope and come back, topics re-created under the same name, groups whose commits cannot be read,
// partitions added and removed, and irregular cycle times. A group whose commits cannot be read shows the commits of
// its last good read (kept compactly, or whole for a share group's share lags), which is checked too.
func TestWindowTimesUnderChurn(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { windowChurn(t, seed) })
	}
}

type refSample struct {
	lag int64
	at  time.Time
}

type refKey struct {
	group, topic string
	partition    int32
}

func windowChurn(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	cfg := &Config{Cluster: "test"}
	cfg.SetDefaults()
	cfg.Status.Window = 4 + int(seed%4)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ev := NewEvaluator(cfg)
	topics := []string{"a", "b"}
	ids := map[string]int{"a": 1, "b": 1}
	parts := map[string]int32{"a": 4, "b": 3}
	hw := map[refKey]int64{}
	committed := map[refKey]int64{}
	groups := []string{"g1", "g2", "g3", "s1"} // s1: a share group, with the broker's share lags
	lastGood := map[string]map[refKey]CommittedOffset{}
	ref := map[refKey][]refSample{}
	refID := map[refKey]string{}
	now := time.Unix(1_700_000_000, 0)
	checked, missed, staleChecked := 0, 0, 0
	for cycle := 0; cycle < 300; cycle++ {
		now = now.Add(time.Duration(1+rng.IntN(40000)) * time.Millisecond)
		obs := &Observation{Time: now, Cluster: "test"}
		for _, tp := range topics {
			if rng.IntN(40) == 0 {
				ids[tp]++ // deleted and re-created: a new incarnation
				for k := range hw {
					if k.topic == tp {
						delete(hw, k)
					}
				}
			}
			if rng.IntN(30) == 0 {
				continue // absent this cycle: out of every group's scope
			}
			if rng.IntN(25) == 0 {
				parts[tp] = int32(2 + rng.IntN(4)) // partitions added or (in a timeline) removed
			}
			to := TopicObservation{Topic: tp, ID: fmt.Sprintf("%s-%d", tp, ids[tp])}
			for p := int32(0); p < parts[tp]; p++ {
				if rng.IntN(12) == 0 {
					to.Partitions = append(to.Partitions, PartitionObservation{Partition: p, Leader: -1,
						Error: "LEADER_NOT_AVAILABLE", ErrorCode: "LEADER_NOT_AVAILABLE"})
					continue
				}
				k := refKey{"", tp, p}
				hw[k] += int64(rng.IntN(500))
				to.Partitions = append(to.Partitions, PartitionObservation{Partition: p, HighWatermark: hw[k], LastStable: hw[k]})
			}
			obs.Topics = append(obs.Topics, to)
		}
		for _, g := range groups {
			if rng.IntN(10) == 0 {
				gob := GroupObservation{Group: g, Error: "COORDINATOR_NOT_AVAILABLE"}
				if g == "s1" {
					gob.GroupType = GroupShare // the group list names the type even when the offsets cannot be read
				}
				obs.Groups = append(obs.Groups, gob)
				continue
			}
			if rng.IntN(50) == 0 {
				delete(lastGood, g)
				continue // the group is gone this cycle
			}
			gob := GroupObservation{Group: g, State: "Empty"}
			if g == "s1" {
				gob.GroupType = GroupShare
			}
			lastGood[g] = map[refKey]CommittedOffset{}
			for _, tp := range topics {
				if (g == "g3" && tp == "b") || rng.IntN(20) == 0 {
					continue // a topic the group does not (or no longer) commit on
				}
				for p := int32(0); p < parts[tp]; p++ {
					k := refKey{g, tp, p}
					if rng.IntN(8) == 0 {
						continue // no commit on this partition
					}
					committed[k] = min(committed[k]+int64(rng.IntN(450)), hw[refKey{"", tp, p}])
					c := CommittedOffset{Topic: tp, Partition: p, Offset: committed[k]}
					if g == "s1" {
						sl := int64(rng.IntN(300))
						c.ShareLag = &sl
					}
					gob.Offsets = append(gob.Offsets, c)
					lastGood[g][k] = c
				}
			}
			obs.Groups = append(obs.Groups, gob)
		}

		snap := ev.Apply(obs)
		ids := map[string]string{}
		for _, to := range snap.Topics {
			ids[to.Topic] = to.ID
		}
		next := map[refKey][]refSample{}
		nextID := map[refKey]string{}
		for _, gl := range snap.Groups {
			for _, pl := range gl.Partitions {
				k := refKey{gl.Group, pl.Topic, pl.Partition}
				if gl.Error != "" { // stale: the last good read's commits
					c, has := lastGood[gl.Group][k]
					if pl.HasCommit != has || pl.Committed != c.Offset {
						t.Fatalf("cycle %d, stale %s %s/%d: commit %v %d, want %v %d", cycle, gl.Group, pl.Topic,
							pl.Partition, pl.HasCommit, pl.Committed, has, c.Offset)
					}
					if c.ShareLag != nil && pl.Known && pl.Lag != min(pl.RawLag, *c.ShareLag) {
						t.Fatalf("cycle %d, stale share group %s/%d: lag %d, want min(%d, share lag %d)", cycle,
							pl.Topic, pl.Partition, pl.Lag, pl.RawLag, *c.ShareLag)
					}
					staleChecked++
				}
				w := ref[k]
				if refID[k] != ids[pl.Topic] {
					w = nil // a new incarnation starts a new window
				}
				var want CatchUp
				if pl.Known && !pl.Flags.Has(FlagStale) {
					w = append(w, refSample{pl.Lag, snap.Time})
					if len(w) > cfg.Status.Window {
						w = w[len(w)-cfg.Status.Window:]
					}
					samples := make([]Sample, len(w))
					for i, s := range w {
						samples[i] = Sample{Lag: s.lag, At: s.at}
					}
					want = EstimateCatchUp(samples)
					checked++
				} else if len(w) > 0 {
					missed++
				}
				if pl.CatchUp != want {
					t.Fatalf("cycle %d, %s %s/%d: catch-up %+v, want %+v from the window %v", cycle, gl.Group,
						pl.Topic, pl.Partition, pl.CatchUp, want, w)
				}
				next[k], nextID[k] = w, ids[pl.Topic]
			}
		}
		ref, refID = next, nextID
	}
	if checked < 1000 || missed < 50 || staleChecked < 100 {
		t.Fatalf("the churn exercised too little: %d windows checked, %d samples missed by a partition with a window, "+
			"%d stale commits checked", checked, missed, staleChecked)
	}
}
