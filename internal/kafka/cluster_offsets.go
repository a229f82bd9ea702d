package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/lagexporter"
)

// ListOffsets reads log start, last stable offset and high watermark of every partition of topics with three
// ListOffsets requests per leader (earliest; latest READ_COMMITTED = LSO; latest READ_UNCOMMITTED = HW), read in
// that order so the three are consistent (each only grows). A leaderless partition, or one whose leader fails,
// gets Error; every other partition keeps its values.
func (c *ClusterReader) ListOffsets(ctx context.Context, topics []lagexporter.TopicObservation) ([]lagexporter.TopicObservation, error) {
	out := make([]lagexporter.TopicObservation, len(topics))
	byLeader := map[int32][]*lagexporter.PartitionObservation{}
	names := map[*lagexporter.PartitionObservation]string{}
	var errs lagexporter.CycleErrors
	for i, t := range topics {
		out[i] = lagexporter.TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType,
			Partitions: make([]lagexporter.PartitionObservation, len(t.Partitions))}
		for j, p := range t.Partitions {
			po := &out[i].Partitions[j]
			*po = lagexporter.PartitionObservation{Partition: p.Partition, Leader: p.Leader}
			if p.Leader < 0 {
				po.Error = "no leader"
				errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindUnavailable,
					Subject: fmt.Sprintf("%s/%d", t.Topic, p.Partition), Message: "no leader"})
				continue
			}
			byLeader[p.Leader] = append(byLeader[p.Leader], po)
			names[po] = t.Topic
		}
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
	if len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// leaderOffsets fills the offsets of parts, all led by broker id (each *PartitionObservation is written by this
// goroutine only).
func (c *ClusterReader) leaderOffsets(ctx context.Context, id int32, parts []*lagexporter.PartitionObservation,
	names map[*lagexporter.PartitionObservation]string) lagexporter.CycleErrors {
	failAll := func(err error) lagexporter.CycleErrors {
		for _, p := range parts {
			p.Error = err.Error()
		}
		return lagexporter.CycleErrors{{Kind: lagexporter.ErrKindListOffsets, Subject: brokerSubject(id), Message: err.Error()}}
	}
	b, err := c.broker(id)
	if err != nil {
		return failAll(err)
	}
	type query struct {
		time int64
		iso  sarama.IsolationLevel
		set  func(p *lagexporter.PartitionObservation, off int64)
	}
	queries := []query{
		{sarama.OffsetOldest, sarama.ReadUncommitted, func(p *lagexporter.PartitionObservation, o int64) { p.LogStart = o }},
		{sarama.OffsetNewest, sarama.ReadCommitted, func(p *lagexporter.PartitionObservation, o int64) { p.LastStable = o }},
		{sarama.OffsetNewest, sarama.ReadUncommitted, func(p *lagexporter.PartitionObservation, o int64) { p.HighWatermark = o }},
	}
	var errs lagexporter.CycleErrors
	for _, q := range queries {
		if err := ctx.Err(); err != nil {
			return append(errs, failAll(err)...)
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
			return append(errs, failAll(fmt.Errorf("list offsets: %w", err))...)
		}
		for _, p := range parts {
			blk := resp.GetBlock(names[p], p.Partition)
			switch {
			case blk == nil:
				err = errors.New("partition missing from ListOffsets response")
			case !errors.Is(blk.Err, sarama.ErrNoError):
				err = blk.Err
			default:
				q.set(p, blk.Offset)
				continue
			}
			if p.Error == "" {
				p.Error = err.Error()
				errs = append(errs, lagexporter.CycleError{Kind: lagexporter.ErrKindListOffsets,
					Subject: fmt.Sprintf("%s/%d", names[p], p.Partition), Message: err.Error()})
			}
		}
	}
	for _, p := range parts {
		if p.Error == "" { // keep log start <= LSO <= HW even if a retention step ran between the reads
			p.LastStable = max(p.LastStable, p.LogStart)
			p.HighWatermark = max(p.HighWatermark, p.LastStable)
		}
	}
	return errs
}
