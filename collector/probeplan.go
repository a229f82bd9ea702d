package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
)

// probePlan is what the probe topic needs so that every live broker leads at least one of its partitions: partitions
// to add (their replica lists, first the preferred leader), replica reassignments (KIP-455) and preferred leader
// elections (KIP-460), in that order.
type probePlan struct {
	add      [][]int32
	reassign map[int32][]int32
	elect    []int32
}

func (p probePlan) empty() bool { return len(p.add) == 0 && len(p.reassign) == 0 && len(p.elect) == 0 }

// planProbeTopic returns the smallest change to the probe topic's layout (brokers live now, parts as the cluster
// reports them) after which each live broker is the preferred leader of at least one partition and leads it, with
// replicas on distinct racks where the cluster has racks. Like kminion's end-to-end topic planner, but it moves as
// little as it can, in this order of preference for a broker b that leads nothing by preference:
//
//  1. a partition that already has b as a replica and whose preferred leader is gone (not live) or prefers more
//     than one partition: b is moved to the front of its replica list (a reordering: no data moves);
//  2. a partition whose preferred leader is gone: b replaces it at the front (one replica copies the partition);
//  3. a new partition with b first and min(rf, live brokers) replicas in all: nothing existing moves.
//
// Partitions under reassignment are left alone. A broker that is down keeps its replicas (it may come back; a
// partition whose preferred leader is gone is led by another in-sync replica meanwhile and is donated to the next
// broker that joins), so stopping and starting a broker moves nothing: its partition is handed back by a preferred
// leader election once it is in sync again. Followers are chosen on racks the partition does not use yet, then by
// fewest replicas, then by id; an existing partition whose live replicas share a rack while a live broker of an
// unused rack exists has such replicas moved there, one by one, until none share a rack or no unused rack is left. Every partition whose preferred leader is live, in
// sync and not leading is elected.
func planProbeTopic(brokers []topicadmin.BrokerInfo, parts []topicadmin.PartitionLayout, rf int) probePlan {
	if len(brokers) == 0 {
		return probePlan{reassign: map[int32][]int32{}}
	}
	l := newProbeLayout(brokers, parts)
	rf = max(1, min(rf, len(brokers)))
	for _, b := range brokers {
		if l.owns[b.ID] == 0 && !l.reorder(b.ID) && !l.takeOver(b.ID) {
			l.addPartition(b.ID, rf)
		}
	}
	l.spreadRacks()
	l.elect()
	return l.plan
}

// probeLayout is the probe topic's layout while planProbeTopic changes it: the replica lists as planned so far and
// the counts the phases choose by, kept in step by set and addPartition.
type probeLayout struct {
	brokers []topicadmin.BrokerInfo
	rack    map[int32]string             // live broker → its rack ("" without racks)
	racks   map[string]bool              // the live brokers' racks
	parts   []topicadmin.PartitionLayout // as the cluster reports them, by partition id
	assign  map[int32][]int32            // partition → replica list as planned
	load    map[int32]int                // broker → replicas it holds as planned
	owns    map[int32]int                // broker → partitions it is the preferred leader of as planned
	plan    probePlan
}

func newProbeLayout(brokers []topicadmin.BrokerInfo, parts []topicadmin.PartitionLayout) *probeLayout {
	l := &probeLayout{brokers: brokers, rack: make(map[int32]string, len(brokers)), racks: map[string]bool{},
		parts: slices.Clone(parts), assign: make(map[int32][]int32, len(parts)), load: map[int32]int{}, owns: map[int32]int{},
		plan: probePlan{reassign: map[int32][]int32{}}}
	for _, b := range brokers {
		l.rack[b.ID] = b.Rack
		if b.Rack != "" {
			l.racks[b.Rack] = true
		}
	}
	sort.Slice(l.parts, func(i, j int) bool { return l.parts[i].ID < l.parts[j].ID })
	for _, p := range l.parts {
		l.assign[p.ID] = slices.Clone(p.Replicas)
		for _, r := range p.Replicas {
			l.load[r]++
		}
		if len(p.Replicas) > 0 {
			l.owns[p.Replicas[0]]++
		}
	}
	return l
}

func (l *probeLayout) live(id int32) bool { _, ok := l.rack[id]; return ok }

// movable reports whether the planner may change partition p: not under reassignment, with replicas.
func (l *probeLayout) movable(p topicadmin.PartitionLayout) bool {
	return !p.Reassigning && len(l.assign[p.ID]) > 0
}

// set plans replica list rs for partition id.
func (l *probeLayout) set(id int32, rs []int32) {
	old := l.assign[id]
	for _, r := range old {
		l.load[r]--
	}
	if len(old) > 0 {
		l.owns[old[0]]--
	}
	for _, r := range rs {
		l.load[r]++
	}
	l.owns[rs[0]]++
	l.assign[id] = rs
	l.plan.reassign[id] = rs
}

