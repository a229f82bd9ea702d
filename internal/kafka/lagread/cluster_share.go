package lagread

import (
	"context"
	"fmt"
	"maps"
	"sort"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lagexporter"
)

// ShareOffsets reads the share-partition start offsets of share groups (one DescribeShareGroupOffsets per
// coordinator, all topic-partitions of each group), as the position of a share group: what CommittedOffsets is for
// the other types. A group whose coordinator is unknown or fails gets an error; a coordinator that cannot answer the
// RPC at all is noted once as unsupported.
func (c *ClusterReader) ShareOffsets(ctx context.Context, groups []string) (map[string][]ShareOffset, map[string]string, error) {
	offsets, _, failed, err := c.shareOffsets(ctx, groups)
	return offsets, failed, err
}

// shareOffsets is ShareOffsets plus each group's share.auto.offset.reset where the broker gave it.
func (c *ClusterReader) shareOffsets(ctx context.Context, groups []string) (map[string][]ShareOffset, map[string]lagexporter.Reset,
	map[string]string, error) {
	resets := map[string]lagexporter.Reset{}
	offsets, failed := map[string][]ShareOffset{}, map[string]string{}
	byCoord, ids, unknown, errs := c.byCoordinator(groups)
	for _, g := range unknown {
		failed[g] = "no known coordinator"
	}
	res := perBroker(ids, func(id int32) shareCoordResult { return c.coordShareOffsets(ctx, id, byCoord[id]) })
	for _, id := range ids {
		r := res[id]
		errs = append(errs, r.errs...)
		maps.Copy(resets, r.resets)
		for g, v := range r.groups {
			if v.err != "" {
				failed[g] = v.err
				continue
			}
			offsets[g] = v.offsets
		}
	}
	if len(errs) > 0 {
		return offsets, resets, failed, errs
	}
	return offsets, resets, failed, nil
}

type shareCoordResult struct {
	groups map[string]shareOffsetsResult
	resets map[string]lagexporter.Reset // share.auto.offset.reset by group, where the broker answered
	errs   lagexporter.CycleErrors
}

// groupConfigResource is Kafka's GROUP config resource type (KIP-848 group configs), which sarama does not name.
const groupConfigResource sarama.ConfigResourceType = 32

// shareResets reads share.auto.offset.reset of the share groups names (one DescribeConfigs on their coordinator):
// where a share-partition has no start offset yet, it says whether the backlog starts at the log start or at the
// end. A failed read leaves the policy unknown (the exporter then assumes Kafka's default, latest) and is counted.
func (c *ClusterReader) shareResets(ctx context.Context, id int32, names []string) (map[string]lagexporter.Reset, lagexporter.CycleErrors) {
	fail := func(err error) (map[string]lagexporter.Reset, lagexporter.CycleErrors) {
		return nil, lagexporter.CycleErrors{{Kind: lagexporter.ErrKindGroups, Subject: brokerSubject(id),
			Message: fmt.Sprintf("describe share.auto.offset.reset of %d share groups: %v", len(names), err)}}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	b, err := c.broker(id)
	if err != nil {
		return fail(err)
	}
	req := &sarama.DescribeConfigsRequest{Version: 1}
	for _, g := range names {
		req.Resources = append(req.Resources, &sarama.ConfigResource{Type: groupConfigResource, Name: g,
			ConfigNames: []string{"share.auto.offset.reset"}})
	}
	c.requests.Add(1)
	resp, err := b.DescribeConfigs(req)
	if err != nil {
		return fail(err)
	}
	out := make(map[string]lagexporter.Reset, len(names))
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			continue // unknown policy: the default applies
		}
		for _, e := range r.Configs {
			switch lagexporter.Reset(e.Value) {
			case lagexporter.ResetEarliest, lagexporter.ResetLatest:
				out[r.Name] = lagexporter.Reset(e.Value)
			}
		}
	}
	return out, nil
}

