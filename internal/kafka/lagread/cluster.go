package lagread

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lagexporter"
)

// ClusterReader implements lagexporter.Cluster over sarama. Every read is batched so that one poll cycle costs
// O(brokers + group coordinators) requests, independent of the number of groups and partitions:
//
//   - Metadata: 1 Metadata request (v11, with topic ids) to any broker.
//   - Groups: 1 ListGroups (v5, with the group types filter) per broker (a broker lists exactly the groups it
//     coordinates, so no FindCoordinator is needed), then per coordinator 1 describe request per group type it has:
//     DescribeGroups (classic), ConsumerGroupDescribe (KIP-848), ShareGroupDescribe (KIP-932), StreamsGroupDescribe
//     (KIP-1071); the last two, which sarama lacks, over franz-go's kmsg (cluster_franz.go).
//   - CommittedOffsets: 1 OffsetFetch v8 (multi-group, KIP-709) per coordinator per 10,000 groups.
//   - ListOffsets: 3 ListOffsets per partition leader (log start; last stable offset with READ_COMMITTED; high
//     watermark), in that order so that log start <= LSO <= HW holds even while the log moves.
//   - ListOffsets also reads the topics' retention settings, cached DefaultTopicConfigTTL (1 DescribeConfigs for all
//     the topics due), and, for topics with a finite retention.bytes, their log sizes (1 DescribeLogDirs per leader).
//     A partition whose leader moved mid-cycle is asked again once on the new leader (1 Metadata, then 3 ListOffsets
//     per new leader).
//   - ReadRecords: at most 1 Fetch per leader per isolation level, a few KiB per partition.
//
// Partial failure keeps every other result: a broker that fails marks only its partitions or groups, and the error
// is a lagexporter.CycleErrors naming each failed part. A ClusterReader is safe for use by one loop at a time.
type ClusterReader struct {
	seeds []string
	conf  *sarama.Config
	// FetchPartitionBytes bounds each partition's share of a record-timestamp Fetch (the broker still returns one whole
	// batch when the first is larger, KIP-74). Default 16 KiB.
	FetchPartitionBytes int32
	// Logger receives the one-time warnings of reads a broker cannot answer (an RPC or version it lacks); nil: none.
	Logger *slog.Logger

	requests atomic.Int64

	settings      topicSettings // retention settings read with DescribeConfigs (cluster_configs.go)
	leaderRetries atomic.Int64  // partitions ListOffsets asked again on a moved leader (cluster_offsets.go)

	franzMu sync.Mutex  // guards franz
	franz   *kgo.Client // transport for the RPCs sarama lacks, created on first use

	mu         sync.Mutex                               // guards the fields below
	brokers    map[int32]*sarama.Broker                 // open connections by broker id
	addrs      map[int32]string                         // broker addresses from the last metadata
	leaders    map[tp]int32                             // partition leaders from the last metadata
	epochs     leaderEpochs                             // who led each leader epoch seen (LogAppendTime's clock)
	coordOf    map[string]int32                         // group -> coordinator, from the last ListGroups
	typeOf     map[string]string                        // group -> group type, from the last ListGroups
	lastGroups map[int32][]lagexporter.GroupObservation // last listing per coordinator, kept when one fails
	versions   map[int32]map[int16][2]int16             // broker -> API key -> [min, max] version, per connection
	// unsupported holds the reads some broker could not answer, with the last reason (see noteUnsupported).
	unsupported map[unsupportedKey]string
}

type tp struct {
	topic     string
	partition int32
}

// offsetFetchBatch is the most groups one OffsetFetch request asks for: a coordinator of up to 10,000 groups costs
// one request per cycle (cmd/bench-lag: 25,000 groups, 3 requests), and one response stays within a few tens of MB
// (10,000 groups × 20 partitions, ~30 bytes each) far below sarama's 100 MB MaxResponseSize.
const offsetFetchBatch = 10000

