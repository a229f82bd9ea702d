package lagread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

// ListOffsets reads log start, last stable offset and high watermark of every partition of topics with three
// ListOffsets requests per leader (earliest; latest READ_COMMITTED = LSO; latest READ_UNCOMMITTED = HW), read in
// that order so the three are consistent (each only grows). A leaderless partition, or one whose leader fails,
// gets Error and ErrorCode; every other partition keeps its values.
//
// A leader that moved mid-cycle costs no stale cycle: partitions answered NOT_LEADER_OR_FOLLOWER,
// LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION (or led by a broker that cannot be reached) are asked again, once,
// on the leader a metadata refresh of their topics names (one Metadata request, then three ListOffsets per new
// leader); errors of partitions the retry answered are dropped. Then the topics' retention settings and, where
// retention.bytes is finite, the partitions' log sizes are filled in (fillRetention).
func (c *ClusterReader) ListOffsets(ctx context.Context, topics []lagexporter.TopicObservation) ([]lagexporter.TopicObservation, error) {
	out := make([]lagexporter.TopicObservation, len(topics))
	names := map[*lagexporter.PartitionObservation]string{}
	var all []*lagexporter.PartitionObservation
	var errs lagexporter.CycleErrors
	for i, t := range topics {
		out[i] = lagexporter.TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType,
			Partitions: make([]lagexporter.PartitionObservation, len(t.Partitions))}
		for j, p := range t.Partitions {
			po := &out[i].Partitions[j]
			*po = lagexporter.PartitionObservation{Partition: p.Partition, Leader: p.Leader}
			names[po] = t.Topic
			all = append(all, po)
		}
	}
	errs = append(errs, c.readOffsets(ctx, all, names)...)
	errs = c.retryMovedLeaders(ctx, all, names, errs)
	errs = append(errs, c.fillRetention(ctx, out)...)
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// readOffsets reads parts on their leaders (concurrently per leader); a part without a leader fails as unavailable.
func (c *ClusterReader) readOffsets(ctx context.Context, parts []*lagexporter.PartitionObservation,
	names map[*lagexporter.PartitionObservation]string) lagexporter.CycleErrors {
	var errs lagexporter.CycleErrors
	byLeader := map[int32][]*lagexporter.PartitionObservation{}
	for _, po := range parts {
		if po.Leader < 0 {
			po.Error, po.ErrorCode = "no leader", "LEADER_NOT_AVAILABLE"
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindUnavailable,
				Subject: partSubject(names[po], po.Partition), Message: "no leader"})
			continue
		}
		byLeader[po.Leader] = append(byLeader[po.Leader], po)
	}
	ids := make([]int32, 0, len(byLeader))
	for id := range byLeader {
		ids = append(ids, id)
	}
	res := perBroker(ids, func(id int32) lagexporter.CycleErrors {
		return c.leaderOffsets(ctx, id, byLeader[id], names)
	})
	for _, id := range ids {
		errs = append(errs, res[id]...)
	}
	return errs
}

