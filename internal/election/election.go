// Package election elects the one active lag exporter among the replicas of `tidemark run` that watch a cluster, on
// Kafka's own group protocol (the group coordinator is the only coordinator). Every member joins one consumer group
// subscribed to a lease topic of exactly one partition; the member the group assigns that partition holds the lease.
// Nothing is read from or committed to the lease topic.
//
// [Run] takes the cluster's `kafka:` block ([kafkaconfig.Config]: brokers, TLS, SASL) and resolves it itself. Until
// the block resolves (a password or certificate file that cannot be read yet, such as a Secret not mounted) and until
// Kafka answers, the member waits and retries (0.5 s doubling to 30 s, each failure logged) and holds nothing.
//
// What a holder can rely on:
//   - The sticky assignor keeps the lease on its holder when other members join or leave: a rebalance that hands the
//     lease back calls nothing, so the active replica keeps serving through a rolling update.
//   - A holder that dies keeps the lease for one session timeout (Config.SessionTimeout, the group's
//     session.timeout.ms; heartbeats go every tenth of it); the next rebalance then hands it to another member. A
//     holder that stops cleanly leaves the group, and the lease moves at once.
//   - A holder cut off from the coordinator learns it when its heartbeats fail and lets go one session timeout after
//     its last session ended, unless a new session hands the lease back first; it can therefore overlap the next
//     holder by up to about two session timeouts. The lease is not a mutual-exclusion lock: what a holder writes must
//     stay correct when two members briefly both hold it.
//
// Run returns nil when its context ends (after letting go of a held lease and leaving the group), and an error when
// the lease topic exists with more than one partition (every member would hold a lease) or leaving the group fails.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/kafka/topicadmin"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
)

// Config configures Run.
type Config struct {
	// Kafka is the cluster's `kafka:` block: the brokers and how to reach them (TLS, SASL). Run resolves it (reads
	// its files) and sets the consumer-group fields it needs on the sarama configuration it makes from it.
	Kafka kafkaconfig.Config
	// Group is the election's consumer group; Topic the lease topic (created with one partition when missing).
	Group, Topic string
	// SessionTimeout is the group session timeout: how long a dead holder keeps the lease. Heartbeats go every
	// tenth of it. 0 keeps sarama's default (10 s, heartbeats every 3 s).
	SessionTimeout time.Duration
	// OnChange (required) is called with true when this member is assigned the lease partition, and with false
	// when it no longer holds it: the next session after a rebalance does not assign it here, no session follows
	// within SessionTimeout of the one that held it (lost heartbeats, coordinator unreachable), or Run returns. A
	// rebalance that hands the lease back (the sticky assignor does, to a holder that stays) calls nothing, so the
	// active replica keeps serving while members join or leave. Calls are sequential.
	OnChange func(held bool)
	// Logger receives the retries and every change of the lease (nil: discarded).
	Logger *slog.Logger
}

