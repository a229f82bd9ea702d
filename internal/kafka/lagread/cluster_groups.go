package lagread

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lagexporter"
)

type groupsResult struct {
	groups []lagexporter.GroupObservation
	descs  []groupDesc
	errs   lagexporter.CycleErrors
	ok     bool
}

// Groups lists the groups every broker coordinates (ListGroups) and describes them (DescribeGroups), one request
// each per broker. A broker whose listing fails keeps its previous listing, each group marked with Error so that
// the loop shows it stale instead of dropping its series for one cycle, except the groups another broker listed
// this cycle: their coordinator moved (the failed broker stopped, its __consumer_offsets partitions were led
// elsewhere), and the new coordinator's answer is the group (see mergeListings).
func (c *ClusterReader) Groups(ctx context.Context) ([]lagexporter.GroupObservation, error) {
	ids := c.Brokers()
	if len(ids) == 0 {
		return nil, errors.New("list groups: no brokers known (read metadata first)")
	}
	res := perBroker(ids, func(id int32) groupsResult { return c.brokerGroups(ctx, id) })
	var errs lagexporter.CycleErrors
	for _, id := range ids {
		errs = append(errs, res[id].errs...)
	}
	c.mu.Lock()
	var out []lagexporter.GroupObservation
	out, c.coordOf, c.typeOf = mergeListings(ids, res, c.lastGroups)
	c.mu.Unlock()
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// mergeListings merges this cycle's listings res of brokers ids into the groups of the cycle, sorted by name, with
// each group's coordinator and type, and updates last (each answering broker's listing, kept for when it fails).
// A broker that did not answer contributes its last listing, marked with Error, without the groups another broker
// listed: one group, one coordinator. last forgets brokers no longer in ids. A pure function of its arguments.
func mergeListings(ids []int32, res map[int32]groupsResult, last map[int32][]lagexporter.GroupObservation) (
	out []lagexporter.GroupObservation, coordOf map[string]int32, typeOf map[string]string) {
	listed := map[string]bool{} // groups an answering broker coordinates
	for _, id := range ids {
		if r := res[id]; r.ok {
			for _, g := range r.groups {
				listed[g.Group] = true
			}
		}
	}
	coordOf, typeOf = map[string]int32{}, map[string]string{}
	for _, id := range ids {
		r := res[id]
		groups := r.groups
		if !r.ok {
			kept := last[id][:0]
			groups = nil
			for _, g := range last[id] {
				if listed[g.Group] {
					continue // moved to a coordinator that answered
				}
				kept = append(kept, g)
				g.Error = "coordinator " + brokerSubject(id) + " did not answer ListGroups"
				groups = append(groups, g)
			}
			last[id] = kept
		} else {
			last[id] = slices.Clone(r.groups)
		}
		for _, g := range groups {
			coordOf[g.Group], typeOf[g.Group] = id, g.Type()
		}
		out = append(out, groups...)
	}
	for id := range last {
		if !slices.Contains(ids, id) {
			delete(last, id)
		}
	}
	slices.SortFunc(out, func(a, b lagexporter.GroupObservation) int { return strings.Compare(a.Group, b.Group) })
	return out, coordOf, typeOf
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
	lr, err := b.ListGroups(listGroupsRequest())
	if err == nil && !errors.Is(lr.Err, sarama.ErrNoError) {
		err = lr.Err
	}
	if err != nil {
		return fail(fmt.Errorf("list groups: %w", err))
	}
	gs := listedGroups(lr)
	r := groupsResult{ok: true}
	r.errs = c.describeGroups(ctx, id, b, gs)
	r.descs = gs
	for _, g := range gs {
		r.groups = append(r.groups, observationOf(g))
	}
	return r
}

// describeGroups describes gs, all coordinated by broker id, with one request per group type present (see
// cluster_grouptypes.go). A describe that fails marks its groups (they keep their listing: state, no members) and is
// one error per request, or per group when the coordinator answered for each group; one the broker cannot answer at
// all, or answers UNSUPPORTED_VERSION for every group of a type, is noted once as unsupported.
func (c *ClusterReader) describeGroups(ctx context.Context, id int32, b *sarama.Broker, gs []groupDesc) lagexporter.CycleErrors {
	var errs lagexporter.CycleErrors
	failed := func(typ string, names []string, key int16, err error) {
		kind := lagexporter.ErrKindGroups
		if errorsIsUnsupported(err) {
			c.noteUnsupported(key, id, err)
			kind = lagexporter.ErrKindUnsupported
		}
		for i := range gs {
			if gs[i].groupType == typ {
				gs[i].err = err.Error()
			}
		}
		errs = append(errs, lagexporter.CycleError{Kind: kind, Subject: brokerSubject(id),
			Message: fmt.Sprintf("describe %d %s groups: %v", len(names), typ, err)})
	}
	if names := namesOfType(gs, GroupTypeClassic); len(names) > 0 && ctx.Err() == nil {
		c.requests.Add(1)
		dr, err := b.DescribeGroups(&sarama.DescribeGroupsRequest{Version: 4, Groups: names})
		if err != nil {
			failed(GroupTypeClassic, names, apiDescribeGroups, err)
		} else {
			applyClassic(gs, dr)
			errs = append(errs, c.groupErrors(id, GroupTypeClassic, apiDescribeGroups, gs)...)
		}
	}
	if names := namesOfType(gs, GroupTypeConsumer); len(names) > 0 && ctx.Err() == nil {
		c.requests.Add(1)
		req := sarama.NewConsumerGroupDescribeRequest(c.conf.Version)
		req.GroupIDs = names
		resp, err := b.ConsumerGroupDescribe(req)
		if err != nil {
			failed(GroupTypeConsumer, names, apiConsumerGroupDescribe, fmt.Errorf("ConsumerGroupDescribe: %w", err))
		} else {
			applyConsumer(gs, resp)
			errs = append(errs, c.groupErrors(id, GroupTypeConsumer, apiConsumerGroupDescribe, gs)...)
		}
	}
	if names := namesOfType(gs, GroupTypeShare); len(names) > 0 && ctx.Err() == nil {
		req := kmsg.NewPtrShareGroupDescribeRequest()
		req.GroupIDs = names
		resp, err := c.franzDescribe(ctx, id, apiShareGroupDescribe, req)
		if err != nil {
			failed(GroupTypeShare, names, apiShareGroupDescribe, err)
		} else {
			applyShare(gs, resp.(*kmsg.ShareGroupDescribeResponse))
			errs = append(errs, c.groupErrors(id, GroupTypeShare, apiShareGroupDescribe, gs)...)
		}
	}
	if names := namesOfType(gs, GroupTypeStreams); len(names) > 0 && ctx.Err() == nil {
		req := kmsg.NewPtrStreamsGroupDescribeRequest()
		req.Groups = names
		resp, err := c.franzDescribe(ctx, id, apiStreamsGroupDescribe, req)
		if err != nil {
			failed(GroupTypeStreams, names, apiStreamsGroupDescribe, err)
		} else {
			applyStreams(gs, resp.(*kmsg.StreamsGroupDescribeResponse))
			errs = append(errs, c.groupErrors(id, GroupTypeStreams, apiStreamsGroupDescribe, gs)...)
		}
	}
	return errs
}

// groupErrors turns the per-group errors of one describe answer (groups of type typ, API key) into cycle errors: one per
// group, except UNSUPPORTED_VERSION. A coordinator answers that for every group of a type it does not serve (share
// groups while share.version is 0, measured on Kafka 4.4: ApiVersions still lists the RPC); it is noted once as
// unsupported and counted as one error per coordinator and cycle, however many groups it concerns.
func (c *ClusterReader) groupErrors(id int32, typ string, key int16, gs []groupDesc) lagexporter.CycleErrors {
	var errs lagexporter.CycleErrors
	unsupported := 0
	for i := range gs {
		g := &gs[i]
		switch {
		case g.groupType != typ || g.err == "":
		case g.errCode == kerr.UnsupportedVersion.Code:
			unsupported++
		default:
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindGroups, Subject: "group " + g.name, Message: g.err})
		}
	}
	if unsupported > 0 {
		err := fmt.Errorf("%s: %s answers UNSUPPORTED_VERSION for %s groups (group type disabled on it?): %w",
			apiNames[key], brokerSubject(id), typ, errUnsupported)
		c.noteUnsupported(key, id, err)
		errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindUnsupported, Subject: brokerSubject(id),
			Message: fmt.Sprintf("describe %d %s groups: %v", unsupported, typ, err)})
	}
	return errs
}

