package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/instrument"
)

// fakeSender acknowledges every probe after a fixed delay on the test clock and remembers the values sent.
type fakeSender struct {
	now     *time.Time
	rtt     time.Duration
	sent    []kafka.Message
	lead    map[int32]int32
	leadErr error // Leaders fails with it when set
	sendErr error // Send fails with it when set
}

func (f *fakeSender) Send(m kafka.Message, _ func() time.Time) (kafka.Sent, error) {
	f.sent = append(f.sent, m)
	if f.sendErr != nil {
		return kafka.Sent{}, f.sendErr
	}
	s := kafka.Sent{Partition: m.Partition, Offset: int64(len(f.sent)), SendTime: *f.now, AckTime: f.now.Add(f.rtt)}
	return s, nil
}

func (f *fakeSender) Leaders(string) (map[int32]int32, error) {
	if f.leadErr != nil {
		return nil, f.leadErr
	}
	return f.lead, nil
}

// TestProbeOutageCountsAsLoss: while the cluster cannot be read, probes still go to the last known leaders; they
// fail, and after the loss timeout each is a lost row with its send time, so an outage shows as loss on the
// brokers it hit instead of as a silence.
func TestProbeOutageCountsAsLoss(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := t0
	deps, _, _ := newTestDeps(t, t0)
	deps.clock = func() time.Time { return now }
	fs := &fakeSender{now: &now, rtt: 4 * time.Millisecond, lead: map[int32]int32{0: 1}}
	p := newProbe(deps, "probe", "r1", time.Second, 3*time.Second, fs)
	p.sendRound(context.Background()) // cluster up: learns partition 0 → broker 1
	fs.leadErr, fs.sendErr = errors.New("client has run out of available brokers"), errors.New("broker down")
	for i := 1; i <= 2; i++ {
		now = t0.Add(time.Duration(i) * time.Second)
		p.sendRound(context.Background())
	}
	if len(fs.sent) != 3 {
		t.Fatalf("%d probes sent, want 3 (one per round, the outage's to the last known leader)", len(fs.sent))
	}
	now = t0.Add(5 * time.Second) // every probe is past the 3 s loss timeout; only the first was ever acknowledged
	lost := p.sweep()
	if len(lost) != 3 {
		t.Fatalf("%d lost, want 3", len(lost))
	}
	for _, r := range lost {
		if r.BrokerID != 1 || r.Status != store.ProbeLost {
			t.Fatalf("lost row %+v, want broker 1, lost", r)
		}
		if r.SendMs > t0.UnixMilli() && r.AckMs != -1 {
			t.Fatalf("probe sent in the outage has ack %d", r.AckMs)
		}
	}
}

