package lagread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// CommitOffsets commits offsets (topic -> partition -> next offset to read) for group the way Kafka's admin client
// alters a group's offsets: an OffsetCommit with no generation and no member id, sent to the group's coordinator
// (found with one FindCoordinator). The group must have no active members. Like the admin client, it retries while
// the coordinator is not available yet or is loading its offsets (a fresh cluster creating __consumer_offsets), for
// up to commitRetryFor or until ctx ends. Used by integration tests and cmd/bench-lag; not part of the lag loop.
func (c *ClusterReader) CommitOffsets(ctx context.Context, group string, offsets map[string]map[int32]int64) error {
	deadline := time.Now().Add(commitRetryFor)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		err := c.commitOffsets(ctx, group, offsets)
		if err == nil || !retriableCoordinatorError(err) || time.Now().Add(backoff).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
	}
}

// commitRetryFor bounds CommitOffsets' retries of a coordinator that is not ready (Kafka's admin client waits up to
// default.api.timeout.ms, 60 s).
const commitRetryFor = 30 * time.Second

func retriableCoordinatorError(err error) bool {
	return errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) || errors.Is(err, sarama.ErrOffsetsLoadInProgress) ||
		errors.Is(err, sarama.ErrNotCoordinatorForConsumer)
}

func (c *ClusterReader) commitOffsets(ctx context.Context, group string, offsets map[string]map[int32]int64) error {
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

// Coordinators returns the number of distinct group coordinators seen in the last Groups call.
func (c *ClusterReader) Coordinators() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[int32]bool{}
	for _, id := range c.coordOf {
		seen[id] = true
	}
	return len(seen)
}

// Admin is the small set of cluster changes cmd/bench-lag and tests need (topics, records, group deletion) to set up
// what a ClusterReader then reads, kept here so that sarama stays inside the Kafka adapter.
type Admin struct {
	adm  sarama.ClusterAdmin
	prod sarama.SyncProducer
}

// NewAdmin connects an admin client and a producer (manual partitioning, acks from all replicas).
func NewAdmin(seeds []string, conf *sarama.Config) (*Admin, error) {
	adm, err := sarama.NewClusterAdmin(seeds, conf)
	if err != nil {
		return nil, fmt.Errorf("connect admin: %w", err)
	}
	pc := *conf
	pc.Producer.Partitioner = sarama.NewManualPartitioner
	pc.Producer.Return.Successes = true
	pc.Producer.RequiredAcks = sarama.WaitForAll
	prod, err := sarama.NewSyncProducer(seeds, &pc)
	if err != nil {
		_ = adm.Close()
		return nil, fmt.Errorf("connect producer: %w", err)
	}
	return &Admin{adm: adm, prod: prod}, nil
}

// Close closes the producer and the admin client.
func (a *Admin) Close() error { return errors.Join(a.prod.Close(), a.adm.Close()) }

// CreateTopic creates topic with partitions partitions (replication 1) and the given configs.
func (a *Admin) CreateTopic(topic string, partitions int32, configs map[string]string) error {
	entries := map[string]*string{}
	for k, v := range configs {
		entries[k] = &v
	}
	if err := a.adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1, ConfigEntries: entries}, false); err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// DeleteTopic deletes topic.
func (a *Admin) DeleteTopic(topic string) error {
	if err := a.adm.DeleteTopic(topic); err != nil {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	return nil
}

// DeleteGroup deletes a consumer group (it must have no members).
func (a *Admin) DeleteGroup(group string) error {
	if err := a.adm.DeleteConsumerGroup(group); err != nil {
		return fmt.Errorf("delete group %s: %w", group, err)
	}
	return nil
}

// Produce writes n small records to each listed partition of topic and waits for the acks.
func (a *Admin) Produce(topic string, partitions []int32, n int) error {
	msgs := make([]*sarama.ProducerMessage, 0, len(partitions)*n)
	for _, p := range partitions {
		for i := range n {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: p, Value: sarama.StringEncoder(fmt.Sprintf("record-%d", i))})
		}
	}
	if err := a.prod.SendMessages(msgs); err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	return nil
}
