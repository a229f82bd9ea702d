package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency"
)

// CheckpointInterval is how often the replay trackers' checkpoints are published (and the receipts offsets they
// cover released for commit): the consumer's commit interval.
const CheckpointInterval = time.Second

// replayCheckpoints carries replay classification across a collector restart (docs/collector.md, "Restarts do not
// change history"). The engine's replay trackers live in memory; without them a restarted collector would take a
// re-read record for a first processing, and a restart during a replay episode would forget the episode. So every
// tracker the receipts path (or the commit bounds) moves is checkpointed to a compacted topic of Tidemark's own,
// keyed by (group, topic, partition), and restored before the paths start.
//
// A receipts path's checkpoint must agree with the receipts topic's committed offsets, or a re-read receipt is
// classified against a state that already counts it (a redelivery of itself) or misses what came before. Each
// checkpoint therefore names the receipts partition and the offset after the batch it was taken after, and a
// receipts offset is released for commit only once the checkpoints of every batch below it are published. After a
// restart the group re-reads from its committed offset C ≤ the checkpoint's offset N: receipts of the path in
// [C, N) were stored and are counted by the checkpoint, so they are skipped (their rows exist; the tracker does not
// see them twice); from N on the restored tracker classifies exactly as the killed one would have.
//
// Safe for concurrent use.
type replayCheckpoints struct {
	topic string
	log   *slog.Logger
	// owner names the deployment whose checkpoints these are: the receipts group and the Kafka cluster id
	// (setOwner). Every key carries it, and restore reads only its own, so two deployments sharing the state topic
	// (a default name, a mirrored cluster) never load each other's trackers.
	owner string
	// Published and Errors count checkpoints published and failed publish rounds (tests and logs).
	Published, Errors atomic.Uint64

	mu sync.Mutex // guards the fields below
	// send publishes (the collector's producer, set once it is connected).
	send func(ctx context.Context, ms []kafka.Message) error
	// queued are the checkpoints of receipts batches handled but not yet marked, per receipts partition, in read
	// order: a batch's checkpoint may be published only once every batch before it is stored too.
	queued map[source][]queuedCheckpoint
	// pending are the checkpoints to publish next, the newest per path.
	pending map[pathKey]checkpoint
	// published is, per path, the last checkpoint published (or restored): the durable state a commit observation
	// is applied to when nothing newer waits (committed).
	published map[pathKey]checkpoint
	// marks are the receipts offsets waiting for the next publish, per partition (the latest call wins: a new
	// session's marks replace an ended one's).
	marks map[source]pendingMark
	// restored holds, per path, the receipts position its restored checkpoint was taken at: receipts of the path
	// below it were processed by an earlier process. An entry is dropped once the path is past it.
	restored map[pathKey]position
	// restoredEnd is, per receipts partition, the highest restored position on it: past it no receipt of that
	// partition can be skipped, and its entries are dropped at once.
	restoredEnd map[source]int64
	hasRestored atomic.Bool
	// held are the receipts partitions this replica's current receipts session holds, heldKnown false before the
	// first session (at start every restored path counts as held until the first assignment says otherwise).
	held      map[source]bool
	heldKnown bool
}

type pathKey struct {
	group, topic string
	partition    int32
}

// position is a receipts topic partition and the offset after the last receipt record a checkpoint counts; source
// -1 when the checkpoint is not tied to receipts (commit bounds).
type position struct {
	topic  string
	source int32
	next   int64
}

// source is a partition of the receipts topic.
type source struct {
	topic     string
	partition int32
}

type checkpoint struct {
	state latency.ReplayCheckpoint
	pos   position
}

type queuedCheckpoint struct {
	next  int64
	paths []*latency.Path
	cps   []latency.ReplayCheckpoint
}

type pendingMark struct {
	next int64
	mark func(int64)
}

func newReplayCheckpoints(topic string, log *slog.Logger) *replayCheckpoints {
	return &replayCheckpoints{topic: topic, log: log, queued: map[source][]queuedCheckpoint{},
		pending: map[pathKey]checkpoint{}, published: map[pathKey]checkpoint{}, marks: map[source]pendingMark{}, restored: map[pathKey]position{},
		restoredEnd: map[source]int64{}, held: map[source]bool{}}
}

