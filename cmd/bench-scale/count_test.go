package main

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReceiptCounts(t *testing.T) {
	k := func(off int64) receiptKey { return receiptKey{"app", "orders", 1, off} }
	sent := map[receiptKey]int{k(0): 1, k(1): 1, k(2): 1, k(3): 1}
	stored := map[receiptKey]int{k(0): 1, k(1): 3, k(3): 1, k(9): 2}
	lost, dup, extra := receiptCounts(sent, stored)
	// k(2) lost; k(1) stored 3 times: 2 duplicates, k(9) twice: 1 more; k(9) was never sent: 2 extra rows.
	if lost != 1 || dup != 3 || extra != 2 {
		t.Fatalf("lost, duplicated, extra = %d, %d, %d; want 1, 3, 2", lost, dup, extra)
	}
	if lost, dup, extra := receiptCounts(sent, sent); lost != 0 || dup != 0 || extra != 0 {
		t.Fatalf("identical sets: %d, %d, %d; want 0, 0, 0", lost, dup, extra)
	}
}

func TestDecodeProbe(t *testing.T) {
	v1 := binary.BigEndian.AppendUint64([]byte{1}, 42)
	v1 = binary.BigEndian.AppendUint64(v1, 7)
	v2 := binary.BigEndian.AppendUint64([]byte{2}, 43)
	v2 = binary.BigEndian.AppendUint64(v2, 7)
	v2 = append(append(v2, 9), "replica-1"...)
	for _, c := range []struct {
		name     string
		v        []byte
		seq      uint64
		instance string
		ok       bool
	}{
		{"v1", v1, 42, "", true},
		{"v2", v2, 43, "replica-1", true},
		{"v2 short id", v2[:len(v2)-1], 0, "", false},
		{"v1 long", append(append([]byte{}, v1...), 0), 0, "", false},
		{"unknown version", append([]byte{3}, v1[1:]...), 0, "", false},
		{"empty", nil, 0, "", false},
	} {
		seq, inst, ok := decodeProbe(c.v)
		if seq != c.seq || inst != c.instance || ok != c.ok {
			t.Errorf("%s: %d %q %v; want %d %q %v", c.name, seq, inst, ok, c.seq, c.instance, c.ok)
		}
	}
}

func TestFalseProbeLoss(t *testing.T) {
	delivered := map[probeKey]bool{{"r0", 0, 1}: true, {"r1", 0, 2}: true}
	lost := []probeKey{{"r0", 0, 1}, {"r0", 0, 2}, {"r0", 1, 1}}
	if n := falseProbeLoss(lost, delivered, true); n != 1 {
		t.Fatalf("with instances: %d; want 1 (r0's seq 2 on partition 0 was r1's)", n)
	}
	noInst := map[probeKey]bool{{"", 0, 1}: true, {"", 0, 2}: true}
	if n := falseProbeLoss(lost, noInst, false); n != 2 {
		t.Fatalf("without instances: %d; want 2", n)
	}
}

// consumerGroupsOutput is the shape Kafka 4.4's ConsumerGroupCommand --describe --all-groups prints: a blank line
// and a header per group, "-" for a partition without a commit, a notice for a group without members.
const consumerGroupsOutput = `
Consumer group 'bench-scale-x-stalled-1' has no active members.

GROUP                   TOPIC     PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     HOST            CLIENT-ID
bench-scale-x-stalled-1 bs-orders 0          100             250             150             -               -               -
bench-scale-x-stalled-1 bs-orders 1          -               240             -               -               -               -

GROUP             TOPIC     PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID                          HOST            CLIENT-ID
bench-scale-x-app bs-orders 2          260             260             0               sarama-1f2e-4c                        /127.0.0.1      sarama
tmbs-x-receipts   bs-rcpt   0          10              12              2               sarama-aa                             /127.0.0.1      tidemark
`

func TestParseConsumerGroups(t *testing.T) {
	got, err := parseConsumerGroups(strings.NewReader(consumerGroupsOutput), "bench-scale-x-")
	if err != nil {
		t.Fatal(err)
	}
	want := map[gpKey]int64{
		{Group: "bench-scale-x-stalled-1", Topic: "bs-orders", Partition: 0}: 150,
		{Group: "bench-scale-x-app", Topic: "bs-orders", Partition: 2}:       0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestLagMismatches(t *testing.T) {
	theirs := map[gpKey]int64{{Group: "g", Topic: "t", Partition: 0}: 5, {Group: "g", Topic: "t", Partition: 1}: 0, {Group: "g", Topic: "t", Partition: 2}: 7}
	ours := map[gpKey]int64{{Group: "g", Topic: "t", Partition: 0}: 5, {Group: "g", Topic: "t", Partition: 2}: 6, {Group: "g", Topic: "t", Partition: 3}: 1}
	got := lagMismatches(theirs, ours)
	want := []string{"g t/1: kafka 0, tidemark none", "g t/2: kafka 7, tidemark 6"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if m := lagMismatches(theirs, theirs); len(m) != 0 {
		t.Fatalf("equal maps: %q", m)
	}
}

func TestNoActiveTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []activeSample{
		{at(0), []bool{false, false}, time.Time{}},    // before the kill: start-up, not counted
		{at(250), []bool{true, false}, time.Time{}},   // kill at 400
		{at(500), []bool{false, false}, time.Time{}},  // from here
		{at(750), []bool{false, false}, time.Time{}},  // ...
		{at(1000), []bool{false, true}, time.Time{}},  // to here: 500 ms without an active exporter
		{at(1250), []bool{true, true}, time.Time{}},   // split brain
		{at(1500), []bool{false, false}, time.Time{}}, // the last sample closes no interval
	}
	gap, maxActive := noActiveTime(samples, at(400))
	if gap != 500*time.Millisecond || maxActive != 2 {
		t.Fatalf("gap %v, max active %d; want 500ms, 2", gap, maxActive)
	}
	if gap, _ := noActiveTime(samples, at(0)); gap != 750*time.Millisecond {
		t.Fatalf("from the start: gap %v; want 750ms", gap)
	}
	if gap, m := noActiveTime(nil, t0); gap != 0 || m != 0 {
		t.Fatalf("no samples: %v %d", gap, m)
	}
}

func TestMaxGap(t *testing.T) {
	from, to := time.UnixMilli(10_000), time.UnixMilli(20_000)
	// 9_000 is before the window, 25_000 after it; inside, the longest gap is 12_000 → 19_500.
	ats := []int64{19_500, 11_000, 9_000, 12_000, 25_000}
	if g := maxGap(ats, from, to); g != 7500*time.Millisecond {
		t.Fatalf("max gap %v; want 7.5s", g)
	}
	if g := maxGap(nil, from, to); g != 10*time.Second {
		t.Fatalf("no snapshots: %v; want the whole window, 10s", g)
	}
}

func TestExportValue(t *testing.T) {
	out := "export TIDEMARK_KAFKA_BROKERS=127.0.0.1:24592\nexport TIDEMARK_KAFKA_LIB=/x/lib\n"
	if v := exportValue(out, "TIDEMARK_KAFKA_BROKERS"); v != "127.0.0.1:24592" {
		t.Fatalf("brokers %q", v)
	}
	if v := exportValue(out, "TIDEMARK_KAFKA"); v != "" {
		t.Fatalf("a prefix of a name matched: %q", v)
	}
	if v := exportValue("", "TIDEMARK_KAFKA_BROKERS"); v != "" {
		t.Fatalf("empty output: %q", v)
	}
}
