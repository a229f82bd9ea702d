package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// LeaseConfig configures RunLease.
type LeaseConfig struct {
	Brokers []string
	// Sarama is the client config (version, TLS, SASL); RunLease sets the consumer-group fields it needs on it and
	// it must not be shared with another client.
	Sarama *sarama.Config
	// Group is the election's consumer group; Topic the lease topic (created with one partition when missing).
	Group, Topic string
	// SessionTimeout is the group session timeout: how long a dead holder keeps the lease. Heartbeats go every
	// tenth of it.
	SessionTimeout time.Duration
	// OnChange is called with true when this member is assigned the lease partition, and with false when it no
	// longer holds it: the next session after a rebalance does not assign it here, no session follows within
	// SessionTimeout of the one that held it (lost heartbeats, coordinator unreachable), or RunLease returns. A
	// rebalance that hands the lease back (the sticky assignor does, to a holder that stays) calls nothing, so the
	// active replica keeps serving while members join or leave. Calls are sequential.
	OnChange func(held bool)
	Logger   *slog.Logger
}

// RunLease holds a membership in cfg.Group until ctx ends: the member that the group assigns the lease topic's single
// partition holds the lease (Kafka's group protocol is the coordinator; nothing else is). The sticky assignor keeps
// the lease on its holder when other members join or leave. When the holder dies the coordinator expires its session
// after SessionTimeout and the next rebalance hands the partition to another member; an old holder that loses its
// session learns it when its heartbeats fail and calls OnChange(false) one SessionTimeout later unless it is handed
// the lease again (so a holder cut off from the coordinator overlaps the next holder by up to about two session
// timeouts; a plain rebalance, a member joining or leaving, never makes the holder let go). Nothing is read from or committed to the
// lease topic. While Kafka cannot be reached it retries; it returns nil when ctx ends, or an error when the lease
// topic exists with more than one partition.
func RunLease(ctx context.Context, cfg LeaseConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sc := cfg.Sarama
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V4_0_0_0
	}
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	if cfg.SessionTimeout > 0 {
		sc.Consumer.Group.Session.Timeout = cfg.SessionTimeout
		// A member learns of a rebalance on its next heartbeat: frequent ones keep the failover near the session
		// timeout (expiry of the dead holder) rather than a third more.
		sc.Consumer.Group.Heartbeat.Interval = cfg.SessionTimeout / 10
	}
	// Kafka down at start is waited for (0.5 s doubling to 30 s); a lease topic of several partitions is an error.
	var cg sarama.ConsumerGroup
	for wait := 500 * time.Millisecond; ; wait = min(2*wait, 30*time.Second) {
		parts, err := EnsureTopic(cfg.Brokers, sc, TopicSpec{Name: cfg.Topic, Partitions: 1})
		if err == nil && parts != 1 {
			return fmt.Errorf("lease topic %s has %d partitions, want 1: every member would hold a lease", cfg.Topic, parts)
		}
		if err == nil {
			if cg, err = sarama.NewConsumerGroup(cfg.Brokers, cfg.Group, sc); err == nil {
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
	h := &leaseHandler{cfg: cfg, grace: sc.Consumer.Group.Session.Timeout}
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

// leaseHandler is the sarama handler of one lease membership; sarama calls Setup and Cleanup sequentially, the
// release timer runs apart, so mu orders them.
type leaseHandler struct {
	cfg   LeaseConfig
	grace time.Duration // how long a held lease outlives the session that held it, waiting for the next one

	mu      sync.Mutex
	held    bool   // OnChange(true) was the last call
	session uint64 // counts Setups: a release timer armed in an earlier session does nothing
}

func (h *leaseHandler) Setup(sess sarama.ConsumerGroupSession) error {
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
func (h *leaseHandler) Cleanup(sess sarama.ConsumerGroupSession) error {
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

// release lets go of a held lease when RunLease returns.
func (h *leaseHandler) release() {
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
func (h *leaseHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
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