// setOwner sets the deployment's identity, the receipts group and the Kafka cluster id, before restore.
func (c *replayCheckpoints) setOwner(group, clusterID string) {
	c.mu.Lock()
	c.owner = group + "@" + clusterID
	c.mu.Unlock()
}

// setSender sets how checkpoints are published.
func (c *replayCheckpoints) setSender(send func(context.Context, []kafka.Message) error) {
	c.mu.Lock()
	c.send = send
	c.mu.Unlock()
}

// restore feeds the checkpoints read from the state topic (last record per key wins; a tombstone forgets the key)
// into engine's paths, before any record. ends are the high watermarks of receiptsTopic, the receipts topic in use:
// a position on another topic is dropped (its receipts must not be skipped) while its tracker state is kept, and so
// is one beyond its partition's end (an earlier incarnation of the topic, deleted and created again). Records that do not
// decode are logged and skipped: the path then starts without history, as before checkpoints existed.
func (c *replayCheckpoints) restore(recs []kafka.Record, engine *latency.Engine, receiptsTopic string, ends map[int32]int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.restoreLocked(recs, engine, receiptsTopic, ends, nil)
}

// restoreLocked is restore limited, when only is not nil, to the checkpoints positioned on those receipts
// partitions. Checkpoints of other owners, and keys of the version before owners, are skipped (counted in the log).
func (c *replayCheckpoints) restoreLocked(recs []kafka.Record, engine *latency.Engine, receiptsTopic string, ends map[int32]int64,
	only map[source]bool) int {
	last := map[string]*kafka.Record{}
	for i := range recs {
		last[string(recs[i].Key)] = &recs[i]
	}
	n, foreign := 0, 0
	for _, r := range last {
		if r.Value == nil {
			continue
		}
		owner, k, err := decodePathKey(r.Key)
		if err == nil && owner != c.owner {
			foreign++
			continue
		}
		var cp checkpoint
		if err == nil {
			cp, err = decodeCheckpoint(r.Value)
		}
		if err != nil {
			c.log.Warn("skipping a replay checkpoint that does not decode", "topic", c.topic, "offset", r.Offset, "err", err)
			continue
		}
		if only != nil && !only[source{cp.pos.topic, cp.pos.source}] {
			continue
		}
		engine.Path(k.group, k.topic, k.partition).Restore(cp.state)
		n++
		c.published[k] = cp
		if end, ok := ends[cp.pos.source]; cp.pos.topic == receiptsTopic && cp.pos.source >= 0 && ok && cp.pos.next <= end {
			c.restored[k] = cp.pos
			src := source{cp.pos.topic, cp.pos.source}
			c.restoredEnd[src] = max(c.restoredEnd[src], cp.pos.next)
		}
	}
	c.hasRestored.Store(len(c.restored) > 0)
	if foreign > 0 {
		c.log.Info("replay checkpoints of other deployments skipped", "topic", c.topic, "owner", c.owner, "skipped", foreign)
	}
	return n
}