// TestProbeLossDuplicatesAndBrackets: two partitions led by brokers 1 and 2 get one probe each. Broker 1's probe comes
// back twice (a duplicate), broker 2's never (lost after the timeout). The broker-1 probe appended 3 ms after the send
// and received 5 ms after it, with a 4 ms acknowledgement: its bracket puts broker 1's offset in [3−4, 3+1−0] ms.
func TestProbeLossDuplicatesAndBrackets(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := t0
	deps, sink, dlq := newTestDeps(t, t0)
	deps.clock = func() time.Time { return now }
	fs := &fakeSender{now: &now, rtt: 4 * time.Millisecond, lead: map[int32]int32{0: 1, 1: 2}}
	p := newProbe(deps, "probe", "r1", time.Second, 10*time.Second, fs)
	p.sendRound(context.Background())
	if len(fs.sent) != 2 {
		t.Fatalf("%d probes sent, want one per partition", len(fs.sent))
	}
	var toBroker1 kafka.Message
	for _, m := range fs.sent {
		if m.Partition == 0 {
			toBroker1 = m
		}
	}
	rec := kafka.Record{Topic: "probe", Partition: 0, Offset: 1, Value: toBroker1.Value,
		Timestamp: t0.Add(3 * time.Millisecond), Received: t0.Add(5 * time.Millisecond)}
	var marks []int64
	mark := func(n int64) { marks = append(marks, n) }
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "probe", Records: []kafka.Record{rec}}, mark); err != nil {
		t.Fatal(err)
	}
	dup := rec
	dup.Offset = 2
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "probe", Records: []kafka.Record{dup}}, mark); err != nil {
		t.Fatal(err)
	}
	if len(sink.rows) != 2 {
		t.Fatalf("%d writes, want 2", len(sink.rows))
	}
	first, again := sink.rows[0].Probe[0], sink.rows[1].Probe[0]
	if first.Status != store.ProbeOK || first.Instance != "r1" || first.BrokerID != 1 || first.RTTMs != 4 || first.E2EMs != 5 || first.Duplicates != 0 {
		t.Fatalf("first delivery %+v", first)
	}
	// The engine's broker-1 estimate comes from this one bracket: its uncertainty is half the bracket's width.
	if first.BrokerOffsetMs < -1 || first.BrokerOffsetMs > 4 || first.IngestMs+first.DeliveryMs > first.E2EMs+1 {
		t.Fatalf("corrected stages %+v", first)
	}
	if again.Duplicates != 1 || again.Seq != first.Seq {
		t.Fatalf("duplicate delivery %+v", again)
	}
	// Ten seconds later the broker-2 probe is lost; the received one is forgotten without a row.
	now = t0.Add(11 * time.Second)
	lost := p.sweep()
	if len(lost) != 1 || lost[0].BrokerID != 2 || lost[0].Status != store.ProbeLost || lost[0].ReceiveMs != -1 {
		t.Fatalf("lost %+v", lost)
	}
	if len(p.inflight) != 0 {
		t.Fatalf("%d probes still in flight", len(p.inflight))
	}
	// Sequence numbers start at the start time in µs, so a restarted collector never reuses one.
	if seq := binary.BigEndian.Uint64(toBroker1.Value[1:9]); seq <= uint64(t0.UnixMicro()) {
		t.Fatalf("sequence %d does not start after %d", seq, t0.UnixMicro())
	}
	// A garbage record on the probe topic is dead-lettered and its offset still marked once acknowledged.
	bad := kafka.Record{Topic: "probe", Partition: 0, Offset: 3, Value: []byte{9}}
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "probe", Records: []kafka.Record{bad}}, mark); err != nil {
		t.Fatal(err)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 3 {
		t.Fatalf("dead letters %+v", dlq.recs)
	}
	for _, ack := range sink.acks {
		ack(nil)
	}
	if len(marks) == 0 || marks[len(marks)-1] != 4 {
		t.Fatalf("marks %v, want the last to be 4", marks)
	}
}

// TestProbeCodec: what decodeProbe accepts and refuses. A version-1 probe (older builds, one replica) decodes with
// no instance; every malformed value gets an error for the dead-letter topic.
func TestProbeCodec(t *testing.T) {
	send := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	v1 := append([]byte{1}, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 7), uint64(send.UnixNano()))...)
	long := strings.Repeat("x", maxInstanceID)
	tests := []struct {
		name     string
		value    []byte
		seq      uint64
		instance string
		reason   string // the dead-letter reason of the error; "" when it decodes
	}{
		{name: "v2", value: encodeProbe(42, send, "pod-a"), seq: 42, instance: "pod-a"},
		{name: "v2 longest id", value: encodeProbe(43, send, long), seq: 43, instance: long},
		{name: "v1 has no instance", value: v1, seq: 7},
		{name: "empty", value: nil, reason: "malformed"},
		// The id's length byte says 5, but only 4 bytes follow: a truncated record, not a shorter id.
		{name: "v2 truncated id", value: encodeProbe(1, send, "pod-a")[:22], reason: "malformed"},
		{name: "v2 trailing bytes", value: append(encodeProbe(1, send, "pod-a"), 0), reason: "malformed"},
		{name: "v1 wrong length", value: v1[:16], reason: "malformed"},
		// A newer collector sharing the topic: told apart from garbage in the dead-letter counter.
		{name: "unknown version", value: append([]byte{3}, v1[1:]...), reason: "unsupported_version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seq, inst, err := decodeProbe(tc.value)
			if (err != nil) != (tc.reason != "") || (err != nil && reason(err) != tc.reason) {
				t.Fatalf("err %v (reason %q), want reason %q", err, reason(err), tc.reason)
			}
			if err == nil && (seq != tc.seq || inst != tc.instance) {
				t.Fatalf("decoded seq %d instance %q, want %d %q", seq, inst, tc.seq, tc.instance)
			}
		})
	}
}