// NewClusterReader returns a reader for the cluster reachable through seeds. conf must set Version to a Kafka 3+
// protocol (Kafka 4 removed older request versions; use sarama.V4_0_0_0). Connections are opened lazily.
func NewClusterReader(seeds []string, conf *sarama.Config) (*ClusterReader, error) {
	if len(seeds) == 0 {
		return nil, errors.New("new cluster reader: no bootstrap brokers")
	}
	if !conf.Version.IsAtLeast(sarama.V3_0_0_0) {
		return nil, fmt.Errorf("new cluster reader: sarama Config.Version %s is older than 3.0 (multi-group OffsetFetch)", conf.Version)
	}
	if err := conf.Validate(); err != nil {
		return nil, fmt.Errorf("new cluster reader: %w", err)
	}
	return &ClusterReader{seeds: seeds, conf: conf, FetchPartitionBytes: 16 << 10, brokers: map[int32]*sarama.Broker{},
		addrs: map[int32]string{}, leaders: map[tp]int32{}, coordOf: map[string]int32{}, typeOf: map[string]string{},
		lastGroups: map[int32][]lagexporter.GroupObservation{}, versions: map[int32]map[int16][2]int16{},
		unsupported: map[unsupportedKey]string{}}, nil
}

// Requests returns the number of Kafka requests sent since the reader was created.
func (c *ClusterReader) Requests() int64 { return c.requests.Load() }

// Brokers returns the ids of the brokers in the last metadata, sorted.
func (c *ClusterReader) Brokers() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]int32, 0, len(c.addrs))
	for id := range c.addrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Close closes every connection.
func (c *ClusterReader) Close() error {
	c.franzMu.Lock()
	if c.franz != nil {
		c.franz.Close()
		c.franz = nil
	}
	c.franzMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for id, b := range c.brokers {
		if err := b.Close(); err != nil && !errors.Is(err, sarama.ErrNotConnected) {
			errs = append(errs, fmt.Errorf("close broker %d: %w", id, err))
		}
		delete(c.brokers, id)
	}
	return errors.Join(errs...)
}

// broker returns an open connection to broker id.
func (c *ClusterReader) broker(id int32) (*sarama.Broker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.brokers[id]; ok {
		if ok, _ := b.Connected(); ok {
			return b, nil
		}
		_ = b.Close()
		delete(c.brokers, id)
	}
	delete(c.versions, id) // a new connection may reach an upgraded broker: ask its API versions again
	addr, ok := c.addrs[id]
	if !ok {
		return nil, fmt.Errorf("broker %d not in metadata", id)
	}
	b := sarama.NewBroker(addr)
	if err := b.Open(c.conf); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
		return nil, fmt.Errorf("connect broker %d at %s: %w", id, addr, err)
	}
	c.brokers[id] = b
	return b, nil
}