// reassigned is the receipts group's new assignment (parts of receiptsTopic, at the start of a session): the
// per-path state moves with the partition. A path belongs to the receipts partition its receipts arrive on (the
// instrumentation keys receipts by source topic/partition, so all of a path's receipts share one). For a partition
// this replica no longer holds, its paths' trackers are removed from engine and their checkpoints forgotten (the
// new holder restores them; this replica must neither publish a stale one nor apply commits to it). For a partition
// newly held, read returns the state topic and the receipts topic's ends as of now, and the paths checkpointed on it
// are restored exactly as a restarted process restores them (restore): the replica that held it before published
// its checkpoints before its last commit, so receipts re-read below a checkpoint are skipped and the rest are
// classified by the tracker the previous holder had. An error from read leaves nothing changed for the newly held
// partitions but the revocations done; the caller ends the session and retries.
func (c *replayCheckpoints) reassigned(ctx context.Context, receiptsTopic string, parts []int32, engine *latency.Engine,
	read func(context.Context) ([]kafka.Record, map[int32]int64, error)) (gained, lost int, err error) {
	if c == nil {
		return 0, 0, nil
	}
	now := map[source]bool{}
	for _, p := range parts {
		now[source{receiptsTopic, p}] = true
	}
	c.mu.Lock()
	var revoked []source
	if c.heldKnown {
		for s := range c.held {
			if !now[s] {
				revoked = append(revoked, s)
			}
		}
	} else {
		// First session: paths restored at start on partitions another replica holds are that replica's.
		seen := map[source]bool{}
		for _, cp := range c.published {
			if s := (source{cp.pos.topic, cp.pos.source}); cp.pos.source >= 0 && !now[s] && !seen[s] {
				seen[s] = true
				revoked = append(revoked, s)
			}
		}
	}
	for _, s := range revoked {
		lost += c.dropLocked(s, engine)
	}
	newly := map[source]bool{}
	for s := range now {
		if !c.heldKnown || !c.held[s] {
			newly[s] = true
		}
	}
	c.held, c.heldKnown = now, true
	c.mu.Unlock()
	if len(newly) == 0 || read == nil {
		return 0, lost, nil
	}
	recs, ends, err := read(ctx)
	if err != nil {
		c.mu.Lock()
		for s := range newly {
			delete(c.held, s) // not restored: the next session restores it
		}
		c.mu.Unlock()
		return 0, lost, fmt.Errorf("read replay state for receipts partitions newly assigned: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range newly {
		// Whatever this replica still has of a newly held partition's paths is older than what the previous holder
		// published: start from the checkpoints alone.
		c.dropLocked(s, engine)
	}
	return c.restoreLocked(recs, engine, receiptsTopic, ends, newly), lost, nil
}

// dropLocked forgets the paths checkpointed on receipts partition s: removed from engine, their checkpoints (queued,
// pending, published, restored positions) dropped. It returns how many paths it removed.
func (c *replayCheckpoints) dropLocked(s source, engine *latency.Engine) int {
	gone := map[pathKey]bool{}
	for _, q := range c.queued[s] {
		for _, p := range q.paths {
			g, t, part := p.Key()
			gone[pathKey{g, t, part}] = true
		}
	}
	delete(c.queued, s)
	delete(c.marks, s)
	for k, cp := range c.pending {
		if cp.pos.topic == s.topic && cp.pos.source == s.partition {
			gone[k] = true
		}
	}
	for k, cp := range c.published {
		if cp.pos.topic == s.topic && cp.pos.source == s.partition {
			gone[k] = true
		}
	}
	for k, pos := range c.restored {
		if pos.topic == s.topic && pos.source == s.partition {
			gone[k] = true
		}
	}
	for k := range gone {
		delete(c.pending, k)
		delete(c.published, k)
		delete(c.restored, k)
		engine.RemovePath(k.group, k.topic, k.partition)
	}
	delete(c.restoredEnd, s)
	c.hasRestored.Store(len(c.restored) > 0)
	return len(gone)
}

// trim forgets the published checkpoints of paths the engine no longer has (evicted idle or over its bound, or
// removed): a later path of the same key starts afresh, so applying commits to its old checkpoint would publish a
// state no tracker has. Called after the collector's housekeeping evicts paths.
func (c *replayCheckpoints) trim(has func(group, topic string, partition int32) bool) int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for k := range c.published {
		if _, pend := c.pending[k]; !pend && !has(k.group, k.topic, k.partition) {
			delete(c.published, k)
			n++
		}
	}
	return n
}

// done reports whether the receipt of path k in receipts record (src, offset) was processed before the restart
// (its rows are stored and its restored checkpoint counts it): it must be skipped. Cheap when nothing was restored.
func (c *replayCheckpoints) done(k pathKey, src source, offset int64) bool {
	if c == nil || !c.hasRestored.Load() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if end, ok := c.restoredEnd[src]; ok && offset >= end {
		// Past every restored position of this receipts partition: nothing of it is skipped any more.
		for pk, pos := range c.restored {
			if pos.topic == src.topic && pos.source == src.partition {
				delete(c.restored, pk)
			}
		}
		delete(c.restoredEnd, src)
		c.hasRestored.Store(len(c.restored) > 0)
		return false
	}
	pos, ok := c.restored[k]
	if !ok || pos.topic != src.topic || pos.source != src.partition {
		return false
	}
	if offset < pos.next {
		return true
	}
	delete(c.restored, k) // past it: the restored tracker takes over
	return false
}