// franzDescribe sends req (API key) to broker id over the kgo transport once the broker's API versions say it can
// answer it.
func (c *ClusterReader) franzDescribe(ctx context.Context, id int32, key int16, req kmsg.Request) (kmsg.Response, error) {
	if err := c.supports(ctx, id, key); err != nil {
		return nil, err
	}
	resp, err := c.franzRequest(ctx, id, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", apiNames[key], err)
	}
	return resp, nil
}

// observationOf is the lag loop's view of a described group.
func observationOf(g groupDesc) lagexporter.GroupObservation {
	obs := lagexporter.GroupObservation{Group: g.name, GroupType: g.groupType, State: g.state, ProtocolType: g.protocolType,
		Epoch: g.epoch, AssignmentEpoch: g.assignmentEpoch}
	for _, m := range g.members {
		mem := lagexporter.Member{MemberID: m.id, ClientID: m.clientID, Host: m.host, Assignment: m.assigned, Epoch: m.epoch}
		if !maps.EqualFunc(m.target, m.assigned, slices.Equal) {
			mem.Target = m.target // only while it differs: a reconciled member's target is its assignment
		}
		obs.Members = append(obs.Members, mem)
	}
	if g.topology != nil {
		obs.Streams = make(map[string]lagexporter.StreamsTopic, len(g.topology.reads))
		for t, r := range g.topology.reads {
			obs.Streams[t] = lagexporter.StreamsTopic{Subtopology: r.Subtopology, Internal: r.Internal}
		}
	}
	return obs
}

