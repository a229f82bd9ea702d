package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

type groupsResult struct {
	groups []lagexporter.GroupObservation
	errs   lagexporter.CycleErrors
	ok     bool
}

// Groups lists the groups every broker coordinates (ListGroups) and describes them (DescribeGroups), one request
// each per broker. A broker whose listing fails keeps its previous listing, each group marked with Error so that
// the loop shows it stale instead of dropping its series for one cycle.
func (c *ClusterReader) Groups(ctx context.Context) ([]lagexporter.GroupObservation, error) {
	ids := c.Brokers()
	if len(ids) == 0 {
		return nil, errors.New("list groups: no brokers known (read metadata first)")
	}
	res := perBroker(ids, func(id int32) groupsResult { return c.brokerGroups(ctx, id) })
	var out []lagexporter.GroupObservation
	var errs lagexporter.CycleErrors
	c.mu.Lock()
	c.coordOf = map[string]int32{}
	for _, id := range ids {
		r := res[id]
		errs = append(errs, r.errs...)
		if !r.ok {
			for _, g := range c.lastGroups[id] {
				g.Error = "coordinator " + brokerSubject(id) + " did not answer ListGroups"
				r.groups = append(r.groups, g)
			}
		} else {
			c.lastGroups[id] = slices.Clone(r.groups)
		}
		for _, g := range r.groups {
			c.coordOf[g.Group] = id
		}
		out = append(out, r.groups...)
	}
	for id := range c.lastGroups {
		if !slices.Contains(ids, id) {
			delete(c.lastGroups, id)
		}
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

func (c *ClusterReader) brokerGroups(ctx context.Context, id int32) groupsResult {
	fail := func(err error) groupsResult {
		return groupsResult{errs: lagexporter.CycleErrors{{Kind: lagexporter.ErrKindGroups, Subject: brokerSubject(id), Message: err.Error()}}}
	}
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	b, err := c.broker(id)
	if err != nil {
		return fail(err)
	}
	c.requests.Add(1)
	lr, err := b.ListGroups(&sarama.ListGroupsRequest{Version: 4})
	if err == nil && !errors.Is(lr.Err, sarama.ErrNoError) {
		err = lr.Err
	}
	if err != nil {
		return fail(fmt.Errorf("list groups: %w", err))
	}
	names := make([]string, 0, len(lr.Groups))
	for name, proto := range lr.Groups {
		// consumer groups and groups with commits only (empty protocol type); not Connect or other protocols
		if proto == "consumer" || proto == "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	r := groupsResult{ok: true}
	if len(names) == 0 {
		return r
	}
	described := map[string]*sarama.GroupDescription{}
	if ctx.Err() == nil {
		c.requests.Add(1)
		dr, err := b.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 4, Groups: names})
		if err != nil {
			r.errs = append(r.errs, lagexporter.CycleError{Kind: lagexporter.ErrKindGroups, Subject: brokerSubject(id),
				Message: fmt.Sprintf("describe %d groups: %v", len(names), err)})
		} else {
			for _, gd := range dr.Groups {
				described[gd.GroupId] = gd
			}
		}
	}
	for _, name := range names {
		g := lagexporter.GroupObservation{Group: name, ProtocolType: lr.Groups[name]}
		if d, ok := lr.GroupsData[name]; ok {
			g.State = d.GroupState
		}
		if gd := described[name]; gd != nil && errors.Is(gd.Err, sarama.ErrNoError) {
			g.State, g.ProtocolType = gd.State, gd.ProtocolType
			g.Members = decodeMembers(gd)
		}
		r.groups = append(r.groups, g)
	}
	return r
}

// decodeMembers turns DescribeGroups members into lagexporter members, decoding the consumer protocol assignment.
// A member whose assignment does not decode (another protocol) is kept without one.
func decodeMembers(gd *sarama.GroupDescription) []lagexporter.Member {
	if len(gd.Members) == 0 {
		return nil
	}
	out := make([]lagexporter.Member, 0, len(gd.Members))
	for id, m := range gd.Members {
		mem := lagexporter.Member{MemberID: id, ClientID: m.ClientId, Host: m.ClientHost}
		if gd.ProtocolType == "consumer" && len(m.MemberAssignment) > 0 {
			if a, err := m.GetMemberAssignment(); err == nil && len(a.Topics) > 0 {
				mem.Assignment = a.Topics
			}
		}
		out = append(out, mem)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MemberID < out[j].MemberID })
	return out
}

