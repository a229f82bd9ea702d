package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// CommitOffsets commits offsets (topic -> partition -> next offset to read) for group the way Kafka's admin client
// alters a group's offsets: an OffsetCommit with no generation and no member id, sent to the group's coordinator
// (found with one FindCoordinator). The group must have no active members. Used by integration tests and
// cmd/bench-lag; it is not part of the lag loop.
func (c *ClusterReader) CommitOffsets(ctx context.Context, group string, offsets map[string]map[int32]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	coord, err := c.findCoordinator(group)
	if err != nil {
		return err
	}
	req := sarama.NewOffsetCommitRequest(c.conf, group)
	req.ConsumerGroupGeneration = sarama.GroupGenerationUndefined
	for topic, parts := range offsets {
		for p, off := range parts {
			req.AddBlock(topic, p, off, 0, "")
		}
	}
	c.requests.Add(1)
	resp, err := coord.CommitOffset(req)
	if err != nil {
		return fmt.Errorf("commit offsets for group %s: %w", group, err)
	}
	var errs []error
	for topic, parts := range resp.Errors {
		for p, kerr := range parts {
			if !errors.Is(kerr, sarama.ErrNoError) {
				errs = append(errs, fmt.Errorf("commit offset for group %s %s/%d: %w", group, topic, p, kerr))
			}
		}
	}
	return errors.Join(errs...)
}

func (c *ClusterReader) findCoordinator(group string) (*sarama.Broker, error) {
	ids := c.Brokers()
	if len(ids) == 0 {
		if _, err := c.Metadata(context.Background()); err != nil && len(c.Brokers()) == 0 {
			return nil, err
		}
		ids = c.Brokers()
	}
	var last error
	for _, id := range ids {
		b, err := c.broker(id)
		if err != nil {
			last = err
			continue
		}
		c.requests.Add(1)
		resp, err := b.FindCoordinator(&sarama.FindCoordinatorRequest{Version: 2, CoordinatorKey: group,
			CoordinatorType: sarama.CoordinatorGroup})
		if err == nil && !errors.Is(resp.Err, sarama.ErrNoError) {
			err = resp.Err
		}
		if err != nil {
			last = err
			continue
		}
		return c.broker(resp.Coordinator.ID())
	}
	return nil, fmt.Errorf("find coordinator of group %s: %w", group, last)
}
