package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// probeVersion is the first byte of a probe record value. Version 2 (what this build sends): uint64 seq, int64 send
// time (collector clock, ns), uint8 length n of the sender's instance id, the id's n bytes: 18+n bytes, big-endian.
// Version 1 (17 bytes, no instance id) came from builds that ran one replica; it decodes, and belongs to no
// instance of this build.
const (
	probeVersion   = 2
	probeVersionV1 = 1
)

// encodeProbe returns the version-2 value of a probe.
func encodeProbe(seq uint64, send time.Time, instance string) []byte {
	val := make([]byte, 0, 18+len(instance))
	val = append(val, probeVersion)
	val = binary.BigEndian.AppendUint64(val, seq)
	val = binary.BigEndian.AppendUint64(val, uint64(send.UnixNano()))
	val = append(val, byte(len(instance)))
	return append(val, instance...)
}

// decodeProbe returns a probe value's sequence number and sender instance ("" for version 1), or an error naming
// what is wrong with it, wrapping instrument.ErrUnsupportedVersion or ErrMalformed (the dead-letter reason).
func decodeProbe(v []byte) (seq uint64, instance string, err error) {
	switch {
	case len(v) == 17 && v[0] == probeVersionV1:
		return binary.BigEndian.Uint64(v[1:9]), "", nil
	case len(v) >= 18 && v[0] == probeVersion:
		if n := int(v[17]); len(v) != 18+n {
			return 0, "", fmt.Errorf("probe record of %d bytes, want %d for an instance id of %d bytes: %w", len(v), 18+n, n, instrument.ErrMalformed)
		}
		return binary.BigEndian.Uint64(v[1:9]), string(v[18:]), nil
	case len(v) == 0:
		return 0, "", fmt.Errorf("empty probe record: %w", instrument.ErrMalformed)
	case v[0] != probeVersion && v[0] != probeVersionV1:
		return 0, "", fmt.Errorf("probe record version %d, this collector reads versions %d and %d: %w", v[0], probeVersionV1, probeVersion, instrument.ErrUnsupportedVersion)
	}
	return 0, "", fmt.Errorf("probe record of %d bytes with version %d, want %d (version 1) or 18 + instance id (version 2): %w",
		len(v), v[0], 17, instrument.ErrMalformed)
}

// ProbeSender is the producer the probe path sends with (internal/kafka's Producer satisfies it).
type ProbeSender interface {
	Send(m kafka.Message, clock func() time.Time) (kafka.Sent, error)
	Leaders(topic string) (map[int32]int32, error)
}

// Probe is the probe path: it sends a sequenced probe to every partition of its LogAppendTime topic each interval,
// consumes them back with its own group, and measures each leader broker: the send/ack times bracket the broker's
// append stamp (its clock offset, fed to the latency engine), ingest = corrected append − send, delivery = receive −
// corrected append, plus loss (not received within LossTimeout) and duplicates.
type Probe struct {
	*pathDeps
	topic       string
	instance    string // ProbeConfig.InstanceID: probes carrying another id are another replica's
	interval    time.Duration
	lossTimeout time.Duration
	sender      ProbeSender
	ready       chan struct{} // closed once the consumer has its first assignment
	readyOnce   sync.Once

	// mu guards inflight, seq, assigned and restart.
	mu       sync.Mutex
	inflight map[probeKey]*probeState
	seq      uint64
	// assigned are the probe topic's partitions the consumer was assigned in its current session: only those are
	// probed (a probe to a partition nobody reads would be counted lost). nil until the first assignment.
	assigned map[int32]bool
	// restart ends the consumer's current session (the latest batch's Restart), so that it re-joins and is assigned
	// partitions the planner added.
	restart func(error)
	// leaders is the last partition → leader map the sender could read; only RunSender's goroutine uses it.
	leaders map[int32]int32
}

type probeKey struct {
	partition int32
	seq       uint64
}

type probeState struct {
	row      store.ProbeRow
	broker   latency.HostID
	send     time.Time // collector clock, just before the send (also carried in the probe value)
	ack      time.Time // collector clock; zero until the send returned, and when it failed
	received bool
}

// newProbe returns the probe path of the replica named instance. Sequence numbers start at the start time in µs so a
// restarted replica never reuses one (probe_events is keyed by topic, partition, seq, instance).
func newProbe(d *pathDeps, topic, instance string, interval, lossTimeout time.Duration, sender ProbeSender) *Probe {
	return &Probe{pathDeps: d, topic: topic, instance: instance, interval: interval, lossTimeout: lossTimeout, sender: sender,
		ready: make(chan struct{}), inflight: map[probeKey]*probeState{}, seq: uint64(d.clock().UnixMicro())}
}

// Assigned is the consumer's OnAssigned hook: probes are sent only once, and only to partitions, the consumer will
// see, so neither the first probes nor those to a partition just added are counted lost.
func (p *Probe) Assigned(claims map[string][]int32) {
	m := make(map[int32]bool, len(claims[p.topic]))
	for _, part := range claims[p.topic] {
		m[part] = true
	}
	p.mu.Lock()
	p.assigned = m
	p.mu.Unlock()
	p.readyOnce.Do(func() { close(p.ready) })
}