// queue records the checkpoints of paths a receipts batch of partition source moved, taken right after the batch
// (next is the offset after its last record). Call it before the batch's rows are handed to the sink.
func (c *replayCheckpoints) queue(src source, next int64, paths []*latency.Path) {
	if c == nil || len(paths) == 0 {
		return
	}
	q := queuedCheckpoint{next: next, paths: paths, cps: make([]latency.ReplayCheckpoint, len(paths))}
	for i, p := range paths {
		q.cps[i] = p.Checkpoint()
	}
	c.mu.Lock()
	// In offset order: a batch whose receipts waited for topic metadata (parking) is queued after later batches.
	qs := c.queued[src]
	i := len(qs)
	for i > 0 && qs[i-1].next > next {
		i--
	}
	c.queued[src] = slices.Insert(qs, i, q)
	c.mu.Unlock()
}

// marked is the receipts path's mark: every batch of source below next is stored, so their checkpoints are
// published next, and after that mark(next) releases the offset for commit.
func (c *replayCheckpoints) marked(src source, next int64, mark func(int64)) {
	c.mu.Lock()
	qs := c.queued[src]
	i := 0
	for ; i < len(qs) && qs[i].next <= next; i++ {
		for j, p := range qs[i].paths {
			g, t, part := p.Key()
			c.pending[pathKey{g, t, part}] = checkpoint{state: qs[i].cps[j], pos: position{src.topic, src.partition, qs[i].next}}
		}
	}
	c.queued[src] = qs[i:]
	c.marks[src] = pendingMark{next, mark}
	c.mu.Unlock()
}

// commitObservation is a group's committed offset on a path, as the lag exporter read it at At (reference clock).
type commitObservation struct {
	path   pathKey
	offset int64
	at     time.Time
}

// committed applies commit observations the engine's paths were just given to the checkpoints of those paths, so
// that a commit (and the rewind it may start) is durable even when no receipt of the path is handled after it: a
// group that committed its first pass and was reset to earliest is replaying, and a restart before its first
// replayed receipt is checkpointed must not forget that. Each observation goes into every checkpoint of the path
// not yet published (queued and pending: taken before the engine saw it) and, when none is pending, into the last
// published one, which is published again at its position if the commit changed it. Only paths that have a
// checkpoint are followed: the others have no receipts history to keep. Observations with offset < 0 (no commit)
// are ignored, as the engine is only given commits.
func (c *replayCheckpoints) committed(obs []commitObservation) {
	if c == nil || len(obs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var queued map[pathKey][]*latency.ReplayCheckpoint
	for _, qs := range c.queued {
		for i := range qs {
			for j, p := range qs[i].paths {
				if queued == nil {
					queued = map[pathKey][]*latency.ReplayCheckpoint{}
				}
				g, t, part := p.Key()
				k := pathKey{g, t, part}
				queued[k] = append(queued[k], &qs[i].cps[j])
			}
		}
	}
	for _, o := range obs {
		if o.offset < 0 {
			continue
		}
		for _, cp := range queued[o.path] {
			*cp = cp.WithCommit(o.offset, o.at)
		}
		if cp, ok := c.pending[o.path]; ok {
			cp.state = cp.state.WithCommit(o.offset, o.at)
			c.pending[o.path] = cp
			continue
		}
		cp, ok := c.published[o.path]
		if !ok || cp.state.SeenCommit && cp.state.Committed == o.offset {
			continue // not followed, or nothing changes
		}
		cp.state = cp.state.WithCommit(o.offset, o.at)
		c.pending[o.path] = cp
	}
}

// put records checkpoints not tied to receipts offsets (the commit bounds' paths), published next.
func (c *replayCheckpoints) put(paths []*latency.Path) {
	if c == nil {
		return
	}
	c.mu.Lock()
	for _, p := range paths {
		g, t, part := p.Key()
		c.pending[pathKey{g, t, part}] = checkpoint{state: p.Checkpoint(), pos: position{source: -1}}
	}
	c.mu.Unlock()
}

// publish sends the pending checkpoints and then releases the marks that waited for them. On failure both stay
// pending (newer ones taking precedence) for the next round, and commits wait: nothing is released early.
func (c *replayCheckpoints) publish(ctx context.Context) error {
	c.mu.Lock()
	pending, marks, send := c.pending, c.marks, c.send
	if send == nil {
		c.mu.Unlock()
		return errors.New("replay checkpoints: not connected")
	}
	c.pending, c.marks = map[pathKey]checkpoint{}, map[source]pendingMark{}
	c.mu.Unlock()
	if len(pending) > 0 {
		msgs := make([]kafka.Message, 0, len(pending))
		for k, cp := range pending {
			msgs = append(msgs, kafka.Message{Topic: c.topic, Partition: -1, Key: encodePathKey(c.owner, k), Value: encodeCheckpoint(cp)})
		}
		if err := send(ctx, msgs); err != nil {
			c.Errors.Add(1)
			c.mu.Lock()
			for k, cp := range pending {
				if _, newer := c.pending[k]; !newer {
					c.pending[k] = cp
				}
			}
			for s, m := range marks {
				if _, newer := c.marks[s]; !newer {
					c.marks[s] = m
				}
			}
			c.mu.Unlock()
			return fmt.Errorf("publish %d replay checkpoints to %s: %w", len(msgs), c.topic, err)
		}
		c.Published.Add(uint64(len(msgs)))
		c.mu.Lock()
		for k, cp := range pending {
			c.published[k] = cp
		}
		c.mu.Unlock()
	}
	for _, m := range marks {
		m.mark(m.next)
	}
	return nil
}

// run publishes every CheckpointInterval until ctx ends.
func (c *replayCheckpoints) run(ctx context.Context) error {
	t := time.NewTicker(CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.publish(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("replay checkpoints not published; receipts offsets wait for them", "err", err)
		}
	}
}

// Wire formats. Key (version 2): 0x00, 0x02, uvarint length + owner (receipts group "@" Kafka cluster id), uvarint
// length + group, uvarint length + topic, partition (int32, big-endian). Version 1 keys (no marker, no owner) were
// written before owners: they are another deployment's as far as restore knows (a restart after the upgrade
// starts those paths without history once). Value (version 1): version byte, uvarint length + receipts topic (empty:
// no position), its partition (int32, -1: none), next offset (int64), latency.ReplayCheckpoint's 50 bytes.

func encodePathKey(owner string, k pathKey) []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen16+len(owner)+len(k.group)+len(k.topic)+4)
	b = append(b, 0, 2)
	for _, s := range []string{owner, k.group, k.topic} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint32(b, uint32(k.partition))
}

