package lagexporter

import (
	"context"
	"fmt"
	"iter"
	"slices"
)

// observe reads one observation: metadata and groups, then committed offsets, then end offsets, then records. It
// also returns the invalid timestamps the records read this cycle met. On error (metadata or the group list could not
// be read at all) obs.Failed names the read that failed.
func (l *Loop) observe(ctx context.Context) (*Observation, map[TimestampProblem]uint64, error) {
	obs := &Observation{Cluster: l.cfg.Cluster}
	topics, err := l.cluster.Metadata(ctx)
	obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindMetadata)...)
	if topics == nil && err != nil {
		obs.Failed = ErrKindMetadata
		return obs, nil, fmt.Errorf("read topic metadata: %w", err)
	}
	groups, err := l.cluster.Groups(ctx)
	obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindGroups)...)
	if groups == nil && err != nil {
		obs.Failed = ErrKindGroups
		return obs, nil, fmt.Errorf("list groups: %w", err)
	}
	names, byName := l.allowGroups(obs, groups)
	// Committed offsets first (C03): an end offset read after a commit is >= that commit.
	if len(names) > 0 {
		l.readCommits(ctx, obs, names, byName)
	}
	if want := l.endOffsetTopics(obs, topics); len(want) > 0 {
		listed, err := l.cluster.ListOffsets(ctx, want)
		obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindListOffsets)...)
		obs.Topics = listed
	}
	obs.Time = l.now()

	var invalid map[TimestampProblem]uint64
	if *l.cfg.ReadRecordTimestamps {
		invalid = l.readRecords(ctx, obs)
	}
	return obs, invalid, nil
}

// allowGroups puts into obs.Groups the listed groups the configuration allows, and returns their names in order and
// each name's index in obs.Groups.
func (l *Loop) allowGroups(obs *Observation, groups []GroupObservation) ([]string, map[string]int) {
	names := make([]string, 0, len(groups))
	byName := make(map[string]int, len(groups))
	for _, g := range groups {
		if l.cfg.GroupAllowed(g.Group) {
			byName[g.Group] = len(obs.Groups)
			obs.Groups = append(obs.Groups, g)
			names = append(names, g.Group)
		}
	}
	return names, byName
}

// readCommits reads the committed offsets of the groups names into obs.Groups (byName: their indexes), with each
// group's reset policy when the cluster reports one. A group the answer leaves out gets an error, so that it is
// evaluated from its last commits, flagged stale.
func (l *Loop) readCommits(ctx context.Context, obs *Observation, names []string, byName map[string]int) {
	offs, err := l.cluster.CommittedOffsets(ctx, names)
	obs.Errors = append(obs.Errors, asCycleErrors(err, ErrKindCommitted)...)
	got := make(map[string]bool, len(offs))
	for _, o := range offs {
		if i, ok := byName[o.Group]; ok {
			obs.Groups[i].Offsets, obs.Groups[i].Error = o.Offsets, o.Error
			if o.Reset != "" {
				obs.Groups[i].Reset = o.Reset
			}
			got[o.Group] = true
		}
	}
	for i := range obs.Groups {
		if !got[obs.Groups[i].Group] && obs.Groups[i].Error == "" {
			obs.Groups[i].Error = "committed offsets not returned"
		}
	}
}

// endOffsetTopics returns the allowed topics of topics (the metadata) that some group of obs is measured on, whose
// end offsets the cycle reads, and keeps every group's scope in l.scopes. A group whose commits failed this cycle
// keeps its last scope, so that its last values can be shown (stale) against current end offsets.
func (l *Loop) endOffsetTopics(obs *Observation, topics []TopicObservation) []TopicObservation {
	inScope := map[string]bool{}
	scopes := make(map[string][]string, len(obs.Groups))
	var scope []string
	for i := range obs.Groups {
		g := &obs.Groups[i]
		sc := l.scopes[g.Group]
		if g.Error == "" {
			// a sorted slice per group, not a map (~250 B for one topic); last cycle's when it is the same
			if scope = scopeNames(scope[:0], g); !slices.Equal(scope, sc) {
				sc = slices.Clone(scope)
			}
		}
		scopes[g.Group] = sc
		for _, t := range sc {
			inScope[t] = true
		}
	}
	l.scopes = scopes
	var want []TopicObservation
	for _, t := range topics {
		if inScope[t.Topic] && l.cfg.TopicAllowed(t.Topic) {
			want = append(want, t)
		}
	}
	return want
}

// scopeNames appends to dst the topics a group is measured on, sorted and each once: those it has commits for and
// those assigned to its members (a newly assigned partition without a commit is in scope, case C10).
func scopeNames(dst []string, g *GroupObservation) []string {
	for i := range g.Offsets {
		if t := g.Offsets[i].Topic; len(dst) == 0 || dst[len(dst)-1] != t {
			dst = append(dst, t)
		}
	}
	for i := range g.Members {
		for t := range memberTopics(&g.Members[i]) {
			dst = append(dst, t)
		}
	}
	slices.Sort(dst)
	return slices.Compact(dst)
}

// memberTopics yields the topics a member owns or is the target of (KIP-848 and streams groups move partitions in
// steps: a partition on its way to a member is in the group's scope before its first commit). A topic in both is
// yielded twice; nothing is allocated.
func memberTopics(m *Member) iter.Seq[string] {
	return func(yield func(string) bool) {
		for t := range m.Assignment {
			if !yield(t) {
				return
			}
		}
		for t := range m.Target {
			if !yield(t) {
				return
			}
		}
	}
}