func (c *ClusterReader) coordShareOffsets(ctx context.Context, id int32, names []string) shareCoordResult {
	fail := func(err error) shareCoordResult {
		kind := lagexporter.ErrKindCommitted
		if errorsIsUnsupported(err) {
			c.noteUnsupported(apiDescribeShareGroupOffsets, id, err)
			kind = lagexporter.ErrKindUnsupported
		}
		r := shareCoordResult{groups: map[string]shareOffsetsResult{}}
		for _, g := range names {
			r.groups[g] = shareOffsetsResult{err: err.Error()}
		}
		r.errs = lagexporter.CycleErrors{{Kind: kind, Subject: brokerSubject(id),
			Message: fmt.Sprintf("describe share group offsets of %d groups: %v", len(names), err)}}
		return r
	}
	req := kmsg.NewPtrDescribeShareGroupOffsetsRequest()
	for _, g := range names {
		rg := kmsg.NewDescribeShareGroupOffsetsRequestGroup()
		rg.GroupID = g // nil topics: every topic-partition the group has state for
		req.Groups = append(req.Groups, rg)
	}
	resp, err := c.franzDescribe(ctx, id, apiDescribeShareGroupOffsets, req)
	if err != nil {
		return fail(err)
	}
	r := shareCoordResult{groups: decodeShareOffsets(resp.(*kmsg.DescribeShareGroupOffsetsResponse))}
	r.resets, r.errs = c.shareResets(ctx, id, names)
	unsupported := 0
	for _, g := range names {
		v, ok := r.groups[g]
		if !ok {
			v.err = "group missing from DescribeShareGroupOffsets response"
			r.groups[g] = v
		}
		switch {
		case v.unsupported:
			unsupported++
		case v.err != "":
			r.errs = append(r.errs, lagexporter.CycleError{Kind: lagexporter.ErrKindCommitted, Subject: "group " + g, Message: v.err})
		}
	}
	if unsupported > 0 { // one error per coordinator and cycle, however many groups (see groupErrors)
		err := fmt.Errorf("%s: %s answers UNSUPPORTED_VERSION for share groups (share groups disabled on it?): %w",
			apiNames[apiDescribeShareGroupOffsets], brokerSubject(id), errUnsupported)
		c.noteUnsupported(apiDescribeShareGroupOffsets, id, err)
		r.errs = append(r.errs, lagexporter.CycleError{Kind: lagexporter.ErrKindUnsupported, Subject: brokerSubject(id),
			Message: fmt.Sprintf("describe share group offsets of %d groups: %v", unsupported, err)})
	}
	return r
}

// ShareOffset is a share group's position on one partition (DescribeShareGroupOffsets, KIP-932): StartOffset is the
// share-partition start offset (SPSO), the earliest offset whose delivery is not complete (records before it are all
// acknowledged or archived; some after it may be too). Lag is the broker's share-partition lag (KIP-1226, Kafka
// 4.2+, DescribeShareGroupOffsets v1): End − SPSO − records after the SPSO already acknowledged or archived; -1 when
// the broker does not compute it. A partition whose share state is not initialized yet (no share consumer fetched it)
// has no ShareOffset.
type ShareOffset struct {
	Topic       string
	Partition   int32
	StartOffset int64
	LeaderEpoch int32
	Lag         int64
}

// decodeShareOffsets turns a DescribeShareGroupOffsets answer into each group's share offsets (sorted by topic and
// partition) or error. Uninitialized share-partitions (start offset -1) are left out: the sentinel never leaves the
// adapter.
func decodeShareOffsets(resp *kmsg.DescribeShareGroupOffsetsResponse) map[string]shareOffsetsResult {
	out := make(map[string]shareOffsetsResult, len(resp.Groups))
	for _, g := range resp.Groups {
		var r shareOffsetsResult
		if err := kerr.ErrorForCode(g.ErrorCode); err != nil {
			r.err = "describe share group offsets: " + kafkaErrText(err.Error(), g.ErrorMessage)
			r.unsupported = g.ErrorCode == kerr.UnsupportedVersion.Code
			out[g.GroupID] = r
			continue
		}
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					r.err = fmt.Sprintf("describe share group offsets %s/%d: %s", t.Topic, p.Partition, kafkaErrText(err.Error(), p.ErrorMessage))
					continue
				}
				if p.StartOffset < 0 {
					continue
				}
				lag := p.Lag
				if resp.Version < 1 || lag < 0 {
					lag = -1
				}
				r.offsets = append(r.offsets, ShareOffset{Topic: t.Topic, Partition: p.Partition, StartOffset: p.StartOffset,
					LeaderEpoch: p.LeaderEpoch, Lag: lag})
			}
		}
		sort.Slice(r.offsets, func(i, j int) bool {
			if r.offsets[i].Topic != r.offsets[j].Topic {
				return r.offsets[i].Topic < r.offsets[j].Topic
			}
			return r.offsets[i].Partition < r.offsets[j].Partition
		})
		out[g.GroupID] = r
	}
	return out
}

type shareOffsetsResult struct {
	offsets []ShareOffset
	err     string
	// unsupported: the coordinator answered UNSUPPORTED_VERSION for the group (share groups disabled on it)
	unsupported bool
}