// ensureAssigned makes the consumer re-join when it was assigned fewer than partitions partitions of the probe
// topic: partitions the planner added that a session began too early (or on stale metadata) to see.
func (p *Probe) ensureAssigned(partitions int) {
	p.mu.Lock()
	short := p.assigned != nil && len(p.assigned) < partitions
	p.mu.Unlock()
	if short {
		p.rejoin()
	}
}

// rejoin makes the probe consumer re-join its group (after the planner added partitions, so that it is assigned
// them now rather than at sarama's next metadata refresh).
func (p *Probe) rejoin() {
	p.mu.Lock()
	restart := p.restart
	p.mu.Unlock()
	if restart != nil {
		restart(errors.New("probe topic partitions added"))
	}
}

// RunSender sends probes every interval and sweeps lost ones until ctx ends.
func (p *Probe) RunSender(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-p.ready:
	}
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		p.sendRound(ctx)
		if lost := p.sweep(); len(lost) > 0 {
			if err := p.sink.Write(ctx, store.Rows{Probe: lost}, nil); err != nil {
				return nil // ctx ended
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *Probe) sendRound(ctx context.Context) {
	leaders, err := p.sender.Leaders(p.topic)
	switch {
	case len(leaders) == 0:
		// The cluster cannot be read (brokers down): probe the last known leaders anyway. Their sends fail or go
		// unanswered and count as lost after the loss timeout, so an outage shows as probe loss instead of as a
		// silence in which nothing is sent and nothing is lost.
		p.log.Warn("probe leaders; probing the last known ones", "topic", p.topic, "err", err)
		leaders = p.leaders
	case err != nil:
		// Some partitions have no leader (every replica down): the others are probed; a broker that left stops
		// being probed, and counted lost, once its partitions are led by others.
		p.log.Warn("probe leaders of some partitions", "topic", p.topic, "err", err)
		p.leaders = leaders
	default:
		p.leaders = leaders
	}
	p.mu.Lock()
	assigned := p.assigned
	p.mu.Unlock()
	for part, broker := range leaders {
		if ctx.Err() != nil {
			return
		}
		if assigned != nil && !assigned[part] {
			continue // not read by our consumer yet (a partition just added): it would only count as lost
		}
		p.mu.Lock()
		p.seq++
		seq := p.seq
		p.mu.Unlock()
		now := p.clock()
		val := encodeProbe(seq, now, p.instance)
		bh := brokerHost(broker)
		p.metrics.ProbeSent.WithLabelValues(bh).Inc()
		st := &probeState{broker: p.hosts.id(bh), send: now, row: store.ProbeRow{Topic: p.topic, Partition: part, Seq: seq, Instance: p.instance,
			BrokerID: broker, SendMs: now.UnixMilli(), AppendMs: -1, ReceiveMs: -1, AckMs: -1}}
		// Register before sending: the consumer may see the probe before Send returns.
		p.mu.Lock()
		p.inflight[probeKey{part, seq}] = st
		p.mu.Unlock()
		sent, err := p.sender.Send(kafka.Message{Topic: p.topic, Partition: part, Value: val}, p.clock)
		p.mu.Lock()
		if err == nil {
			st.row.AckMs = sent.AckTime.UnixMilli()
			st.row.RTTMs = sent.AckTime.Sub(now).Milliseconds()
			st.ack = sent.AckTime
			p.metrics.ProbeLatency.WithLabelValues(bh, "rtt").Observe(sent.AckTime.Sub(now).Seconds())
		} else {
			p.log.Warn("probe send", "topic", p.topic, "partition", part, "err", err)
		}
		p.mu.Unlock()
	}
}

// sweep removes probes older than the loss timeout and returns rows for those never received.
func (p *Probe) sweep() []store.ProbeRow {
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var lost []store.ProbeRow
	for k, st := range p.inflight {
		if now.Sub(st.send) < p.lossTimeout {
			continue
		}
		delete(p.inflight, k)
		if !st.received {
			st.row.Status = store.ProbeLost
			lost = append(lost, st.row)
			p.metrics.ProbeLost.WithLabelValues(brokerHost(st.row.BrokerID)).Inc()
		}
	}
	return lost
}

// HandleBatch is the probe consumer's kafka.BatchHandler. First every probe of the batch is marked received, under
// the lock the sweep takes (markReceived): the append-leader lookups of measure may wait for a round (or, while a
// partition cannot be read, answer at once), and a probe that came back must never be swept as lost meanwhile.
func (p *Probe) HandleBatch(ctx context.Context, b kafka.Batch, mark func(int64)) error {
	p.metrics.Records.WithLabelValues(PathProbe).Add(float64(len(b.Records)))
	if b.Restart != nil {
		p.mu.Lock()
		p.restart = b.Restart
		p.mu.Unlock()
	}
	var rows store.Rows
	got, bad, errs := p.markReceived(b.Records, &rows)
	for _, g := range got {
		rows.Probe = append(rows.Probe, p.measure(ctx, g))
	}
	if len(bad) > 0 {
		if err := p.deadLetter(ctx, PathProbe, bad, errs); err != nil {
			return err
		}
	}
	return p.write(ctx, PathProbe, b, rows, nil, mark)
}

// probeBack is one of this replica's probes that came back: its record, its state and when it was received.
type probeBack struct {
	rec  *kafka.Record
	st   *probeState
	recv time.Time
}

// markReceived marks every probe of recs that this replica sent and still waits for as received, and returns them
// for measure. A probe that comes back again adds its row, with the duplicate count, to rows; records that do not
// decode are returned in bad with their errors (for the dead-letter topic). Another replica's probes and probes
// this one no longer waits for are skipped.
func (p *Probe) markReceived(recs []kafka.Record, rows *store.Rows) (got []probeBack, bad []kafka.Record, errs []error) {
	for i := range recs {
		rec := &recs[i]
		recv := received(rec, p.clock)
		seq, instance, err := decodeProbe(rec.Value)
		if err != nil {
			bad = append(bad, *rec)
			errs = append(errs, err)
			continue
		}
		if instance != p.instance {
			// Another replica's probe (each replica reads every probe partition in its own group): that replica
			// measures it; here it is neither received nor a duplicate of anything.
			p.metrics.ProbeForeign.Inc()
			continue
		}
		p.mu.Lock()
		st, ok := p.inflight[probeKey{rec.Partition, seq}]
		if !ok {
			p.mu.Unlock()
			continue // a probe of an earlier run, or one already swept: nothing to compare it with
		}
		if st.received {
			st.row.Duplicates++
			p.metrics.ProbeDup.WithLabelValues(brokerHost(st.row.BrokerID)).Inc()
			rows.Probe = append(rows.Probe, st.row) // same key, newer version: the count replaces the old row
			p.mu.Unlock()
			continue
		}
		st.received = true
		st.row.AppendMs, st.row.ReceiveMs, st.row.Status = rec.Timestamp.UnixMilli(), recv.UnixMilli(), store.ProbeOK
		st.row.E2EMs = recv.Sub(st.send).Milliseconds()
		p.mu.Unlock()
		got = append(got, probeBack{rec, st, recv})
	}
	return got, bad, errs
}

// measure returns the row of a probe that came back. The broker that appended it stamped it: the leader of its
// epoch, which is the leader the sender read only if leadership did not move in between (the producer follows a
// failover by itself). When that broker cannot be known the row is flagged latency.FlagOffsetUnknown, with no
// bracket (it would bound the wrong broker) and no corrected stage.
func (p *Probe) measure(ctx context.Context, g probeBack) store.ProbeRow {
	rec, st := g.rec, g.st
	host, _, appender := p.appendHost(ctx, rec.Topic, rec.Partition, rec.Offset)
	p.mu.Lock()
	defer p.mu.Unlock()
	if appender < 0 {
		st.row.Flags |= uint32(latency.FlagOffsetUnknown)
		return st.row
	}
	if appender != st.row.BrokerID {
		st.row.BrokerID, st.broker = appender, host
	}
	p.correct(st, rec.Timestamp.UnixMilli(), g.recv)
	return st.row
}

// correct brackets the probe's broker clock and sets the row's corrected stages. The append (appendMs, broker
// clock) happened between send and ack on our clock (or, if the probe came back before the ack was processed,
// before the receive recv): a two-sided bound of the broker's offset. Ingest = corrected append − send, delivery =
// receive − corrected append, each at least 0; without an offset estimate the row is flagged
// latency.FlagOffsetUnknown. Caller holds p.mu.
func (p *Probe) correct(st *probeState, appendMs int64, recv time.Time) {
	upper := st.ack
	if upper.IsZero() || recv.Before(upper) {
		upper = recv
	}
	_ = p.engine.ObserveBracket(latency.Bracket{Host: st.broker, Send: st.send, RemoteMs: appendMs, Ack: upper})
	off, err := p.engine.Offset(st.broker, st.send)
	if err != nil || off.Kind == latency.KindUnknown {
		st.row.Flags |= uint32(latency.FlagOffsetUnknown)
		return
	}
	corrected := float64(appendMs) - float64(off.Offset)/1e6
	st.row.BrokerOffsetMs = float64(off.Offset) / 1e6
	st.row.UncertaintyMs = float64(off.Uncertainty) / 1e6
	ingest := math.Max(0, corrected-float64(st.send.UnixNano())/1e6)
	delivery := math.Max(0, float64(recv.UnixNano())/1e6-corrected)
	st.row.IngestMs, st.row.DeliveryMs = int64(math.Round(ingest)), int64(math.Round(delivery))
	bh := brokerHost(st.row.BrokerID)
	p.metrics.ProbeLatency.WithLabelValues(bh, "ingest").Observe(ingest / 1e3)
	p.metrics.ProbeLatency.WithLabelValues(bh, "delivery").Observe(delivery / 1e3)
}