// Metadata reads every non-internal topic with its id, partitions and leaders (one request), sorted by topic and
// partition, and keeps the brokers' addresses, the partitions' leaders and their leader epochs for the other reads.
// A topic the answer has an error for is left out and named in the CycleErrors returned with the others; no broker
// answering is an error without topics.
func (c *ClusterReader) Metadata(ctx context.Context) ([]lagexporter.TopicObservation, error) {
	resp, err := c.readMetadata(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.setBrokersLocked(resp.Brokers)
	out, cerrs := c.setTopicsLocked(resp.Topics)
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	if len(cerrs) > 0 {
		return out, cerrs
	}
	return out, nil
}

// readMetadata asks for every topic's metadata, first from the brokers of the last metadata (on their kept
// connections), then from each bootstrap broker on a connection of its own, until one answers or ctx ends. The
// error joins every attempt's.
func (c *ClusterReader) readMetadata(ctx context.Context) (*sarama.MetadataResponse, error) {
	req := sarama.NewMetadataRequest(c.conf.Version, nil)
	var resp *sarama.MetadataResponse
	var errs []error
	try := func(b *sarama.Broker) bool {
		c.requests.Add(1)
		r, err := b.GetMetadata(req)
		if err != nil {
			errs = append(errs, fmt.Errorf("metadata from %s: %w", b.Addr(), err))
			_ = b.Close()
			return false
		}
		resp = r
		return true
	}
	for _, id := range c.Brokers() {
		if ctx.Err() != nil {
			break
		}
		if b, err := c.broker(id); err == nil && try(b) {
			break
		}
	}
	for i := 0; resp == nil && i < len(c.seeds) && ctx.Err() == nil; i++ {
		b := sarama.NewBroker(c.seeds[i])
		if err := b.Open(c.conf); err != nil {
			errs = append(errs, err)
			continue
		}
		ok := try(b)
		_ = b.Close()
		if ok {
			break
		}
	}
	if resp == nil {
		errs = append(errs, ctx.Err())
		return nil, fmt.Errorf("read metadata: %w", errors.Join(errs...))
	}
	return resp, nil
}

// setBrokersLocked keeps the brokers' addresses from a metadata answer and drops the connections to brokers that
// left or moved. c.mu must be held.
func (c *ClusterReader) setBrokersLocked(brokers []*sarama.Broker) {
	c.addrs = make(map[int32]string, len(brokers))
	for _, b := range brokers {
		c.addrs[b.ID()] = b.Addr()
	}
	for id, b := range c.brokers {
		if c.addrs[id] != b.Addr() {
			_ = b.Close()
			delete(c.brokers, id)
			delete(c.versions, id)
		}
	}
}

// setTopicsLocked turns a metadata answer's non-internal topics into observations (partitions sorted by id; a
// partition whose error is other than REPLICA_NOT_AVAILABLE has leader -1), keeps every partition's leader and
// leader epoch, and returns a cycle error per topic answered with an error. After a complete answer, the epochs of
// partitions that are gone are forgotten. c.mu must be held.
func (c *ClusterReader) setTopicsLocked(topics []*sarama.TopicMetadata) ([]lagexporter.TopicObservation, lagexporter.CycleErrors) {
	c.leaders = map[tp]int32{}
	var out []lagexporter.TopicObservation
	var cerrs lagexporter.CycleErrors
	for _, t := range topics {
		if t.IsInternal {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			cerrs = append(cerrs, lagexporter.CycleError{Kind: lagexporter.ErrKindMetadata, Subject: "topic " + t.Name, Message: t.Err.Error()})
			continue
		}
		to := lagexporter.TopicObservation{Topic: t.Name, ID: t.Uuid.String()}
		for _, p := range t.Partitions {
			leader := p.Leader
			if !errors.Is(p.Err, sarama.ErrNoError) && !errors.Is(p.Err, sarama.ErrReplicaNotAvailable) {
				leader = -1
			}
			to.Partitions = append(to.Partitions, lagexporter.PartitionObservation{Partition: p.ID, Leader: leader})
			c.leaders[tp{t.Name, p.ID}] = leader
			c.epochs.observe(tp{t.Name, p.ID}, p.LeaderEpoch, leader)
		}
		sort.Slice(to.Partitions, func(i, j int) bool { return to.Partitions[i].Partition < to.Partitions[j].Partition })
		out = append(out, to)
	}
	if len(cerrs) == 0 { // a complete answer: forget partitions that are gone
		c.epochs.retain(func(k tp) bool { _, ok := c.leaders[k]; return ok })
	}
	return out, cerrs
}

// perBroker runs fn for every broker id concurrently and waits.
func perBroker[T any](ids []int32, fn func(id int32) T) map[int32]T {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := make(map[int32]T, len(ids))
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := fn(id)
			mu.Lock()
			out[id] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func brokerSubject(id int32) string { return "broker " + strconv.Itoa(int(id)) }

// NewReaderConfig returns the sarama configuration ClusterReader expects: Kafka 4 protocol (Kafka 4 removed the old
// request versions sarama defaults to), the given client id, and bounded network timeouts.
func NewReaderConfig(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = clientID
	c.Net.DialTimeout = 10 * time.Second
	c.Net.ReadTimeout = 30 * time.Second
	c.Net.WriteTimeout = 10 * time.Second
	return c
}
