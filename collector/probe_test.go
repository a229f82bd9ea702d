package collector

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/store"
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
	p := newProbe(deps, "probe", time.Second, 3*time.Second, fs)
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
	p := newProbe(deps, "probe", time.Second, 10*time.Second, fs)
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
	if first.Status != store.ProbeOK || first.BrokerID != 1 || first.RTTMs != 4 || first.E2EMs != 5 || first.Duplicates != 0 {
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

// TestCheckProbe: a probe of another version and a probe of the wrong length get different, true messages (a
// version-2 probe of 17 bytes read "probe record of 17 bytes, want 17 with version 1") and dead-letter reasons.
func TestCheckProbe(t *testing.T) {
	v1 := make([]byte, 17)
	v1[0] = 1
	v2 := make([]byte, 17)
	v2[0] = 2
	for _, tt := range []struct {
		name  string
		value []byte
		want  string
		why   string
	}{
		{"version 1", v1, "", ""},
		{"version 2", v2, "probe record version 2, this collector reads version 1", "unsupported_version"},
		{"short", v1[:12], "probe record of 12 bytes, want 17 for version 1", "malformed"},
		{"empty", nil, "empty probe record, want 17 bytes", "malformed"},
	} {
		err := checkProbe(tt.value)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want) || reason(err) != tt.why):
			t.Errorf("%s: %v (reason %q), want %q (%s)", tt.name, err, reason(err), tt.want, tt.why)
		}
	}
}
