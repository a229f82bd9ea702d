package main

import (
	"strings"
	"testing"
	"time"
)

func TestLiveLagMismatches(t *testing.T) {
	k := func(p int32) gpKey { return gpKey{Group: "bench-app", Topic: "orders", Partition: p} }
	before := map[gpKey]groupOffsets{
		k(0): {Committed: 100, End: 150, Lag: 50},
		k(1): {Committed: 100, End: 150, Lag: 50},
		k(2): {Committed: 100, End: 150, Lag: 50},
		k(3): {Committed: 100, End: 150, Lag: 50},
		k(4): {Committed: 100, End: 150, Lag: 50},
		k(5): {Committed: 100, End: 150, Lag: 50}, // not in after: not compared
	}
	after := map[gpKey]groupOffsets{
		k(0): {Committed: 140, End: 170, Lag: 30},
		k(1): {Committed: 140, End: 170, Lag: 30},
		k(2): {Committed: 140, End: 170, Lag: 30},
		k(3): {Committed: 140, End: 170, Lag: 30},
		k(4): {Committed: 140, End: 170, Lag: 30},
	}
	ours := map[gpKey]ourOffsets{
		k(0): {Committed: 120, Lag: 40}, // between the two readings
		k(1): {Committed: 141, Lag: 29}, // committed beyond what Kafka had after the snapshot
		k(2): {Committed: 120, Lag: 71}, // lag above after.End − before.Committed = 70
		k(3): {Committed: 140, Lag: 10}, // lag 10 = max(0, before.End − after.Committed): the bound itself is fine
		// k(4) missing
	}
	mism, compared := liveLagMismatches(before, after, ours)
	if compared != 5 {
		t.Fatalf("compared %d, want 5 (k5 is in one reading only)", compared)
	}
	want := []string{"bench-app orders/1: kafka committed 100..140, tidemark 141",
		"bench-app orders/2: kafka lag within 10..70, tidemark 71",
		"bench-app orders/4: kafka committed 100..140, tidemark none"}
	if strings.Join(mism, "\n") != strings.Join(want, "\n") {
		t.Fatalf("mismatches\n%s\nwant\n%s", strings.Join(mism, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseGroupOffsets(t *testing.T) {
	out := `
GROUP           TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID
bs-x-app        orders  0          120             170             50   -            -     -
bs-x-app        orders  1          -               170             -    -            -     -
other           orders  0          1               2               1    -            -     -
`
	got, err := parseGroupOffsets(strings.NewReader(out), "bs-x")
	if err != nil {
		t.Fatal(err)
	}
	// partition 1 has no commit and "other" is not a bench group: only partition 0
	if len(got) != 1 || got[gpKey{Group: "bs-x-app", Topic: "orders", Partition: 0}] != (groupOffsets{Committed: 120, End: 170, Lag: 50}) {
		t.Fatalf("got %v", got)
	}
}

func TestFailoverTime(t *testing.T) {
	t0 := time.Unix(100, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	samples := []activeSample{
		{At: at(10), Start: at(0), Active: []bool{true, false}},
		// begun before the kill at 100 ms, ended after it: it saw the victim alive and must not count
		{At: at(260), Start: at(90), Active: []bool{true, false}},
		{At: at(500), Start: at(490), Active: []bool{false, false}},
		{At: at(10760), Start: at(10750), Active: []bool{false, true}},
	}
	// counted from the kill at 100 ms to the end of the first round that saw the survivor active
	if d, ok := failoverTime(samples, at(100)); !ok || d != 10660*time.Millisecond {
		t.Fatalf("failover %v %v, want 10.66s", d, ok)
	}
	if _, ok := failoverTime(samples[:3], at(100)); ok {
		t.Fatal("no active replica after the kill must not report a failover time")
	}
}

func TestRollupDiff(t *testing.T) {
	k := func(min int64) rollupKey { return rollupKey{"a", "orders", "app", min * 60} }
	raw := map[rollupKey]int64{k(0): 10, k(1): 10, k(2): 10}
	// minute 1 aggregated 2 rows twice, minute 2 missed 2: the totals agree (30), the buckets do not
	rollup := map[rollupKey]int64{k(0): 10, k(1): 12, k(2): 8, k(3): 1}
	if d, m := rollupDiff(raw, rollup); d != 3 || m != 2 {
		t.Fatalf("doubled, missing = %d, %d; want 3, 2", d, m)
	}
}

func TestLoadgenCounts(t *testing.T) {
	p, d, err := loadgenCounts("loadgen    61s  produced   18000  processed   17990  receipts sent   17980  dropped 10")
	if err != nil || p != 17990 || d != 10 {
		t.Fatalf("processed %d dropped %d err %v; want 17990, 10", p, d, err)
	}
	if _, _, err := loadgenCounts("loadgen: broker down"); err == nil {
		t.Fatal("a line without the summary must be an error")
	}
}
