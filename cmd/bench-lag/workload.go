package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// groupClass is how a group of the live workload consumes.
type groupClass int

const (
	keepingUp groupClass = iota // commits the end offset every commit interval
	lagging                     // advances at half the produce rate: its lag grows
	stopped                     // never commits during the run: its lag and time lag grow
)

// classOf spreads the groups: 5% stopped (g%20 == 0), 15% lagging (g%20 in 1..3), 80% keeping up.
func classOf(g int) groupClass {
	switch r := g % 20; {
	case r == 0:
		return stopped
	case r <= 3:
		return lagging
	default:
		return keepingUp
	}
}

// workload is the live traffic of the bench: one producer writing rate records per second to every partition of
// every topic, and one client committing offsets for every moving group (OffsetCommit requests, no group members).
// It keeps each written record's offset and timestamp (the producer's CreateTime, acknowledged by the broker with its
// offset): the record timestamps of the time-lag truth.
type workload struct {
	prod        sarama.SyncProducer
	client      sarama.Client // the committer: OffsetCommit to each group's coordinator, which it caches
	topics      []string
	parts       int
	groups      []string
	groupTopic  func(g int) string
	rate        int
	commitEvery time.Duration

	mu        sync.Mutex
	ts        map[tp][]offTS // per partition, in offset order
	end       map[tp]int64   // next offset to be written
	committed map[gpKey]int64

	produced, commits, errors atomic.Int64
}

type tp struct {
	topic     string
	partition int32
}

type offTS struct {
	offset int64
	ts     time.Time
}

func newWorkload(brokers []string, topics []string, parts int, groups []string,
	groupTopic func(int) string, rate int, commitEvery time.Duration) (*workload, error) {
	conf := sarama.NewConfig()
	conf.ClientID = "bench-lag-producer"
	conf.Version = sarama.V3_6_0_0
	conf.Producer.Partitioner = sarama.NewManualPartitioner
	conf.Producer.Return.Successes = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Flush.MaxMessages = 0
	prod, err := sarama.NewSyncProducer(brokers, conf)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	cconf := sarama.NewConfig()
	cconf.ClientID = "bench-lag-committer"
	cconf.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, cconf)
	if err != nil {
		prod.Close()
		return nil, fmt.Errorf("committer: %w", err)
	}
	return &workload{prod: prod, client: client, topics: topics, parts: parts, groups: groups, groupTopic: groupTopic,
		rate: rate, commitEvery: commitEvery, ts: map[tp][]offTS{}, end: map[tp]int64{}, committed: map[gpKey]int64{}}, nil
}

// produce writes n records to every partition of every topic, timestamped now, and records their offsets.
func (w *workload) produce(n int) error {
	now := time.Now().Truncate(time.Millisecond)
	msgs := make([]*sarama.ProducerMessage, 0, len(w.topics)*w.parts*n)
	for _, t := range w.topics {
		for p := range w.parts {
			for range n {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: t, Partition: int32(p), Timestamp: now,
					Value: sarama.StringEncoder("bench-lag")})
			}
		}
	}
	if err := w.prod.SendMessages(msgs); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range msgs {
		k := tp{m.Topic, m.Partition}
		w.ts[k] = append(w.ts[k], offTS{m.Offset, m.Timestamp})
		w.end[k] = max(w.end[k], m.Offset+1)
	}
	for k, xs := range w.ts { // sarama acknowledges per partition in order; keep the slice sorted regardless
		if !sort.SliceIsSorted(xs, func(i, j int) bool { return xs[i].offset < xs[j].offset }) {
			sort.Slice(xs, func(i, j int) bool { return xs[i].offset < xs[j].offset })
			w.ts[k] = xs
		}
	}
	w.produced.Add(int64(len(msgs)))
	return nil
}

// recordTS returns the timestamp of the record at offset on a partition, if the bench wrote it.
func (w *workload) recordTS(topic string, partition int32, offset int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	xs := w.ts[tp{topic, partition}]
	i := sort.Search(len(xs), func(i int) bool { return xs[i].offset >= offset })
	if i < len(xs) && xs[i].offset == offset {
		return xs[i].ts, true
	}
	return time.Time{}, false
}

// commitAll commits, for every group, the offset start(g, p) on every partition of its topic (retrying a
// coordinator that is still loading the offsets topic of a new cluster).
func (w *workload) commitAll(ctx context.Context, start func(g, p int) int64) error {
	return forEach(len(w.groups), 8, func(g int) error {
		offs := map[int32]int64{}
		for p := range w.parts {
			offs[int32(p)] = start(g, p)
		}
		var err error
		for range 30 {
			if err = w.commit(ctx, g, offs); err == nil {
				return nil
			}
			time.Sleep(time.Second)
		}
		return err
	})
}

func (w *workload) close() {
	_ = w.prod.Close()
	_ = w.client.Close()
}

// commit sends one OffsetCommit request for group g (no member, generation undefined: a simple commit) to its
// coordinator, looked up once and cached by the client, so that a commit costs one request and no FindCoordinator.
func (w *workload) commit(ctx context.Context, g int, offs map[int32]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := w.groupTopic(g)
	coord, err := w.client.Coordinator(w.groups[g])
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", w.groups[g], err)
	}
	req := sarama.NewOffsetCommitRequest(w.client.Config(), w.groups[g])
	req.ConsumerGroupGeneration = sarama.GroupGenerationUndefined
	for p, o := range offs {
		req.AddBlock(t, p, o, 0, "")
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		_ = w.client.RefreshCoordinator(w.groups[g])
		return fmt.Errorf("commit for %s: %w", w.groups[g], err)
	}
	for _, parts := range resp.Errors {
		for p, kerr := range parts {
			if !errors.Is(kerr, sarama.ErrNoError) {
				if errors.Is(kerr, sarama.ErrNotCoordinatorForConsumer) {
					_ = w.client.RefreshCoordinator(w.groups[g])
				}
				return fmt.Errorf("commit for %s %s/%d: %w", w.groups[g], t, p, kerr)
			}
		}
	}
	w.mu.Lock()
	for p, o := range offs {
		w.committed[gpKey{w.groups[g], t, p}] = o
	}
	w.mu.Unlock()
	w.commits.Add(1)
	return nil
}

// run produces every second and commits each moving group once per commit interval (spread evenly over it) until
// ctx ends. Errors are counted (a live workload keeps going) and reported by the caller.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := w.produce(w.rate); err != nil {
				w.errors.Add(1)
			}
		}
	}()
	go func() {
		defer wg.Done()
		var moving []int
		for g := range w.groups {
			if classOf(g) != stopped {
				moving = append(moving, g)
			}
		}
		if len(moving) == 0 {
			return
		}
		gap := w.commitEvery / time.Duration(len(moving))
		next := time.Now()
		for i := 0; ; i = (i + 1) % len(moving) {
			next = next.Add(gap)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Until(next)):
			}
			g := moving[i]
			t := w.groupTopic(g)
			offs := map[int32]int64{}
			w.mu.Lock()
			for p := range w.parts {
				k := tp{t, int32(p)}
				cur := w.committed[gpKey{w.groups[g], t, int32(p)}]
				switch classOf(g) {
				case keepingUp:
					offs[int32(p)] = w.end[k]
				case lagging:
					step := int64(w.rate) * int64(w.commitEvery/time.Second) / 2
					offs[int32(p)] = min(cur+max(step, 1), w.end[k])
				}
			}
			w.mu.Unlock()
			if err := w.commit(ctx, g, offs); err != nil && ctx.Err() == nil {
				w.errors.Add(1)
			}
		}
	}()
	wg.Wait()
}