// reorder is phase 1 for broker b: it moves b to the front of a partition it already replicates whose preferred
// leader is gone or, failing that, prefers more than one partition. No data moves. It reports whether it did.
func (l *probeLayout) reorder(b int32) bool {
	for pass := 0; pass < 2; pass++ {
		for _, p := range l.parts {
			rs := l.assign[p.ID]
			if !l.movable(p) || !slices.Contains(rs, b) {
				continue
			}
			pref := rs[0]
			if (pass == 0 && !l.live(pref)) || (pass == 1 && l.live(pref) && l.owns[pref] > 1) {
				l.set(p.ID, append([]int32{b}, slices.DeleteFunc(slices.Clone(rs), func(r int32) bool { return r == b })...))
				return true
			}
		}
	}
	return false
}

// takeOver is phase 2 for broker b: b replaces the gone preferred leader of a partition (one replica copies it), the
// partition keeping its size and its live followers. It reports whether it did.
func (l *probeLayout) takeOver(b int32) bool {
	for _, p := range l.parts {
		rs := l.assign[p.ID]
		if !l.movable(p) || l.live(rs[0]) {
			continue
		}
		l.set(p.ID, append([]int32{b}, l.followers(b, rs[1:], len(rs)-1)...))
		return true
	}
	return false
}

// addPartition is phase 3 for broker b: a new partition with b first and rf replicas in all.
func (l *probeLayout) addPartition(b int32, rf int) {
	rs := append([]int32{b}, l.followers(b, nil, rf-1)...)
	for _, r := range rs {
		l.load[r]++
	}
	l.owns[b]++
	l.plan.add = append(l.plan.add, rs)
}

// followers returns n followers for a partition led by lead: the live brokers of keep first (in order), then the
// best other live brokers: on a rack the partition does not use yet, then holding the fewest replicas, then by id.
// Fewer than n when there are not enough live brokers.
func (l *probeLayout) followers(lead int32, keep []int32, n int) []int32 {
	out := []int32{lead}
	used := map[string]bool{l.rack[lead]: true}
	for _, r := range keep {
		if len(out) == n+1 || r == lead || !l.live(r) || slices.Contains(out, r) {
			continue
		}
		out = append(out, r)
		used[l.rack[r]] = true
	}
	cands := make([]int32, 0, len(l.brokers))
	for _, b := range l.brokers {
		if !slices.Contains(out, b.ID) {
			cands = append(cands, b.ID)
		}
	}
	for len(out) < n+1 && len(cands) > 0 {
		sort.SliceStable(cands, func(i, j int) bool {
			a, b := cands[i], cands[j]
			if ua, ub := len(l.racks) > 1 && used[l.rack[a]], len(l.racks) > 1 && used[l.rack[b]]; ua != ub {
				return !ua
			}
			if l.load[a] != l.load[b] {
				return l.load[a] < l.load[b]
			}
			return a < b
		})
		out = append(out, cands[0])
		used[l.rack[cands[0]]] = true
		cands = cands[1:]
	}
	return out[1:]
}

// spreadRacks gives each existing partition at most one live replica per rack while a live broker of a rack it does
// not use exists: the last replica on a shared rack moves to the least loaded such broker.
func (l *probeLayout) spreadRacks() {
	if len(l.racks) < 2 {
		return
	}
	for _, p := range l.parts {
		if !l.movable(p) {
			continue
		}
		for l.spreadOne(p.ID) {
		}
	}
}

// spreadOne moves one replica of partition id off a rack it shares, and reports whether it did.
func (l *probeLayout) spreadOne(id int32) bool {
	rs := l.assign[id]
	seen := map[string]bool{}
	dup := -1
	for i, r := range rs {
		if !l.live(r) {
			continue
		}
		if seen[l.rack[r]] {
			dup = i
		}
		seen[l.rack[r]] = true
	}
	if dup <= 0 {
		return false
	}
	var best int32 = -1
	for _, c := range l.brokers {
		if seen[c.Rack] || slices.Contains(rs, c.ID) {
			continue
		}
		if best < 0 || l.load[c.ID] < l.load[best] {
			best = c.ID
		}
	}
	if best < 0 {
		return false
	}
	nrs := slices.Clone(rs)
	nrs[dup] = best
	l.set(id, nrs)
	return true
}

// elect plans a preferred leader election for every partition whose preferred leader is live, in sync and not
// leading. A reassignment that only reordered takes effect at once; one that adds the preferred replica is elected
// on a later reconcile, once that replica is in sync.
func (l *probeLayout) elect() {
	for _, p := range l.parts {
		rs := l.assign[p.ID]
		if p.Reassigning || len(rs) == 0 || !l.live(rs[0]) || p.Leader == rs[0] || !slices.Contains(p.ISR, rs[0]) {
			continue
		}
		if _, moved := l.plan.reassign[p.ID]; moved && !slices.Contains(p.Replicas, rs[0]) {
			continue
		}
		l.plan.elect = append(l.plan.elect, p.ID)
	}
}