// CommittedOffsets reads the committed offsets of groups with one multi-group OffsetFetch (v8) per coordinator (per
// 10,000 groups, offsetFetchBatch). Kafka's -1 "no commit" answers are left out; a group the coordinator does not
// know (an error instead of -1 on some brokers) gets Error naming it. Share groups have no commits: their position,
// the share-partition start offset with the broker's share-partition lag, is read with one DescribeShareGroupOffsets
// per coordinator instead (see ShareOffsets).
func (c *ClusterReader) CommittedOffsets(ctx context.Context, groups []string) ([]lagexporter.GroupObservation, error) {
	var out []lagexporter.GroupObservation
	var committing, share []string
	c.mu.Lock()
	for _, g := range groups {
		if c.typeOf[g] == GroupTypeShare {
			share = append(share, g)
		} else {
			committing = append(committing, g)
		}
	}
	c.mu.Unlock()
	byCoord, ids, unknown, errs := c.byCoordinator(committing)
	for _, g := range unknown {
		out = append(out, lagexporter.GroupObservation{Group: g, Error: "no known coordinator"})
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
	if len(share) > 0 {
		offs, resets, failed, err := c.shareOffsets(ctx, share)
		errs = append(errs, asCycleErrors(err)...)
		for _, g := range share {
			obs := lagexporter.GroupObservation{Group: g, Error: failed[g], Reset: resets[g]}
			if obs.Error == "" {
				obs.Offsets = make([]lagexporter.CommittedOffset, 0, len(offs[g]))
				for _, o := range offs[g] {
					co := lagexporter.CommittedOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.StartOffset}
					if o.Lag >= 0 {
						co.ShareLag = &o.Lag
					}
					obs.Offsets = append(obs.Offsets, co)
				}
			}
			out = append(out, obs)
		}
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
	// The response's groups by id, indexed once: sarama's GetGroup scans them, which made a 10,000-group response
	// cost 50 M string comparisons (a quarter of the exporter's CPU at 500k group-partitions).
	byID := make(map[string]*sarama.OffsetFetchResponseGroup, len(resp.Groups))
	for i := range resp.Groups {
		byID[resp.Groups[i].GroupId] = &resp.Groups[i]
	}
	for _, name := range groups {
		g := lagexporter.GroupObservation{Group: name}
		rg := byID[name]
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
			slices.SortFunc(g.Offsets, cmpCommitted)
		}
		out = append(out, g)
	}
	return out, nil
}

// cmpCommitted orders commits by (topic, partition).
func cmpCommitted(a, b lagexporter.CommittedOffset) int {
	return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
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

// byCoordinator splits groups by the coordinator the last ListGroups named (ids in no particular order); groups
// without a known coordinator are returned in unknown, each with a committed-offsets error.
func (c *ClusterReader) byCoordinator(groups []string) (byCoord map[int32][]string, ids []int32, unknown []string,
	errs lagexporter.CycleErrors) {
	byCoord = map[int32][]string{}
	c.mu.Lock()
	for _, g := range groups {
		id, ok := c.coordOf[g]
		if !ok {
			unknown = append(unknown, g)
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindCommitted, Subject: "group " + g, Message: "no known coordinator"})
			continue
		}
		if _, seen := byCoord[id]; !seen {
			ids = append(ids, id)
		}
		byCoord[id] = append(byCoord[id], g)
	}
	c.mu.Unlock()
	return byCoord, ids, unknown, errs
}

// asCycleErrors returns the CycleErrors in err (nil for nil).
func asCycleErrors(err error) lagexporter.CycleErrors {
	var ce lagexporter.CycleErrors
	if err != nil && !errors.As(err, &ce) {
		ce = lagexporter.CycleErrors{{Kind: lagexporter.ErrKindCommitted, Message: err.Error()}}
	}
	return ce
}