var errBadStateRecord = errors.New("malformed replay state record")

// decodePathKey returns a key's owner and path; a version-1 key decodes with owner "\x00v1" (nobody's).
func decodePathKey(b []byte) (string, pathKey, error) {
	var k pathKey
	str := func() (string, bool) {
		n, w := binary.Uvarint(b)
		if w <= 0 || n > uint64(len(b)-w) {
			return "", false
		}
		s := string(b[w : w+int(n)])
		b = b[w+int(n):]
		return s, true
	}
	owner := "\x00v1"
	var ok0 = true
	if len(b) >= 2 && b[0] == 0 && b[1] == 2 {
		b = b[2:]
		owner, ok0 = str()
	}
	var ok1, ok2 bool
	k.group, ok1 = str()
	k.topic, ok2 = str()
	if !ok0 || !ok1 || !ok2 || len(b) != 4 {
		return "", pathKey{}, fmt.Errorf("key: %w", errBadStateRecord)
	}
	k.partition = int32(binary.BigEndian.Uint32(b))
	return owner, k, nil
}

func encodeCheckpoint(cp checkpoint) []byte {
	st, _ := cp.state.MarshalBinary() // never fails
	b := make([]byte, 0, 1+binary.MaxVarintLen16+len(cp.pos.topic)+4+8+len(st))
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(len(cp.pos.topic)))
	b = append(b, cp.pos.topic...)
	b = binary.BigEndian.AppendUint32(b, uint32(cp.pos.source))
	b = binary.BigEndian.AppendUint64(b, uint64(cp.pos.next))
	return append(b, st...)
}

func decodeCheckpoint(b []byte) (checkpoint, error) {
	bad := fmt.Errorf("value of %d bytes: %w", len(b), errBadStateRecord)
	if len(b) < 1 || b[0] != 1 {
		return checkpoint{}, bad
	}
	b = b[1:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n > uint64(len(b)-w) || len(b)-w-int(n) < 12 {
		return checkpoint{}, bad
	}
	var cp checkpoint
	cp.pos.topic = string(b[w : w+int(n)])
	b = b[w+int(n):]
	cp.pos.source, cp.pos.next = int32(binary.BigEndian.Uint32(b)), int64(binary.BigEndian.Uint64(b[4:]))
	if err := cp.state.UnmarshalBinary(b[12:]); err != nil {
		return checkpoint{}, err
	}
	return cp, nil
}