// TestProbeReplicasOwnTheirProbes: two replicas started in the same microsecond probe the same partition, so their
// sequence numbers coincide. Each reads both probes (its own group reads every partition); each counts its own as
// received and the other's as foreign: no duplicate, and after the loss timeout no loss, on either.
func TestProbeReplicasOwnTheirProbes(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	now := t0
	type replica struct {
		p    *Probe
		fs   *fakeSender
		sink *fakeSink
		m    *Metrics
	}
	mk := func(id string) replica {
		deps, sink, _ := newTestDeps(t, t0)
		deps.clock = func() time.Time { return now }
		fs := &fakeSender{now: &now, rtt: 2 * time.Millisecond, lead: map[int32]int32{0: 1}}
		return replica{p: newProbe(deps, "probe", id, time.Second, 3*time.Second, fs), fs: fs, sink: sink, m: deps.metrics}
	}
	a, b := mk("pod-a"), mk("pod-b")
	a.p.sendRound(context.Background())
	b.p.sendRound(context.Background())
	sa, _, _ := decodeProbe(a.fs.sent[0].Value)
	sb, _, _ := decodeProbe(b.fs.sent[0].Value)
	if sa != sb {
		t.Fatalf("sequences %d and %d: the test needs them equal", sa, sb)
	}
	// Both probes land on partition 0, A's first; both replicas read both.
	recs := []kafka.Record{
		{Topic: "probe", Partition: 0, Offset: 0, Value: a.fs.sent[0].Value, Timestamp: t0.Add(time.Millisecond), Received: t0.Add(3 * time.Millisecond)},
		{Topic: "probe", Partition: 0, Offset: 1, Value: b.fs.sent[0].Value, Timestamp: t0.Add(time.Millisecond), Received: t0.Add(3 * time.Millisecond)},
	}
	for _, r := range []replica{a, b} {
		if err := r.p.HandleBatch(context.Background(), kafka.Batch{Topic: "probe", Records: recs}, func(int64) {}); err != nil {
			t.Fatal(err)
		}
	}
	now = t0.Add(5 * time.Second)
	for name, r := range map[string]replica{"pod-a": a, "pod-b": b} {
		if lost := r.p.sweep(); len(lost) != 0 {
			t.Fatalf("%s: %d probes lost, want 0", name, len(lost))
		}
		var rows []store.ProbeRow
		for _, w := range r.sink.rows {
			rows = append(rows, w.Probe...)
		}
		if len(rows) != 1 || rows[0].Instance != name || rows[0].Duplicates != 0 || rows[0].Status != store.ProbeOK {
			t.Fatalf("%s: rows %+v, want its own probe once, received", name, rows)
		}
		if got := testutil.ToFloat64(r.m.ProbeForeign); got != 1 {
			t.Fatalf("%s: %v foreign probes, want 1", name, got)
		}
		if got := testutil.ToFloat64(r.m.ProbeDup.WithLabelValues(brokerHost(1))); got != 0 {
			t.Fatalf("%s: %v duplicates, want 0", name, got)
		}
	}
}

// TestInstanceIDDefault: without collector.probe.instance_id a replica is named by $TIDEMARK_INSTANCE_ID (the pod
// name in deploy/kubernetes), else by its host name; a bad value from the environment fails validation like the key.
func TestInstanceIDDefault(t *testing.T) {
	t.Setenv(InstanceIDEnv, "tidemark-7d9f-abcde")
	var c Config
	c.SetDefaults()
	if c.Probe.InstanceID != "tidemark-7d9f-abcde" || c.Probe.GroupID() != DefaultProbeGroup+"-tidemark-7d9f-abcde" {
		t.Fatalf("instance %q group %q, want the environment's pod name", c.Probe.InstanceID, c.Probe.GroupID())
	}
	c = Config{Probe: ProbeConfig{InstanceID: "set-in-config"}}
	c.SetDefaults()
	if c.Probe.InstanceID != "set-in-config" {
		t.Fatalf("instance %q, want the config key to win over the environment", c.Probe.InstanceID)
	}
	t.Setenv(InstanceIDEnv, "bad id")
	c = Config{}
	c.SetDefaults()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "probe.instance_id") {
		t.Fatalf("a bad id from the environment: %v, want a probe.instance_id error", err)
	}
	t.Setenv(InstanceIDEnv, "")
	c = Config{}
	c.SetDefaults()
	if h, err := os.Hostname(); err == nil && c.Probe.InstanceID == "" || (err == nil && len(h) <= maxInstanceID && validInstanceID(h) == nil && c.Probe.InstanceID != h) {
		t.Fatalf("instance %q without the environment, want the host name %q", c.Probe.InstanceID, h)
	}
}

