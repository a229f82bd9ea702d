package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// ReadTopic reads every record of topic from the log start up to the high watermark each partition had when the
// read began (not what is appended meanwhile), in offset order per partition: how the collector reads back a
// compacted state topic of its own at start. It fails on the first error, or when ctx ends first (bound it).
func ReadTopic(ctx context.Context, brokers []string, sc *sarama.Config, topic string) ([]Record, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	sc.Consumer.Return.Errors = true
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("read %s: connect to %v: %w", topic, brokers, err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("read %s: partitions: %w", topic, err)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	defer cons.Close()
	var out []Record
	for _, p := range parts {
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: log start: %w", topic, p, err)
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("read %s/%d: high watermark: %w", topic, p, err)
		}
		if end <= start {
			continue
		}
		pc, err := cons.ConsumePartition(topic, p, start)
		if err != nil {
			return nil, fmt.Errorf("read %s/%d from %d: %w", topic, p, start, err)
		}
		err = func() error {
			defer pc.AsyncClose()
			for {
				select {
				case <-ctx.Done():
					return fmt.Errorf("read %s/%d up to %d: %w", topic, p, end, context.Cause(ctx))
				case cerr, ok := <-pc.Errors():
					if ok {
						return fmt.Errorf("read %s/%d: %w", topic, p, cerr)
					}
					return fmt.Errorf("read %s/%d: consumer closed", topic, p)
				case m, ok := <-pc.Messages():
					if !ok {
						return errors.New("consumer closed")
					}
					out = append(out, fromSarama(m))
					// Compaction leaves gaps, and transaction markers are never delivered: stop at the last offset
					// below the end, whichever record carries it.
					if m.Offset+1 >= end {
						return nil
					}
				}
			}
		}()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EndOffsets returns the high watermark of every partition of topic.
func EndOffsets(brokers []string, sc *sarama.Config, topic string) (map[int32]int64, error) {
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	client, err := sarama.NewClient(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: connect to %v: %w", topic, brokers, err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: partitions: %w", topic, err)
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", topic, p, err)
		}
		out[p] = end
	}
	return out, nil
}

// CommittedOffsets returns group's committed offsets (the next offsets to read) of topic's partitions, with one
// OffsetFetch through a fresh client; a partition without a commit is absent.
func CommittedOffsets(brokers []string, sc *sarama.Config, group, topic string, partitions []int32) (map[int32]int64, error) {
	adm, err := sarama.NewClusterAdmin(brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s on %s: connect to %v: %w", group, topic, brokers, err)
	}
	defer adm.Close()
	resp, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s on %s: %w", group, topic, err)
	}
	out := make(map[int32]int64, len(partitions))
	for p, b := range resp.Blocks[topic] {
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("committed offset of %s on %s/%d: %w", group, topic, p, b.Err)
		}
		if b.Offset >= 0 {
			out[p] = b.Offset
		}
	}
	return out, nil
}
