package collector

import (
	"encoding/hex"
	"strings"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// batchCache keeps, across the receipts of one batch, what consecutive receipts almost always share (they come
// from one source partition): the engine path, the topic's timestamp type, host ids, and the class
// counts, added to the metrics once per batch instead of once per receipt. The counts, touched, hosts and traces
// hold for the whole batch; the rest for the run of receipts of one (group, topic, partition) (Receipts.enter).
type batchCache struct {
	group, topic string
	partition    int32
	valid        bool
	path         *latency.Path
	tt           instrument.TimestampType
	createHost   string // producer@topic
	live         *liveSeries
	liveFull     bool             // live is nil because collector.max_live_series pairs have series
	view         *kafka.TopicView // the topic's metadata, looked up on the first receipt that needs it
	classes      [latency.NumClasses]int
	skewed       int
	overflow     int // live observations not recorded: their pair had no series (max_live_series)
	// noMeta counts receipts that needed their topic's metadata and had none, by the view's state.
	noMeta [kafka.TopicOverflow + 1]int
	// touched are the paths the batch's receipts went through, in first-use order (their checkpoints follow).
	touched []*latency.Path
	hosts   hostIDs
	traces  traceHexes
}

func (c *batchCache) flush(m *Metrics, path string) {
	for cl, n := range c.classes {
		if n > 0 {
			m.Classes.WithLabelValues(path, latency.Class(cl).String()).Add(float64(n))
		}
	}
	if c.skewed > 0 {
		m.Skewed.WithLabelValues(path).Add(float64(c.skewed))
	}
	if c.overflow > 0 {
		m.LiveOverflow.Add(float64(c.overflow))
	}
	for st, n := range c.noMeta {
		if n > 0 {
			m.WithoutMetadata.WithLabelValues(kafka.TopicState(st).String()).Add(float64(n))
		}
	}
	*c = batchCache{}
}

// hostIDs remembers the engine ids of the hosts a batch's receipts name, so that each name costs the engine's map
// lookup (latency.Engine.Host, which also marks the host used) once per batch instead of once per stamp: a batch's
// receipts nearly always name the same few hosts. latency.Engine.Host allows keeping an id for a batch. It is
// fixed-size: a batch naming more hosts looks the others up each time, as without it.
type hostIDs struct {
	names [8]string
	ids   [8]latency.HostID
	next  int // the slot the next new name takes, round robin
	// broker is the broker_host name of the append leader last placed, its engine id and broker id (-1: none yet).
	leader   int32
	broker   string
	brokerID latency.HostID
}

// id returns the engine's id of the named host (hosts.id), looked up once per batch.
func (h *hostIDs) id(hs *hosts, name string) latency.HostID {
	for i := range h.names {
		if h.names[i] == name && name != "" {
			return h.ids[i]
		}
	}
	id := hs.id(name)
	if name != "" {
		h.names[h.next], h.ids[h.next] = name, id
		h.next = (h.next + 1) % len(h.names)
	}
	return id
}

// brokerHost returns the engine id and the broker_host name of broker leader's clock (leader >= 0), built and
// looked up once per batch while the leader stays the same.
func (h *hostIDs) brokerHost(hs *hosts, leader int32) (latency.HostID, string) {
	if h.broker == "" || h.leader != leader {
		h.leader, h.broker = leader, brokerHost(leader)
		h.brokerID = hs.id(h.broker)
	}
	return h.brokerID, h.broker
}

// traceHexes holds the lowercase hex trace and span ids (traceHex) of one receipts record's receipts that carry a
// trace, made in one string per record instead of one per receipt: the receipts path holds every row in flight until
// ClickHouse acknowledges it, and every object it holds is one more for the collector to allocate and mark. The
// rows of one record are made, held and released together, so none outlives the string's other users by long.
type traceHexes struct {
	s    string
	next int // where the next receipt's ids start in s
}

// traceHexLen is one receipt's share of traceHexes.s: 32 hex digits of trace id, 16 of span id.
const traceHexLen = 48

// fill makes the ids of every receipt of rs with a trace, in order.
func (t *traceHexes) fill(rs []instrument.Receipt) {
	n := 0
	for j := range rs {
		if rs[j].HasTrace {
			n++
		}
	}
	t.s, t.next = "", 0
	if n == 0 {
		return
	}
	var sb strings.Builder
	sb.Grow(n * traceHexLen)
	var buf [traceHexLen]byte
	for j := range rs {
		if r := &rs[j]; r.HasTrace {
			hex.Encode(buf[:32], r.TraceID[:])
			hex.Encode(buf[32:], r.SpanID[:])
			sb.Write(buf[:])
		}
	}
	t.s = sb.String()
}

// take returns the next receipt's trace and span ids; a receipt with a trace takes its own, in fill's order, even
// when its row is not made.
func (t *traceHexes) take() (tid, sid string) {
	s := t.s[t.next : t.next+traceHexLen]
	t.next += traceHexLen
	return s[:32], s[32:]
}