// TestProbeBatchOverFakes drives the probe path's batch handling through fakes (sender, sink, dead-letter topic, an
// append-leader lookup that cannot place any offset). One batch holds this replica's probe to partition 0 (broker
// 1), a version-1 probe (another build's: foreign), a probe of a sequence this replica never sent (an earlier run's:
// ignored) and a record of an unknown version (dead-lettered). The own probe's row is stored received, but flagged
// with no corrected stages: whose clock stamped its append cannot be known, so it brackets no broker.
func TestProbeBatchOverFakes(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	now := t0
	deps, sink, dlq := newTestDeps(t, t0)
	deps.clock = func() time.Time { return now }
	deps.appends = unknownAppends{}
	fs := &fakeSender{now: &now, rtt: 4 * time.Millisecond, lead: map[int32]int32{0: 1}}
	p := newProbe(deps, "probe", "r1", time.Second, 10*time.Second, fs)
	p.sendRound(context.Background())
	if len(fs.sent) != 1 {
		t.Fatalf("%d probes sent, want 1", len(fs.sent))
	}
	own := fs.sent[0].Value
	seq, _, _ := decodeProbe(own)
	v1 := append([]byte{probeVersionV1}, binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, seq), uint64(t0.UnixNano()))...)
	stale := encodeProbe(seq-1000, t0.Add(-time.Hour), "r1")
	at, recv := t0.Add(3*time.Millisecond), t0.Add(5*time.Millisecond)
	recs := []kafka.Record{
		{Topic: "probe", Partition: 0, Offset: 7, Value: own, Timestamp: at, Received: recv},
		{Topic: "probe", Partition: 0, Offset: 8, Value: v1, Timestamp: at, Received: recv},
		{Topic: "probe", Partition: 0, Offset: 9, Value: stale, Timestamp: at, Received: recv},
		{Topic: "probe", Partition: 0, Offset: 10, Value: []byte{7, 0, 0}, Timestamp: at, Received: recv},
	}
	var marks []int64
	if err := p.HandleBatch(context.Background(), kafka.Batch{Topic: "probe", Records: recs}, func(n int64) { marks = append(marks, n) }); err != nil {
		t.Fatal(err)
	}
	if len(dlq.recs) != 1 || dlq.recs[0].Offset != 10 || !errors.Is(dlq.reasons[0], instrument.ErrUnsupportedVersion) {
		t.Fatalf("dead letters %+v %v, want offset 10 (unsupported version)", dlq.recs, dlq.reasons)
	}
	if len(sink.rows) != 1 || len(sink.rows[0].Probe) != 1 {
		t.Fatalf("writes %+v, want one write of the own probe's row", sink.rows)
	}
	r := sink.rows[0].Probe[0]
	if r.Seq != seq || r.Instance != "r1" || r.BrokerID != 1 || r.Status != store.ProbeOK || r.AppendMs != at.UnixMilli() ||
		r.ReceiveMs != recv.UnixMilli() || r.E2EMs != 5 || r.RTTMs != 4 || r.AckMs != t0.Add(4*time.Millisecond).UnixMilli() {
		t.Errorf("row %+v", r)
	}
	if r.Flags&uint32(latency.FlagOffsetUnknown) == 0 || r.IngestMs != 0 || r.DeliveryMs != 0 || r.BrokerOffsetMs != 0 {
		t.Errorf("row %+v, want flagged offset-unknown without corrected stages", r)
	}
	if o, err := deps.engine.Offset(deps.hosts.id(brokerHost(1)), t0); err == nil && o.Kind != latency.KindUnknown {
		t.Errorf("broker 1 has offset %+v: a probe whose appender is unknown bracketed it", o)
	}
	m := deps.metrics
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"records", testutil.ToFloat64(m.Records.WithLabelValues(PathProbe)), 4},
		{"foreign", testutil.ToFloat64(m.ProbeForeign), 1},
		{"duplicates", testutil.ToFloat64(m.ProbeDup.WithLabelValues(brokerHost(1))), 0},
		{"dead letters", testutil.ToFloat64(m.DeadLetters.WithLabelValues(PathProbe, "unsupported_version")), 1},
		{"append leader unknown", testutil.ToFloat64(m.AppendLeaderUnknown), 1},
		{"rows", testutil.ToFloat64(m.Rows.WithLabelValues(PathProbe)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if len(marks) != 0 {
		t.Fatalf("marked %v before the sink acknowledged", marks)
	}
	sink.acks[0](nil)
	if len(marks) != 1 || marks[0] != 11 {
		t.Fatalf("marks %v, want [11] after the ack", marks)
	}
	// The received probe is never swept as lost.
	now = t0.Add(11 * time.Second)
	if lost := p.sweep(); len(lost) != 0 {
		t.Fatalf("lost %+v, want none", lost)
	}
}
