package lagexporter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// flakyCluster answers from a fixed timeline line, failing Metadata or one group's commits on demand.
type flakyCluster struct {
	*TimelineCluster
	failMetadata bool
	failGroup    string
}

func (f *flakyCluster) Metadata(ctx context.Context) ([]TopicObservation, error) {
	if f.failMetadata {
		return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	return f.TimelineCluster.Metadata(ctx)
}

func (f *flakyCluster) CommittedOffsets(ctx context.Context, groups []string) ([]GroupObservation, error) {
	out, err := f.TimelineCluster.CommittedOffsets(ctx, groups)
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
	tl, err := ReadTimelineFile("testdata/c05_log_start.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	fc := &flakyCluster{TimelineCluster: NewTimelineCluster(tl)}
	fc.Advance()
	cfg := caseConfig(t, tl)
	cfg.PollInterval = 5 * time.Millisecond
	return fc, cfg
}

func TestLoopKeepsLastGoodSnapshot(t *testing.T) {
	fc, cfg := newFlaky(t)
	reg := prometheus.NewRegistry()
	loop, err := NewLoop(cfg, fc, time.Now, reg)
	if err != nil {
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
	g := s.Group("g")
	if g == nil || g.Error == "" || g.Total.Lag != 300 || !g.Partitions[0].Flags.Has(FlagStale) {
		t.Fatalf("group with failed commits = %+v, want last values (lag 300) flagged stale", g)
	}
	if loop.Health().Errors[ErrKindCommitted] != 1 {
		t.Fatalf("committed errors not counted: %+v", loop.Health())
	}
	// the registered collector serves it
	if n, err := reg.Gather(); err != nil || len(n) == 0 {
		t.Fatalf("gather: %v, %d families", err, len(n))
	}
	if err := reg.Register(NewCollector(cfg, loop)); err == nil {
		t.Fatal("a second registration of the same metrics succeeded")
	}
}

func TestLoopRunAndSubscribe(t *testing.T) {
	fc, cfg := newFlaky(t)
	loop, err := NewLoop(cfg, fc, time.Now, nil)
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
	loop, err := NewLoop(cfg, fc, time.Now, nil)
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

func FuzzReadTimeline(f *testing.F) {
	f.Add([]byte(`{"time":"2026-11-29T12:00:00Z","topics":[{"topic":"t","partitions":[{"partition":0,"log_start":0,"high_watermark":5}]}],"groups":[{"group":"g","offsets":[{"topic":"t","partition":0,"offset":3}]}]}`))
	f.Add([]byte(`{"config":{"groups":[{"match":"g","isolation":"read_committed"}]}}` + "\n" + `{"time":"2026-11-29T12:00:00Z","log":[{"topic":"t","partition":0,"from":0,"to":5,"timestamp":"2026-11-29T11:00:00Z","step_ms":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		tl, err := ReadTimeline(strings.NewReader(string(b)), "fuzz")
		if err != nil {
			if !errors.Is(err, ErrTimeline) {
				t.Fatalf("error does not wrap ErrTimeline: %v", err)
			}
			return
		}
		cfg := &Config{}
		if tl.Config != nil && tl.Config.Apply(cfg) != nil {
			return
		}
		cfg.SetDefaults()
		if cfg.Validate() != nil {
			return
		}
		// any accepted timeline evaluates without panicking and never yields negative lag
		_ = Eval(context.Background(), tl, cfg, func(_ int, s *Snapshot) error {
			for _, g := range s.Groups {
				for _, p := range g.Partitions {
					if p.Lag < 0 || p.RawLag < 0 || p.TimeLag < 0 || p.ExpiredOffsets < 0 {
						t.Fatalf("negative value in %+v", p)
					}
				}
			}
			return nil
		})
	})
}

// TestHandlerFollowsLoop: the handler renders each new snapshot as it is published, so a scrape finds it ready.
func TestHandlerFollowsLoop(t *testing.T) {
	fc, cfg := newFlaky(t)
	loop, err := NewLoop(cfg, fc, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(NewCollector(cfg, loop), nil)
	snaps, cancelSub := loop.Subscribe(1)
	defer cancelSub()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Follow(ctx, snaps)
	s, err := loop.Cycle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		ready := h.valid && h.key.seq == s.Seq
		h.mu.Unlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("handler did not render the new snapshot within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
