package lagexporter_test

import (
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	. "github.com/tidemark/tidemark/lagexporter"
)

// TestPartitionLagJSON checks that PartitionLag, whose rarely set fields sit behind pointers, writes the one flat
// object it always wrote (every field, in the documented order, zero rare fields omitted) and reads it back.
func TestPartitionLagJSON(t *testing.T) {
	var full PartitionLag
	if err := json.Unmarshal([]byte(`{"topic":"t","partition":3,"has_commit":true,"committed":7,`+
		`"commit_time":"2026-03-01T12:00:00Z","log_start":1,"end":20,"known":true,"lag":9,"raw_lag":13,`+
		`"expired_offsets":2,"time_lag":5000000000,"time_lag_known":true,"flags":"stale,replay","status":"WARN",`+
		`"replay_boundary_offset":15,"ahead_offsets":4,"control_offsets":3,"compacted_offsets":1,`+
		`"open_transaction_offsets":6,"stale_for":30000000000,"retention":{"time_left":60000000000,"time_known":true},`+
		`"catch_up":{"state":"draining","eta":1000000000,"drain_rate":2.5},"subtopology":"1","internal":true}`), &full); err != nil {
		t.Fatal(err)
	}
	if full.ReplayBoundary() != 15 || full.AheadOffsets() != 4 || full.ControlOffsets() != 3 || full.CompactedOffsets() != 1 ||
		full.OpenTransactionOffsets() != 6 || full.StaleFor() != 30*time.Second || full.Subtopology() != "1" || !full.Internal() ||
		full.Lag != 9 || full.Status != StatusWarn || !full.CommitTime.Equal(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("decoded %+v", full)
	}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"topic":"t","partition":3,"has_commit":true,"committed":7,"commit_time":"2026-03-01T12:00:00Z","log_start":1,` +
		`"end":20,"known":true,"lag":9,"raw_lag":13,"expired_offsets":2,"time_lag":5000000000,"time_lag_known":true,` +
		`"flags":"stale,replay","status":"WARN","replay_boundary_offset":15,"ahead_offsets":4,"control_offsets":3,` +
		`"compacted_offsets":1,"open_transaction_offsets":6,"stale_for":30000000000,` +
		`"retention":{"time_left":60000000000,"time_known":true},"catch_up":{"state":"draining","eta":1000000000,` +
		`"drain_rate":2.5},"subtopology":"1","internal":true}`
	if string(b) != want {
		t.Fatalf("JSON\n%s\nwant\n%s", b, want)
	}
	var back PartitionLag
	if err := json.Unmarshal(b, &back); err != nil || !back.Equal(&full) {
		t.Fatalf("read back %+v (%v), want %+v", back, err, full)
	}

	plain := PartitionLag{Topic: "t", Known: true, Lag: 2, RawLag: 2}
	b, _ = json.Marshal(plain)
	want = `{"topic":"t","partition":0,"has_commit":false,"log_start":0,"end":0,"known":true,"lag":2,"raw_lag":2,` +
		`"time_lag":0,"time_lag_known":false,"status":"OK","catch_up":{"state":"unknown","drain_rate":0}}`
	if string(b) != want {
		t.Fatalf("JSON\n%s\nwant\n%s", b, want)
	}
	if back := (PartitionLag{}); json.Unmarshal(b, &back) != nil || !back.Equal(&plain) {
		t.Fatalf("read back %+v, want %+v", back, plain)
	}
	if n := unsafe.Sizeof(PartitionLag{}); n > 176 { // one per group-partition in every snapshot
		t.Errorf("PartitionLag is %d bytes, want <= 176 (docs/performance.md)", n)
	}
}

// TestComputeLagRareFields checks that the rarely set offsets ComputeLag fills are read back, and that a partition
// without any of them writes none.
func TestComputeLagRareFields(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	in := PartitionInput{HasCommit: true, Committed: 50, OffsetsKnown: true, LogStart: 0, HighWatermark: 40, LastStable: 35, Now: now}
	if p := ComputeLag(in); p.AheadOffsets() != 10 || p.OpenTransactionOffsets() != 5 || !p.Flags.Has(FlagAheadOfEnd) {
		t.Errorf("ahead %d open txn %d flags %s, want 10 5 ahead_of_end", p.AheadOffsets(), p.OpenTransactionOffsets(), p.Flags)
	}
	in.Committed, in.LastStable = 30, 40
	p := ComputeLag(in)
	b, err := json.Marshal(p)
	if err != nil || p.AheadOffsets() != 0 || p.OpenTransactionOffsets() != 0 ||
		contains(b, "ahead_offsets", "open_transaction_offsets", "replay_boundary_offset") {
		t.Errorf("a plain partition: %s (%v)", b, err)
	}
}

// contains reports whether the JSON object b has one of keys (true for a b that is not an object).
func contains(b []byte, keys ...string) bool {
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return true
	}
	for _, k := range keys {
		if _, ok := m[k]; ok {
			return true
		}
	}
	return false
}