// retryMovedLeaders asks again, once, for the partitions whose read failed because their leader may have moved
// (leaderMoved), on the leaders a metadata refresh of their topics names, and returns errs without the errors of the
// partitions the retry read. A partition whose leader could not be reached is asked again only if the refresh names
// another leader.
func (c *ClusterReader) retryMovedLeaders(ctx context.Context, parts []*lagexporter.PartitionObservation,
	names map[*lagexporter.PartitionObservation]string, errs lagexporter.CycleErrors) lagexporter.CycleErrors {
	var failed []*lagexporter.PartitionObservation
	topicSet := map[string]bool{}
	for _, po := range parts {
		if po.Error != "" && leaderMoved(po.ErrorCode) {
			failed = append(failed, po)
			topicSet[names[po]] = true
		}
	}
	if len(failed) == 0 || ctx.Err() != nil {
		return errs
	}
	topics := make([]string, 0, len(topicSet))
	for t := range topicSet {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	leaders, err := c.refreshLeaders(ctx, topics)
	if err != nil {
		return errs // the errors stand; the next cycle's metadata read tries again
	}
	var retry []*lagexporter.PartitionObservation
	retried := map[string]bool{}     // subjects of the partitions asked again
	brokerParts := map[int32]int{}   // failed partitions per leader of the first attempt
	brokerRetried := map[int32]int{} // of which asked again
	for _, po := range parts {
		if po.Error != "" && po.ErrorCode == lagexporter.ErrCodeNetwork {
			brokerParts[po.Leader]++
		}
	}
	for _, po := range failed {
		nl, ok := leaders[tp{names[po], po.Partition}]
		if !ok || nl < 0 || po.ErrorCode == lagexporter.ErrCodeNetwork && nl == po.Leader {
			continue // still no leader, or the same unreachable one
		}
		if po.ErrorCode == lagexporter.ErrCodeNetwork {
			brokerRetried[po.Leader]++
		}
		retried[partSubject(names[po], po.Partition)] = true
		*po = lagexporter.PartitionObservation{Partition: po.Partition, Leader: nl}
		retry = append(retry, po)
	}
	if len(retry) == 0 {
		return errs
	}
	c.leaderRetries.Add(int64(len(retry)))
	kept := errs[:0]
	for _, e := range errs {
		if retried[e.Subject] {
			continue
		}
		if id, ok := brokerOfSubject(e.Subject); ok && brokerParts[id] > 0 && brokerRetried[id] == brokerParts[id] {
			continue // every partition of the unreachable broker was read elsewhere
		}
		kept = append(kept, e)
	}
	return append(kept, c.readOffsets(ctx, retry, names)...)
}

// refreshLeaders reads the metadata of topics (one request) and updates the leaders and broker addresses it names;
// it returns the leaders of those topics' partitions (-1: none).
func (c *ClusterReader) refreshLeaders(ctx context.Context, topics []string) (map[tp]int32, error) {
	req := sarama.NewMetadataRequest(c.conf.Version, topics)
	for _, id := range c.Brokers() {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		b, err := c.broker(id)
		if err != nil {
			continue
		}
		c.requests.Add(1)
		resp, err := b.GetMetadata(req)
		if err != nil {
			_ = b.Close()
			continue
		}
		out := map[tp]int32{}
		c.mu.Lock()
		for _, br := range resp.Brokers {
			c.addrs[br.ID()] = br.Addr()
		}
		for _, t := range resp.Topics {
			if !errors.Is(t.Err, sarama.ErrNoError) {
				continue
			}
			for _, p := range t.Partitions {
				leader := p.Leader
				if !errors.Is(p.Err, sarama.ErrNoError) && !errors.Is(p.Err, sarama.ErrReplicaNotAvailable) {
					leader = -1
				}
				out[tp{t.Name, p.ID}] = leader
				c.leaders[tp{t.Name, p.ID}] = leader
			}
		}
		c.mu.Unlock()
		return out, nil
	}
	return nil, errors.New("refresh leaders: no broker answered Metadata")
}

// LeaderRetries returns the number of partitions ListOffsets asked again on a moved leader since the reader was
// created.
func (c *ClusterReader) LeaderRetries() int64 { return c.leaderRetries.Load() }

func partSubject(topic string, partition int32) string { return fmt.Sprintf("%s/%d", topic, partition) }

// brokerOfSubject parses a "broker N" subject (brokerSubject).
func brokerOfSubject(s string) (int32, bool) {
	n, ok := strings.CutPrefix(s, "broker ")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(n, 10, 32)
	return int32(id), err == nil
}

// leaderOffsets fills the offsets of parts, all led by broker id (each *PartitionObservation is written by this
// goroutine only), with the three offsetQueries in order, then clamps them (clampOffsets). The broker unreachable,
// a request failing or ctx ending fails every partition still unread; the leader epochs the answers carried are
// recorded in every case.
func (c *ClusterReader) leaderOffsets(ctx context.Context, id int32, parts []*lagexporter.PartitionObservation,
	names map[*lagexporter.PartitionObservation]string) lagexporter.CycleErrors {
	b, err := c.broker(id)
	if err != nil {
		return failOffsets(ctx, id, parts, err)
	}
	var errs lagexporter.CycleErrors
	var seen []epochOf // recorded after the reads
	defer func() { c.observeEpochs(id, seen) }()
	for _, q := range offsetQueries {
		if err := ctx.Err(); err != nil {
			return append(errs, failOffsets(ctx, id, parts, err)...)
		}
		req := sarama.NewOffsetRequest(c.conf.Version)
		req.IsolationLevel = q.iso
		for _, p := range parts {
			req.AddBlock(names[p], p.Partition, q.time, 1)
		}
		c.requests.Add(1)
		resp, err := b.GetAvailableOffsets(req)
		if err != nil {
			_ = b.Close()
			return append(errs, failOffsets(ctx, id, parts, fmt.Errorf("list offsets: %w", err))...)
		}
		var qerrs lagexporter.CycleErrors
		seen, qerrs = applyOffsets(ctx, q, resp, parts, names, seen)
		errs = append(errs, qerrs...)
	}
	clampOffsets(parts)
	return errs
}

// offsetQuery is one of the ListOffsets requests leaderOffsets sends each leader: the timestamp asked for
// (sarama.OffsetOldest or OffsetNewest), the isolation level, and the field of the observation the answer sets.
type offsetQuery struct {
	time int64
	iso  sarama.IsolationLevel
	set  func(p *lagexporter.PartitionObservation, off int64)
}

// offsetQueries are leaderOffsets' requests, in the order they are sent: log start, high watermark, last stable
// offset.
var offsetQueries = []offsetQuery{
	{sarama.OffsetOldest, sarama.ReadUncommitted, func(p *lagexporter.PartitionObservation, o int64) { p.LogStart = o }},
	// The high watermark before the last stable offset: records appended between the two reads then raise the
	// LSO read, which is clamped to the HW (clampOffsets), instead of the HW, which would show them as open
	// transactions.
	{sarama.OffsetNewest, sarama.ReadUncommitted, func(p *lagexporter.PartitionObservation, o int64) { p.HighWatermark = o }},
	{sarama.OffsetNewest, sarama.ReadCommitted, func(p *lagexporter.PartitionObservation, o int64) { p.LastStable = o }},
}

// epochOf is a partition's current leader epoch as a ListOffsets answer carried it (the answering broker leads it).
type epochOf struct {
	k     tp
	epoch int32
}

// failOffsets fails every one of parts, led by broker id, with err (classified by partitionErrorCode) and returns
// the one cycle error that names the broker.
func failOffsets(ctx context.Context, id int32, parts []*lagexporter.PartitionObservation, err error) lagexporter.CycleErrors {
	code := partitionErrorCode(ctx, err)
	for _, p := range parts {
		p.Error, p.ErrorCode = err.Error(), code
	}
	return lagexporter.CycleErrors{{Kind: lagexporter.ErrKindListOffsets, Subject: brokerSubject(id), Message: err.Error()}}
}

// applyOffsets sets the answer resp to query q on each of parts. A partition missing from the answer, or answered
// with an error, keeps its first error (a later query does not replace it) and adds a cycle error naming it. It
// returns seen with the leader epochs the high-watermark answers carried appended, and the cycle errors.
func applyOffsets(ctx context.Context, q offsetQuery, resp *sarama.OffsetResponse, parts []*lagexporter.PartitionObservation,
	names map[*lagexporter.PartitionObservation]string, seen []epochOf) ([]epochOf, lagexporter.CycleErrors) {
	var errs lagexporter.CycleErrors
	for _, p := range parts {
		var err error
		blk := resp.GetBlock(names[p], p.Partition)
		switch {
		case blk == nil:
			err = errors.New("partition missing from ListOffsets response")
		case !errors.Is(blk.Err, sarama.ErrNoError):
			err = blk.Err
		default:
			q.set(p, blk.Offset)
			if q.time == sarama.OffsetNewest && q.iso == sarama.ReadUncommitted {
				seen = append(seen, epochOf{tp{names[p], p.Partition}, blk.LeaderEpoch})
			}
			continue
		}
		if p.Error == "" {
			p.Error, p.ErrorCode = err.Error(), partitionErrorCode(ctx, err)
			if p.ErrorCode == lagexporter.ErrCodeNetwork { // an answer without the partition: not the network's fault
				p.ErrorCode = lagexporter.ErrCodeUnknown
			}
			errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindListOffsets,
				Subject: partSubject(names[p], p.Partition), Message: err.Error()})
		}
	}
	return seen, errs
}

// clampOffsets keeps log start <= LSO <= HW on every partition read without error, whatever was appended or deleted
// between the three reads.
func clampOffsets(parts []*lagexporter.PartitionObservation) {
	for _, p := range parts {
		if p.Error == "" {
			p.LastStable = max(min(p.LastStable, p.HighWatermark), p.LogStart)
			p.HighWatermark = max(p.HighWatermark, p.LastStable)
		}
	}
}

// observeEpochs records that broker id leads the epochs seen.
func (c *ClusterReader) observeEpochs(id int32, seen []epochOf) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range seen {
		c.epochs.observe(s.k, s.epoch, id)
	}
}
