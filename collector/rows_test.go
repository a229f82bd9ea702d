package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
)

func TestHostsReportThrottlesButKeepsFeeding(t *testing.T) {
	eng, err := latency.NewEngine(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := newHosts(eng)
	id := h.id("c1")
	t0 := time.Unix(1795953600, 0)
	steps := []struct {
		name string
		at   time.Duration
		off  time.Duration
		want int // samples the engine has after the step
	}{
		{"first report is fed", 0, time.Second, 1},
		{"same value 1 s later is skipped", time.Second, time.Second, 1},
		// Unchanged values must still reach the engine now and then, or its window never spans enough to settle.
		{"same value 2 s after the last fed one is fed", 2 * time.Second, time.Second, 2},
		{"a changed value is fed at once", 2500 * time.Millisecond, 2 * time.Second, 3},
	}
	for _, s := range steps {
		h.report(id, s.off, time.Millisecond, t0.Add(s.at))
		o, err := eng.Offset(id, t0.Add(s.at))
		if err != nil {
			t.Fatal(err)
		}
		if o.Samples != s.want {
			t.Fatalf("%s: engine has %d samples, want %d", s.name, o.Samples, s.want)
		}
	}
}

func TestLatencyRowRoundsThroughRunningSum(t *testing.T) {
	// Stages 20.4 + 79.4 + 20.4 = 120.2: rounded one by one they would store 20 + 79 + 20 = 119 against an e2e of
	// 120; rounding the running sums (20, 100, 120) stores 20 + 80 + 20.
	res := latency.Result{Offset: 7, Has: 1<<latency.StageIngest | 1<<latency.StageQueueWait | 1<<latency.StageProcessing | 1<<latency.StageE2E}
	res.Stages[latency.StageIngest], res.Stages[latency.StageQueueWait] = 20.4, 79.4
	res.Stages[latency.StageProcessing], res.Stages[latency.StageE2E] = 20.4, 120.2
	row := latencyRow(store.SourceReceipt, "g", "t", 1, rawStamps{event: 1, append: 2, receive: 3, processed: 4}, &res, "p", "b", "c", nil, nil)
	if row.IngestMs != 20 || row.QueueMs != 80 || row.ProcessMs != 20 || row.E2EMs != 120 {
		t.Fatalf("stages %d %d %d %d", row.IngestMs, row.QueueMs, row.ProcessMs, row.E2EMs)
	}
	if row.Valid != 0xff {
		t.Fatalf("valid %08b, want every naive and corrected bit", row.Valid)
	}
	// An unsettled offset under every stage keeps the row out of percentiles: no corrected stage is valid, the
	// naive ones still are.
	res.Flags, res.Untrusted = latency.FlagUnsettled, uint8(res.Has)
	row = latencyRow(store.SourceReceipt, "g", "t", 1, rawStamps{event: 1, append: 2, receive: 3, processed: 4}, &res, "p", "b", "c", nil, nil)
	if row.Valid != 0xf0 {
		t.Fatalf("unsettled: valid %08b, want 11110000", row.Valid)
	}
}

func TestLatencyRowValidPerStage(t *testing.T) {
	all := uint8(1<<latency.StageIngest | 1<<latency.StageMirror | 1<<latency.StageQueueWait | 1<<latency.StageDelivery |
		1<<latency.StageProcessing | 1<<latency.StageE2E)
	const naive = store.NaiveIngest | store.NaiveQueue | store.NaiveProcess | store.NaiveE2E
	cases := []struct {
		name      string
		flags     latency.Flags
		has       uint8
		untrusted uint8
		want      store.StageBits
	}{
		{"clean record: every stage", 0, all &^ (1 << latency.StageMirror), 0,
			naive | store.ValidIngest | store.ValidQueue | store.ValidProcess | store.ValidE2E},
		// The consumer's clock is suspect against the broker's: queue wait (append → receive) and e2e rest on that
		// pair; ingest (producer → broker) and processing (receive → processed, one host) do not.
		{"skew on the broker/consumer pair keeps processing and ingest", latency.FlagSkewSuspected, all &^ (1 << latency.StageMirror),
			1<<latency.StageQueueWait | 1<<latency.StageDelivery | 1<<latency.StageE2E,
			naive | store.ValidIngest | store.ValidProcess},
		// The ingest column adds the mirror hop: an untrusted mirror stage makes the column untrusted.
		{"untrusted mirror hop invalidates the ingest column", latency.FlagUnsettled, all, 1 << latency.StageMirror,
			naive | store.ValidQueue | store.ValidProcess | store.ValidE2E},
		// Commit-bounded: e2e is an upper bound only, whatever the clocks say.
		{"commit-bound e2e stays out", latency.FlagCommitBound, all &^ (1 << latency.StageMirror), 0,
			naive | store.ValidIngest | store.ValidQueue | store.ValidProcess},
	}
	for _, tc := range cases {
		res := latency.Result{Has: tc.has, Flags: tc.flags, Untrusted: tc.untrusted}
		for s := range res.Stages {
			res.Stages[s] = 10
		}
		row := latencyRow(store.SourceReceipt, "g", "t", 1, rawStamps{event: 1, append: 2, receive: 3, processed: 4}, &res, "p", "b", "c", nil, nil)
		if row.Valid != tc.want {
			t.Errorf("%s: valid %08b, want %08b", tc.name, row.Valid, tc.want)
		}
	}
}

// TestTraceHex gives the lowercase hex of the trace and span ids, from one allocation when both are present, and
// "" for an id of the wrong length.
func TestTraceHex(t *testing.T) {
	tid := []byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	sid := []byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	cases := []struct {
		tid, sid            []byte
		wantTrace, wantSpan string
	}{
		{tid, sid, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
		{tid, nil, "4bf92f3577b34da6a3ce929d0e0e4736", ""},
		{nil, sid, "", "00f067aa0ba902b7"},
		{tid[:15], sid, "", "00f067aa0ba902b7"},
		{nil, nil, "", ""},
	}
	for _, c := range cases {
		if gt, gs := traceHex(c.tid, c.sid); gt != c.wantTrace || gs != c.wantSpan {
			t.Errorf("traceHex(%x, %x) = %q, %q, want %q, %q", c.tid, c.sid, gt, gs, c.wantTrace, c.wantSpan)
		}
	}
	if n := testing.AllocsPerRun(10, func() { traceHex(tid, sid) }); n > 1 {
		t.Errorf("traceHex allocated %.0f times, want 1", n)
	}
}

// TestHostsBounded: a flood of host names, each reporting its clock offset, leaves the collector's per-host state
// bounded by the engine's MaxHosts (the engine holds the only name table; the last-report table drops the ids of
// hosts the engine forgot), and the newest host's report still reaches the engine.
func TestHostsBounded(t *testing.T) {
	const maxHosts = 16
	e, err := latency.NewEngine(latency.Config{MaxHosts: maxHosts})
	if err != nil {
		t.Fatal(err)
	}
	h := newHosts(e)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var last latency.HostID
	for i := range 1000 {
		last = h.id(fmt.Sprintf("pod-%04d", i))
		h.report(last, 3*time.Millisecond, time.Millisecond, now)
	}
	if n := len(h.reported); n > 2*maxHosts+1 {
		t.Errorf("%d last reports kept for 1000 hosts, want at most %d", n, 2*maxHosts+1)
	}
	if hosts, _ := e.HostStats(); hosts > maxHosts+1 {
		t.Errorf("engine holds %d hosts, want at most %d", hosts, maxHosts+1)
	}
	if o, err := e.Offset(last, now); err != nil || o.Kind != latency.KindReported || o.Offset != 3*time.Millisecond {
		t.Errorf("newest host's offset: %+v, %v; want reported 3ms", o, err)
	}
	if h.id("pod-0999") != last {
		t.Error("a held host's name gave another id")
	}
}
