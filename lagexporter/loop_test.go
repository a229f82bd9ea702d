package lagexporter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	. "github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/promexport"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// flakyCluster answers from a fixed timeline line, failing Metadata or one group's commits on demand.
type flakyCluster struct {
	*timeline.Player
	failMetadata bool
	failGroup    string
}

func (f *flakyCluster) Metadata(ctx context.Context) ([]TopicObservation, error) {
	if f.failMetadata {
		return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	return f.Player.Metadata(ctx)
}

func (f *flakyCluster) CommittedOffsets(ctx context.Context, groups []string) ([]GroupObservation, error) {
	out, err := f.Player.CommittedOffsets(ctx, groups)
	for i := range out {
		if out[i].Group == f.failGroup {
			out[i] = GroupObservation{Group: f.failGroup, Error: "COORDINATOR_NOT_AVAILABLE"}
			err = CycleErrors{{Kind: ErrKindCommitted, Subject: "group " + f.failGroup, Message: "COORDINATOR_NOT_AVAILABLE"}}
		}
	}
	return out, err
}

func newFlaky(t *testing.T) (*flakyCluster, *Config) {
	t.Helper()
	tl, err := timeline.ReadFile("timeline/testdata/c05_log_start.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	fc := &flakyCluster{Player: timeline.NewPlayer(tl)}
	fc.Advance()
	cfg := &Config{Cluster: "test"}
	if err := tl.Config.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.PollInterval = 5 * time.Millisecond
	return fc, cfg
}

func TestLoopKeepsLastGoodSnapshot(t *testing.T) {
	fc, cfg := newFlaky(t)
	reg := prometheus.NewRegistry()
	loop, err := NewLoop(cfg, fc, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := promexport.Register(reg, cfg, loop); err != nil {
		t.Fatal(err)
	}
	good, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fc.failMetadata = true
	if _, err := loop.Cycle(context.Background()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("cycle err = %v, want the metadata failure", err)
	}
	if loop.Latest() != good {
		t.Fatal("a failed cycle replaced the last good snapshot")
	}
	h := loop.Health()
	if h.Cycles != 2 || h.Errors[ErrKindMetadata] != 1 {
		t.Fatalf("health = %+v, want 2 cycles and 1 metadata error", h)
	}
	// a group whose commits cannot be read keeps its last values, flagged stale, and the error is counted
	fc.failMetadata, fc.failGroup = false, "g"
	s, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// the partitions keep their last values, flagged stale, with their age; the sums leave them out and
	// count them unknown (the aggregate is not complete), never adding frozen numbers to fresh ones.
	g := s.Group("g")
	if g == nil || g.Error == "" || len(g.Partitions) != 3 {
		t.Fatalf("group with failed commits = %+v, want its 3 partitions with last values", g)
	}
	for i, lag := range []int64{0, 200, 100} {
		p := g.Partitions[i]
		if p.Lag != lag || !p.Flags.Has(FlagStale) || p.StaleFor() != s.Time.Sub(good.Time) {
			t.Errorf("p%d: lag %d flags %s stale for %v, want %d stale for %v", i, p.Lag, p.Flags, p.StaleFor(), lag, s.Time.Sub(good.Time))
		}
	}
	if g.Total.Lag != 0 || g.Total.Unknown != 3 || g.Total.Complete || g.Total.Partitions != 3 {
		t.Fatalf("aggregate %+v, want lag 0 of 3 partitions, all 3 unknown, not complete", g.Total)
	}
	if loop.Health().Errors[ErrKindCommitted] != 1 {
		t.Fatalf("committed errors not counted: %+v", loop.Health())
	}
	// the registered collector serves it
	if n, err := reg.Gather(); err != nil || len(n) == 0 {
		t.Fatalf("gather: %v, %d families", err, len(n))
	}
	if err := promexport.Register(reg, cfg, loop); err == nil {
		t.Fatal("a second registration of the same metrics succeeded")
	}
}

func TestLoopRunAndSubscribe(t *testing.T) {
	fc, cfg := newFlaky(t)
	loop, err := NewLoop(cfg, fc, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	snaps, cancelSub := loop.Subscribe(1)
	defer cancelSub()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	var seqs []uint64
	for len(seqs) < 3 {
		select {
		case s := <-snaps:
			seqs = append(seqs, s.Seq)
		case <-time.After(5 * time.Second):
			t.Fatal("no snapshot within 5s")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on cancellation, want nil", err)
	}
	if seqs[2] <= seqs[0] || loop.Latest() == nil {
		t.Fatalf("snapshots %v not increasing", seqs)
	}
}

func TestGroupErrorWithoutHistory(t *testing.T) {
	fc, cfg := newFlaky(t)
	fc.failGroup = "g"
	loop, err := NewLoop(cfg, fc, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	s, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// never read: shown with its error and no partitions (not as lag 0)
	if g := s.Group("g"); g == nil || g.Error == "" || len(g.Partitions) != 0 || g.Total.Partitions != 0 {
		t.Fatalf("group = %+v, want error and no partitions", g)
	}
}

// countingCluster counts its calls as the Kafka reader counts requests.
type countingCluster struct {
	*flakyCluster
	n int64
}

func (c *countingCluster) Requests() int64 { return c.n }

func (c *countingCluster) Metadata(ctx context.Context) ([]TopicObservation, error) {
	c.n++
	return c.flakyCluster.Metadata(ctx)
}

// TestHealthCountsRequestsAndEvaluation: Health carries the Cluster's request count when it keeps one, and the
// evaluation time of the last published cycle, measured on the loop's clock.
func TestHealthCountsRequestsAndEvaluation(t *testing.T) {
	fc, cfg := newFlaky(t)
	cc := &countingCluster{flakyCluster: fc}
	clock := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// Cycle reads the clock at its start, after the reads, before and after evaluating: each read advances 1 s.
	loop, err := NewLoop(cfg, cc, func() time.Time { clock = clock.Add(time.Second); return clock })
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := loop.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	h := loop.Health()
	if h.Requests != 3 {
		t.Errorf("Requests = %d, want 3 (one Metadata per cycle)", h.Requests)
	}
	if h.LastEvaluation != time.Second {
		t.Errorf("LastEvaluation = %v, want 1s on the scripted clock", h.LastEvaluation)
	}
	if h2, _ := NewLoop(cfg, fc, time.Now); h2.Health().Requests != 0 {
		t.Error("a Cluster without a request count reports requests")
	}
}