// CommittedOffsets reads the committed offsets of groups with one multi-group OffsetFetch (v8) per coordinator (per
// 2,000 groups). Kafka's -1 "no commit" answers are left out; a group the coordinator does not know (an error
// instead of -1 on some brokers) gets Error naming it.
func (c *ClusterReader) CommittedOffsets(ctx context.Context, groups []string) ([]lagexporter.GroupObservation, error) {
	byCoord := map[int32][]string{}
	var out []lagexporter.GroupObservation
	var errs lagexporter.CycleErrors
	c.mu.Lock()
	for _, g := range groups {
		id, ok := c.coordOf[g]
		if !ok {
			out = append(out, lagexporter.GroupObservation{Group: g, Error: "no known coordinator"})
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindCommitted, Subject: "group " + g, Message: "no known coordinator"})
			continue
		}
		byCoord[id] = append(byCoord[id], g)
	}
	c.mu.Unlock()
	ids := make([]int32, 0, len(byCoord))
	for id := range byCoord {
		ids = append(ids, id)
	}
	type result struct {
		groups []lagexporter.GroupObservation
		errs   lagexporter.CycleErrors
	}
	res := perBroker(ids, func(id int32) result {
		var r result
		names := byCoord[id]
		for start := 0; start < len(names); start += offsetFetchBatch {
			chunk := names[start:min(start+offsetFetchBatch, len(names))]
			got, err := c.offsetFetch(ctx, id, chunk)
			if err != nil {
				r.errs = append(r.errs, lagexporter.CycleError{Kind: lagexporter.ErrKindCommitted, Subject: brokerSubject(id), Message: err.Error()})
				for _, g := range chunk {
					r.groups = append(r.groups, lagexporter.GroupObservation{Group: g, Error: err.Error()})
				}
				continue
			}
			for _, g := range got {
				if g.Error != "" {
					r.errs = append(r.errs, lagexporter.CycleError{Kind: lagexporter.ErrKindCommitted, Subject: "group " + g.Group, Message: g.Error})
				}
			}
			r.groups = append(r.groups, got...)
		}
		return r
	})
	for _, id := range ids {
		out = append(out, res[id].groups...)
		errs = append(errs, res[id].errs...)
	}
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

func (c *ClusterReader) offsetFetch(ctx context.Context, id int32, groups []string) ([]lagexporter.GroupObservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := c.broker(id)
	if err != nil {
		return nil, err
	}
	req := &sarama.OffsetFetchRequest{Version: 8}
	for _, g := range groups {
		req.Groups = append(req.Groups, sarama.OffsetFetchRequestGroup{GroupId: g}) // nil partitions: all
	}
	c.requests.Add(1)
	resp, err := b.FetchOffset(req)
	if err != nil {
		return nil, fmt.Errorf("offset fetch for %d groups: %w", len(groups), err)
	}
	out := make([]lagexporter.GroupObservation, 0, len(groups))
	names := map[string]string{} // one copy of each topic name for all groups of the response
	for _, name := range groups {
		g := lagexporter.GroupObservation{Group: name}
		rg := resp.GetGroup(name)
		switch {
		case rg == nil:
			g.Error = "group missing from OffsetFetch response"
		case !errors.Is(rg.Err, sarama.ErrNoError):
			g.Error = fmt.Sprintf("offset fetch for group %s: %v", name, rg.Err)
		default:
			n := 0
			for _, parts := range rg.Blocks {
				n += len(parts)
			}
			g.Offsets = make([]lagexporter.CommittedOffset, 0, n)
			for topic, parts := range rg.Blocks {
				topic = intern(names, topic)
				for p, blk := range parts {
					if !errors.Is(blk.Err, sarama.ErrNoError) {
						g.Error = fmt.Sprintf("offset fetch for group %s %s/%d: %v", name, topic, p, blk.Err)
						continue
					}
					if blk.Offset < 0 { // -1: no commit (the sentinel never leaves the adapter)
						continue
					}
					g.Offsets = append(g.Offsets, lagexporter.CommittedOffset{Topic: topic, Partition: p, Offset: blk.Offset})
				}
			}
			sort.Slice(g.Offsets, func(i, j int) bool {
				if g.Offsets[i].Topic != g.Offsets[j].Topic {
					return g.Offsets[i].Topic < g.Offsets[j].Topic
				}
				return g.Offsets[i].Partition < g.Offsets[j].Partition
			})
		}
		out = append(out, g)
	}
	return out, nil
}

// intern returns the copy of s held in names, adding s if absent: thousands of groups committing on the same topics
// then share one string per topic.
func intern(names map[string]string, s string) string {
	if v, ok := names[s]; ok {
		return v
	}
	names[s] = s
	return s
}
