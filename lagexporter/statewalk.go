package lagexporter

import "slices"

// stateWalk hands out a group's partition states in (topic, partition) order from last cycle's, sorted the same
// way. While the group's partitions are those of last cycle, states are used in place; from the first difference on
// the walk builds a new slice, carrying over by merge the states that still exist (and dropping the others: revoked
// or deleted partitions). A new state's ring comes from one allocation for the rest of the group.
type stateWalk struct {
	old        []gpState
	oldK, oldJ runCursor  // the topics of old, at k and at j
	runs       []topicRun // the topics of the states handed out
	k          int        // states handed out
	j          int        // next old state to consider once rebuilding
	rebuilt    []gpState  // nil while in place
	slab       []ringSample
	window     int
	n          int // partitions this cycle
}

// newStateWalk walks gs's states for n partitions this cycle; scratch is reused for the topics handed out.
func newStateWalk(gs *groupState, window, n int, scratch []topicRun) stateWalk {
	return stateWalk{old: gs.parts, oldK: runCursor{runs: gs.topics}, oldJ: runCursor{runs: gs.topics},
		runs: scratch[:0], window: window, n: n}
}

func (w *stateWalk) state(topic string, p int32, topicID string) *gpState {
	if n := len(w.runs); n == 0 || w.runs[n-1].name != topic {
		w.runs = append(w.runs, topicRun{name: topic, id: topicID})
	}
	w.runs[len(w.runs)-1].end = int32(w.k + 1)
	if w.rebuilt == nil && w.k < len(w.old) && w.old[w.k].partition == p {
		if t := w.oldK.at(w.k); t.name == topic {
			st := &w.old[w.k]
			w.k++
			w.fresh(st, t.id, topicID)
			return st
		}
	}
	if w.rebuilt == nil {
		w.rebuilt = make([]gpState, w.k, max(w.n, w.k+1))
		copy(w.rebuilt, w.old[:w.k])
		w.j = w.k
	}
	for w.j < len(w.old) && cmpTP(w.oldJ.at(w.j).name, w.old[w.j].partition, topic, p) < 0 {
		w.j++
	}
	var st gpState
	var oldID string
	if w.j < len(w.old) && w.old[w.j].partition == p && w.oldJ.at(w.j).name == topic {
		st, oldID = w.old[w.j], w.oldJ.at(w.j).id
		w.j++
	} else {
		st = gpState{partition: p}
	}
	w.rebuilt = append(w.rebuilt, st)
	w.k++
	ps := &w.rebuilt[len(w.rebuilt)-1]
	w.fresh(ps, oldID, topicID)
	return ps
}

// fresh gives st (last of topic incarnation oldID) a ring, and resets it for a new topic incarnation (as a new
// partition).
func (w *stateWalk) fresh(st *gpState, oldID, topicID string) {
	if st.ring != nil && oldID == topicID {
		return
	}
	*st = gpState{partition: st.partition}
	if len(w.slab) < w.window {
		w.slab = make([]ringSample, w.window*max(w.n-w.k+1, 1))
	}
	st.ring, w.slab = w.slab[:w.window:w.window], w.slab[w.window:]
}

// done leaves the group's states and their topics in gs for the next cycle, and returns the walk's scratch.
func (w *stateWalk) done(gs *groupState) []topicRun {
	if w.rebuilt != nil {
		gs.parts = w.rebuilt
	} else {
		clear(w.old[w.k:]) // partitions gone from the end
		gs.parts = w.old[:w.k]
	}
	if !slices.Equal(w.runs, gs.topics) {
		gs.topics = slices.Clone(w.runs)
	}
	return w.runs[:0]
}