// Run holds a membership in cfg.Group until ctx ends (see the package comment for what the lease guarantees). While
// cfg.Kafka cannot be resolved or Kafka cannot be reached it retries; it returns nil when ctx ends, or an error when
// the lease topic exists with more than one partition or leaving the group fails.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sc, ok := resolve(ctx, cfg)
	if !ok {
		return nil
	}
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	if cfg.SessionTimeout > 0 {
		sc.Consumer.Group.Session.Timeout = cfg.SessionTimeout
		// A member learns of a rebalance on its next heartbeat: frequent ones keep the failover near the session
		// timeout (expiry of the dead holder) rather than a third more. A twentieth (500 ms at the default 10 s)
		// leaves the rejoin and the first scrape most of the poll interval the failover target allows beyond it.
		sc.Consumer.Group.Heartbeat.Interval = cfg.SessionTimeout / 20
	}
	// Kafka down at start is waited for (0.5 s doubling to 30 s); a lease topic of several partitions is an error.
	brokers := cfg.Kafka.Brokers
	var cg sarama.ConsumerGroup
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		parts, err := topicadmin.Ensure(brokers, sc, topicadmin.Spec{Name: cfg.Topic, Partitions: 1})
		if err == nil && parts != 1 {
			return fmt.Errorf("lease topic %s has %d partitions, want 1: every member would hold a lease", cfg.Topic, parts)
		}
		if err == nil {
			if cg, err = sarama.NewConsumerGroup(brokers, cfg.Group, sc); err == nil {
				break
			}
		}
		cfg.Logger.Warn("lag exporter election cannot reach Kafka; retrying", "group", cfg.Group, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	go func() {
		for err := range cg.Errors() {
			cfg.Logger.Warn("lease group error", "group", cfg.Group, "err", err)
		}
	}()
	h := &handler{cfg: cfg, grace: sc.Consumer.Group.Session.Timeout}
	defer h.release()
	for ctx.Err() == nil {
		if err := cg.Consume(ctx, []string{cfg.Topic}, h); err != nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				break
			}
			cfg.Logger.Warn("lease group session", "group", cfg.Group, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	if err := cg.Close(); err != nil { // leaves the group: the next holder need not wait for the session timeout
		return fmt.Errorf("leave lease group %s: %w", cfg.Group, err)
	}
	return nil
}

// resolve makes the sarama configuration of cfg.Kafka, retrying (0.5 s doubling to 30 s) while a file the block
// names cannot be read: the member stays out of the group, so it holds nothing meanwhile. It reports false when ctx
// ended first.
func resolve(ctx context.Context, cfg Config) (*sarama.Config, bool) {
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		sc, err := cfg.Kafka.Sarama()
		if err == nil {
			return sc, true
		}
		cfg.Logger.Warn("lag exporter election cannot resolve the kafka block; retrying", "group", cfg.Group, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(wait):
		}
	}
}

// handler is the sarama handler of one lease membership; sarama calls Setup and Cleanup sequentially, the release
// timer runs apart, so mu orders them.
type handler struct {
	cfg   Config
	grace time.Duration // how long a held lease outlives the session that held it, waiting for the next one

	mu      sync.Mutex
	held    bool   // OnChange(true) was the last call
	session uint64 // counts Setups: a release timer armed in an earlier session does nothing
}

func (h *handler) Setup(sess sarama.ConsumerGroupSession) error {
	claimed := len(sess.Claims()[h.cfg.Topic]) > 0
	h.mu.Lock()
	defer h.mu.Unlock()
	h.session++
	switch {
	case claimed && !h.held:
		h.held = true
		h.cfg.Logger.Info("lease acquired", "group", h.cfg.Group, "member", sess.MemberID(), "generation", sess.GenerationID())
		h.cfg.OnChange(true)
	case claimed:
		h.cfg.Logger.Info("lease kept across a rebalance", "group", h.cfg.Group, "member", sess.MemberID(), "generation", sess.GenerationID())
	case h.held:
		h.held = false
		h.cfg.Logger.Info("lease released: the rebalance gave it to another member", "group", h.cfg.Group, "member", sess.MemberID(), "generation", sess.GenerationID())
		h.cfg.OnChange(false)
	}
	return nil
}

// Cleanup ends a session. A held lease is kept until the next session says whether this member still holds it,
// for at most grace: a session that never comes (heartbeats lost) must not leave this member active for ever.
func (h *handler) Cleanup(sess sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held {
		return nil
	}
	ended := h.session
	time.AfterFunc(h.grace, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.session == ended && h.held {
			h.held = false
			h.cfg.Logger.Info("lease released: no session followed within the session timeout", "group", h.cfg.Group)
			h.cfg.OnChange(false)
		}
	})
	return nil
}

// release lets go of a held lease when Run returns.
func (h *handler) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.session++ // disarms a pending release timer
	if h.held {
		h.held = false
		h.cfg.Logger.Info("lease released", "group", h.cfg.Group)
		h.cfg.OnChange(false)
	}
}

// ConsumeClaim holds the claim until the session ends; the lease topic carries no records (any are ignored).
func (h *handler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case _, ok := <-claim.Messages():
			if !ok {
				return nil
			}
		}
	}
}
