package sim

import (
	"math"
	"math/rand/v2"
	"time"
)

// Mode says how a producer or consumer host's clock is known to the collector.
type Mode uint8

// Host modes.
const (
	ModeReference Mode = iota // the host is the collector itself (the probe path): stamps on the reference clock
	ModeSynced                // an instrumented host that runs round-trip sync exchanges with the collector
	ModeEnvelope              // no sync at all: only the causal envelope can place it
	// ModeReported is an instrumented host that syncs itself (every SyncInterval, the best of 8 round trips, as
	// latency/instrument's TimeSync does) and reports its last offset and uncertainty in every receipt or produce
	// header; the collector feeds that to Engine.ReportOffset at the receipt's arrival.
	ModeReported
)

// Delay is a one-way delay distribution in ms: Min plus an exponential with mean Mean−Min, redrawn above Max.
// Most draws are near Min with a tail toward Max, like a LAN with occasional queueing.
type Delay struct{ Min, Mean, Max float64 }

func (d Delay) draw(r *rand.Rand) float64 {
	if d.Mean <= d.Min {
		return d.Min
	}
	for {
		v := d.Min + r.ExpFloat64()*(d.Mean-d.Min)
		if v <= d.Max {
			return v
		}
	}
}

// Step is a clock step of one host: at At after the scenario start its clock jumps by Delta (an NTP step, or a
// failover to a leader whose clock differs).
type Step struct {
	Role  Role
	Index int
	At    time.Duration
	Delta time.Duration
}

// Role is a host's part in the flow.
type Role uint8

// Roles.
const (
	RoleProducer Role = iota
	RoleBroker
	RoleConsumer
)

// Pause stops consumption of a partition (-1: all) from At for For.
type Pause struct {
	Partition int
	At, For   time.Duration
}

// Rewind is an operator's offset reset: at At the consumers of the partition stop cleanly (committing their
// position), after 2.5 s the committed offset is set Back records lower, after 5 s consumption resumes there.
type Rewind struct {
	Partition int
	At        time.Duration
	Back      int64
}

// Rebalance is a consumer crash: at At the partition's consumer dies without committing; after Downtime the next
// consumer host resumes from the last commit, so the uncommitted tail is redelivered.
type Rebalance struct {
	Partition int
	At        time.Duration
	Downtime  time.Duration
}

// Failover is a partition leader failover: at At broker From fails (its probes go unanswered) and the leadership of
// every partition it led moves to broker To, after Election during which those partitions accept no append (the
// producers retry, so records produced meanwhile are appended by To when it takes over). After For, From is back
// and takes its leaderships again (preferred leader election). Records appended before the failover keep From's
// append stamp however late they are consumed: they carry From's leader epoch.
type Failover struct {
	From, To int
	At, For  time.Duration
	Election time.Duration
}

// Scenario is one simulated deployment.
type Scenario struct {
	Name       string
	Seed       uint64
	Start      time.Time
	Duration   time.Duration
	Brokers    int
	Producers  int
	Consumers  int
	Partitions int
	Rate       float64       // records per second per partition (Poisson arrivals)
	MaxOffset  time.Duration // host offsets are uniform in ±MaxOffset
	DriftPPM   float64       // each host drifts by ±DriftPPM (random sign)
	OneWay     Delay         // network one-way delay (producer→broker, broker→consumer, probes, sync), ms
	Processing Delay         // receive→processed, ms
	Producer   Mode
	// ProducerAcks: instrumented producers report each record's acknowledgement (latency/instrument's AckReporter),
	// which the collector feeds to Engine.ObserveAck: send ≤ append ≤ ack brackets the producer's clock two-sided.
	ProducerAcks bool
	Consumer     Mode
	WithReceive  bool // stamp receive as well as processed
	// Intervals: probes per broker, sync exchanges per synced host, consumer commits, lag-exporter commit polls.
	ProbeInterval, SyncInterval, CommitInterval, PollInterval time.Duration
	Steps                                                     []Step
	Pauses                                                    []Pause
	Rewinds                                                   []Rewind
	Rebalances                                                []Rebalance
	// NewGroupAt > 0 makes the group new: it appears at Start+NewGroupAt with no commit and reads from the earliest
	// offset, so records appended before that are a backfill.
	NewGroupAt time.Duration
	// BrokerOffsets, when set, fixes the brokers' clock offsets at the start (index = broker) instead of drawing them.
	BrokerOffsets []time.Duration
	Failovers     []Failover
	// LeaderCacheTTL > 0 attributes append stamps as collectors did before leader epochs were used: to the leader a
	// metadata cache refreshed every LeaderCacheTTL sees when the record is handled (the cache is refreshed 5 s
	// before the first failover, so for LeaderCacheTTL − 5 s after it the new leader's stamps are read as the old
	// one's). The truth keeps the real leader.
	LeaderCacheTTL time.Duration
}

// host is a simulated clock.
type host struct {
	name     string
	offset   float64 // ms at the start
	drift    float64 // ratio
	steps    []Step
	startMs  float64
	stepsAbs []float64
}

// read returns the host clock reading (ms) at reference time ref (ms).
func (h *host) read(ref float64) float64 {
	v := ref + h.offset + h.drift*(ref-h.startMs)
	for i, s := range h.steps {
		if ref >= h.stepsAbs[i] {
			v += float64(s.Delta) / float64(time.Millisecond)
		}
	}
	return v
}

// trueOffset returns host − reference (ms) at ref.
func (h *host) trueOffset(ref float64) float64 { return h.read(ref) - ref }

func msOf(t time.Time) float64 { return float64(t.UnixNano()) / 1e6 }

func timeOf(ms float64) time.Time {
	sec, frac := math.Modf(ms / 1e3)
	return time.Unix(int64(sec), int64(frac*1e9))
}