// probeTopicAdmin is what the planner needs from Kafka (internal/kafka/topicadmin's Admin satisfies it).
type probeTopicAdmin interface {
	Layout(topic string) ([]topicadmin.BrokerInfo, []topicadmin.PartitionLayout, error)
	AddPartitions(topic string, total int32, replicas [][]int32) error
	Reassign(topic string, moves map[int32][]int32) error
	ElectPreferred(topic string, partitions []int32) error
}

// probePlanner reconciles the probe topic's layout every interval (planProbeTopic), so that a broker that joins is
// probed within one interval and one that leaves stops being probed (its partitions are led by others).
type probePlanner struct {
	admin    probeTopicAdmin
	topic    string
	rf       int
	interval time.Duration
	settle   time.Duration // how long one reconcile waits for new replicas to get in sync before electing them
	metrics  *Metrics
	log      *slog.Logger
	// added is called after partitions were added (the probe consumer re-joins to be assigned them); assigned with
	// the topic's partition count at every reconcile (the consumer re-joins if it holds fewer).
	added    func()
	assigned func(partitions int)
}

// run reconciles at once and then every interval until ctx ends.
func (pl *probePlanner) run(ctx context.Context) error {
	t := time.NewTicker(pl.interval)
	defer t.Stop()
	for {
		if err := pl.reconcile(ctx); err != nil && ctx.Err() == nil {
			pl.metrics.ProbePlanErrors.Inc()
			pl.log.Warn("probe topic reconcile", "topic", pl.topic, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reconcile applies one plan. A partition it handed to a broker that was not among its replicas is elected once
// that replica is in sync: reconcile polls every 500 ms for up to settle, so that the broker leads within this
// reconcile; later reconciles elect it otherwise.
func (pl *probePlanner) reconcile(ctx context.Context) error {
	brokers, parts, err := pl.admin.Layout(pl.topic)
	if err != nil {
		return err
	}
	if pl.assigned != nil {
		pl.assigned(len(parts))
	}
	plan := planProbeTopic(brokers, parts, pl.rf)
	if plan.empty() {
		return nil
	}
	err = pl.apply(plan, len(parts))
	catching := map[int32]int32{} // partition → its new preferred leader, copying data
	for _, p := range parts {
		if rs, ok := plan.reassign[p.ID]; ok && !slices.Contains(p.Replicas, rs[0]) {
			catching[p.ID] = rs[0]
		}
	}
	for deadline := time.Now().Add(pl.settle); len(catching) > 0 && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
		_, now, lerr := pl.admin.Layout(pl.topic)
		if lerr != nil {
			return errors.Join(err, lerr)
		}
		var elect []int32
		for _, p := range now {
			want, ok := catching[p.ID]
			switch {
			case !ok:
			case p.Leader == want:
				delete(catching, p.ID)
			case !p.Reassigning && slices.Contains(p.ISR, want):
				elect = append(elect, p.ID)
			}
		}
		if len(elect) > 0 {
			err = errors.Join(err, pl.apply(probePlan{elect: elect}, len(now)))
		}
	}
	return err
}

func (pl *probePlanner) apply(plan probePlan, have int) error {
	var errs []error
	if len(plan.add) > 0 {
		if err := pl.admin.AddPartitions(pl.topic, int32(have+len(plan.add)), plan.add); err != nil {
			errs = append(errs, err)
		} else {
			pl.metrics.ProbePlanActions.WithLabelValues("add_partition").Add(float64(len(plan.add)))
			pl.log.Info("probe topic: partitions added", "topic", pl.topic, "replicas", fmt.Sprint(plan.add))
			if pl.added != nil {
				pl.added()
			}
		}
	}
	if len(plan.reassign) > 0 {
		if err := pl.admin.Reassign(pl.topic, plan.reassign); err != nil {
			errs = append(errs, err)
		} else {
			pl.metrics.ProbePlanActions.WithLabelValues("reassign").Add(float64(len(plan.reassign)))
			pl.log.Info("probe topic: replicas reassigned", "topic", pl.topic, "moves", fmt.Sprint(plan.reassign))
		}
	}
	if len(plan.elect) > 0 {
		if err := pl.admin.ElectPreferred(pl.topic, plan.elect); err != nil {
			errs = append(errs, err)
		} else {
			pl.metrics.ProbePlanActions.WithLabelValues("elect").Add(float64(len(plan.elect)))
			pl.log.Info("probe topic: preferred leaders elected", "topic", pl.topic, "partitions", fmt.Sprint(plan.elect))
		}
	}
	return errors.Join(errs...)
}
