package lagexporter

import (
	"sync/atomic"
	"time"
)

// ElectionConfig configures the election of the one active lag exporter among the replicas of `tidemark run` that
// watch a cluster (klag-exporter's model, on Kafka's own group protocol rather than a home-made coordinator): every
// replica joins the consumer group Group subscribed to Topic, a topic of exactly one partition that carries no
// records; the member the group assigns that partition holds the lease and is active. Every replica polls (its
// latency engine and tap need the commits, and a standby taking over has warm status windows); only the active one
// serves the lag series on /metrics and writes lag snapshots to ClickHouse. When the active replica dies the group
// coordinator expires its session after SessionTimeout and assigns the partition to another member.
type ElectionConfig struct {
	// Enabled turns the election on. Off (the default), the replica is always active: one replica per cluster.
	Enabled bool `yaml:"enabled" json:"enabled,omitempty"`
	// Group is the election's consumer group. Default "tidemark-lag-exporter-" + Cluster.
	Group string `yaml:"group" json:"group,omitempty"`
	// Topic is the lease topic, created with one partition when missing. Default "tidemark-lag-lease".
	Topic string `yaml:"topic" json:"topic,omitempty"`
	// SessionTimeout is the group session timeout: how long a dead active replica holds the lease. Default 10s; the
	// broker only accepts values within its group.min/max.session.timeout.ms (6s to 30 min by default).
	SessionTimeout time.Duration `yaml:"session_timeout" json:"session_timeout,omitempty"`
}

// DefaultLeaseTopic is ElectionConfig.Topic's default.
const DefaultLeaseTopic = "tidemark-lag-lease"

func (e *ElectionConfig) setDefaults(cluster string) {
	if e.Group == "" {
		e.Group = "tidemark-lag-exporter-" + cluster
	}
	if e.Topic == "" {
		e.Topic = DefaultLeaseTopic
	}
	if e.SessionTimeout == 0 {
		e.SessionTimeout = 10 * time.Second
	}
}

func (e *ElectionConfig) validate(bad func(k, format string, args ...any)) {
	if e.SessionTimeout < time.Second || e.SessionTimeout > 30*time.Minute {
		bad("election.session_timeout", "must be in [1s, 30m], got %s", e.SessionTimeout)
	}
	if e.Group == "" || e.Topic == "" {
		bad("election", "group and topic must not be empty")
	}
}

// Activity is whether this replica is the active lag exporter of its cluster. Safe for concurrent use. The zero
// value is standby; NewActivity(false) is always active.
type Activity struct {
	elected bool // false: no election, always active
	active  atomic.Bool
	changes atomic.Uint64
}

// NewActivity returns the activity of a replica: always active when elected is false (no election), else standby
// until Set(true).
func NewActivity(elected bool) *Activity {
	a := &Activity{elected: elected}
	if !elected {
		a.active.Store(true)
	}
	return a
}

// Active reports whether this replica is the active lag exporter now.
func (a *Activity) Active() bool { return a.active.Load() }

// Set records the election's outcome: active while this replica holds the lease. A no-op without an election.
func (a *Activity) Set(active bool) {
	if a.elected && a.active.Swap(active) != active {
		a.changes.Add(1)
	}
}

// Changes is how many times the replica became active or standby.
func (a *Activity) Changes() uint64 { return a.changes.Load() }

// ActiveSource is what /metrics reads on a replica that may be standby: Loop's latest snapshot while Activity is
// active, none while standby (the exporter's health series stay: every replica polls). It implements promexport's
// SnapshotSource and ActiveReporter.
type ActiveSource struct {
	Loop interface {
		Latest() *Snapshot
		Health() Health
	} // a *Loop
	Activity *Activity
}

// Latest is the loop's latest snapshot while active, nil while standby.
func (s ActiveSource) Latest() *Snapshot {
	if !s.Activity.Active() {
		return nil
	}
	return s.Loop.Latest()
}

// Health is the loop's health.
func (s ActiveSource) Health() Health { return s.Loop.Health() }

// Active reports whether the replica is active.
func (s ActiveSource) Active() bool { return s.Activity.Active() }
