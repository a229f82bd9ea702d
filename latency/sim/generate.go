package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/tidemark/tidemark/latency"
)

// ObsKind is what a collector observed.
type ObsKind uint8

// Observation kinds.
const (
	ObsBracket ObsKind = iota
	ObsSync
	ObsCommit
	ObsRecord
	// ObsAck is an instrumented producer's acknowledgement (Scenario.ProducerAcks): T1 send and T4 ack on the
	// producer's clock (ms), Remote the append stamp (ms, the clock of broker Broker).
	ObsAck
)

// OffsetReport is a host's self-measured clock offset carried in a receipt (ModeReported): offset ± uncertainty, ms.
type OffsetReport struct {
	Valid       bool
	Offset, Unc float64
}

// Stamp is a record stamp as observed: Host indexes Flow.Hosts (-1: the reference clock).
type Stamp struct {
	Host  int
	Value int64
	Unit  latency.Unit
}

// Observation is one thing the collector sees, at reference time At (ms). Only observable fields are set; the truth
// of a record is in Flow.Truths[Truth], which Run never passes to the engine.
type Observation struct {
	At   float64
	Kind ObsKind
	Host int
	// Bracket: send and ack on the reference clock (ms), the broker's append stamp (ms, its clock).
	Send, Ack float64
	Remote    int64
	// Ack: the broker (index into Flow.Hosts) that stamped Remote.
	Broker int
	// Sync: T1, T4 on the host clock, T2, T3 on the reference clock (ms).
	T1, T2, T3, T4 float64
	// Commit and record.
	Partition int
	Offset    int64
	Stamps    [latency.NumMoments]Stamp
	// Reports carried by the record (ModeReported): the producer's in its produce header, the consumer's in its
	// receipt.
	ProducerReport, ConsumerReport OffsetReport
	Truth                          int
}

// Truth is a processed record's ground truth: true stages in ms and true class.
type Truth struct {
	Partition                                    int
	Offset                                       int64
	Ingest, QueueWait, Processing, Delivery, E2E float64
	Class                                        latency.Class
	ProducerHost, BrokerHost, ConsumerHost       int
	AppendMs                                     float64 // true append time, reference ms
}

// Flow is a generated scenario: host names, observations in the order the collector sees them, and truths.
type Flow struct {
	Scenario  Scenario
	Hosts     []string
	Roles     []Role
	Obs       []Observation
	Truths    []Truth
	MinIngest float64 // smallest true produce→append delay, ms: the envelope's irreducible bias
	clocks    []*host
	reports   [][]timedReport // per host (ModeReported): self-sync results in time order
}

type timedReport struct {
	at float64
	r  OffsetReport
}

// reportAt returns host h's latest self-sync result at reference time t.
func (f *Flow) reportAt(h int, t float64) OffsetReport {
	rs := f.reports[h]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].at > t })
	if i == 0 {
		return OffsetReport{}
	}
	return rs[i-1].r
}

// TrueOffset returns host − reference (ms) of host index h at reference time ref (ms).
func (f *Flow) TrueOffset(h int, ref float64) float64 { return f.clocks[h].trueOffset(ref) }

// stepping reports whether host h's clock stepped within the 10 s before reference time ref (ms): until bounds
// after the step confirm it (Config.StepConfirm of them), its estimate is the one from before.
func (f *Flow) stepping(h int, ref float64) bool {
	for _, at := range f.clocks[h].stepsAbs {
		if ref >= at && ref < at+10e3 {
			return true
		}
	}
	return false
}

type simRecord struct {
	produce, append float64 // reference ms
	producer        int
	broker          int // the host that appended it: the leader of its epoch
	produceStamp    Stamp
	appendStamp     int64
}

// leaderAt returns which broker (index) leads, at reference time t (ms), the partitions broker b leads by
// preference, and from when they accept appends again if t falls in a failover's election.
func (f *Flow) leaderAt(b int, t float64) (leader int, availableAt float64) {
	start := msOf(f.Scenario.Start)
	for _, fo := range f.Scenario.Failovers {
		at := start + float64(fo.At)/1e6
		if fo.From == b && t >= at && t < at+float64(fo.For)/1e6 {
			return fo.To, at + float64(fo.Election)/1e6
		}
	}
	return b, t
}

// cachedAt returns when the LeaderCacheTTL cache that answers at reference time t (ms) was last refreshed.
func (f *Flow) cachedAt(t float64) float64 {
	sc := f.Scenario
	ttl := float64(sc.LeaderCacheTTL) / 1e6
	phase := msOf(sc.Start)
	if len(sc.Failovers) > 0 {
		phase += float64(sc.Failovers[0].At)/1e6 - 5000
	}
	return phase + math.Floor((t-phase)/ttl)*ttl
}

// brokerDown reports whether broker b is failed at reference time t (ms): its probes go unanswered.
func (f *Flow) brokerDown(b int, t float64) bool {
	start := msOf(f.Scenario.Start)
	for _, fo := range f.Scenario.Failovers {
		at := start + float64(fo.At)/1e6
		if fo.From == b && t >= at && t < at+float64(fo.For)/1e6 {
			return true
		}
	}
	return false
}

// Generate builds the scenario's flow deterministically from its seed.
func Generate(sc Scenario) (*Flow, error) {
	if err := sc.validate(); err != nil {
		return nil, err
	}
	start := msOf(sc.Start)
	g := &generator{f: &Flow{Scenario: sc, MinIngest: math.Inf(1)}, sc: sc,
		r:     rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15)),
		start: start, end: start + float64(sc.Duration)/1e6}
	// Every step draws from g.r: their order is part of what a seed replays.
	g.addHosts()
	g.addSteps()
	g.probes()
	g.selfSyncs()
	g.syncExchanges()
	for p := 0; p < sc.Partitions; p++ {
		g.partition(p)
	}
	sortObs(g.f.Obs)
	return g.f, nil
}

// generator is the state of one Generate call: the flow it builds, the scenario, the one random source every draw
// comes from, and the scenario's span in reference ms.
type generator struct {
	f          *Flow
	sc         Scenario
	r          *rand.Rand
	start, end float64
}

// validate returns an error naming the scenario when a host count, the partitions, the rate, the duration or an
// interval is not positive, or when a failover names a broker the scenario lacks or moves to the broker it leaves.
func (sc Scenario) validate() error {
	if sc.Brokers < 1 || sc.Producers < 1 || sc.Consumers < 1 || sc.Partitions < 1 || sc.Rate <= 0 || sc.Duration <= 0 {
		return fmt.Errorf("generate scenario %q: hosts, partitions, rate and duration must be positive", sc.Name)
	}
	for _, iv := range []time.Duration{sc.ProbeInterval, sc.SyncInterval, sc.CommitInterval, sc.PollInterval} {
		if iv <= 0 {
			return fmt.Errorf("generate scenario %q: intervals must be positive", sc.Name)
		}
	}
	for _, fo := range sc.Failovers {
		if fo.From < 0 || fo.From >= sc.Brokers || fo.To < 0 || fo.To >= sc.Brokers || fo.From == fo.To {
			return fmt.Errorf("generate scenario %q: failover from broker %d to %d of %d", sc.Name, fo.From, fo.To, sc.Brokers)
		}
	}
	return nil
}

// addHosts adds the producers, brokers and consumers, in that order (hostIndex relies on it), each with a drawn
// clock. A broker offset fixed by Scenario.BrokerOffsets replaces the drawn one, so fixing it changes no later draw.
func (g *generator) addHosts() {
	sc := g.sc
	for i := 0; i < sc.Producers; i++ {
		g.addHost(RoleProducer, fmt.Sprintf("producer-%d", i))
	}
	for i := 0; i < sc.Brokers; i++ {
		g.addHost(RoleBroker, fmt.Sprintf("broker-%d", i))
		if i < len(sc.BrokerOffsets) {
			g.f.clocks[len(g.f.clocks)-1].offset = float64(sc.BrokerOffsets[i]) / 1e6
		}
	}
	for i := 0; i < sc.Consumers; i++ {
		g.addHost(RoleConsumer, fmt.Sprintf("consumer-%d", i))
	}
}

// addHost adds one host whose clock starts uniformly within ±MaxOffset and drifts by DriftPPM with a random sign.
func (g *generator) addHost(role Role, name string) {
	f, sc, r := g.f, g.sc, g.r
	h := &host{name: name, startMs: g.start,
		offset: (r.Float64()*2 - 1) * float64(sc.MaxOffset) / 1e6,
		drift:  sc.DriftPPM * 1e-6}
	if r.IntN(2) == 0 {
		h.drift = -h.drift
	}
	f.Hosts, f.Roles, f.clocks = append(f.Hosts, name), append(f.Roles, role), append(f.clocks, h)
}

// hostIndex returns the index in Flow.Hosts of the i-th host of a role.
func (g *generator) hostIndex(role Role, i int) int {
	switch role {
	case RoleProducer:
		return i
	case RoleBroker:
		return g.sc.Producers + i
	}
	return g.sc.Producers + g.sc.Brokers + i
}

// addSteps puts the scenario's clock steps on their hosts' clocks, with their reference times.
func (g *generator) addSteps() {
	for _, s := range g.sc.Steps {
		h := g.f.clocks[g.hostIndex(s.Role, s.Index)]
		h.steps = append(h.steps, s)
		h.stepsAbs = append(h.stepsAbs, g.start+float64(s.At)/1e6)
	}
}

// stampOn returns the stamp host h writes at reference time ref (ms) in unit, as a host of mode writes it: a host in
// ModeReference is the collector, which stamps on the reference clock in ns.
func (g *generator) stampOn(mode Mode, h int, ref float64, unit latency.Unit) Stamp {
	if mode == ModeReference {
		return Stamp{Host: -1, Value: int64(math.Floor(ref * 1e6)), Unit: latency.Nanos}
	}
	v := g.f.clocks[h].read(ref)
	if unit == latency.Millis {
		return Stamp{Host: h, Value: int64(math.Floor(v)), Unit: latency.Millis}
	}
	return Stamp{Host: h, Value: int64(math.Floor(v * 1e6)), Unit: latency.Nanos}
}

// probes adds the collector's probe brackets: every ProbeInterval per broker, with jitter; the broker stamps the
// arrival after a little handling. A failed broker's probes go unanswered.
func (g *generator) probes() {
	f, sc, r := g.f, g.sc, g.r
	for b := 0; b < sc.Brokers; b++ {
		h := g.hostIndex(RoleBroker, b)
		for t := g.start + r.Float64()*float64(sc.ProbeInterval)/1e6; t < g.end; t += float64(sc.ProbeInterval) / 1e6 {
			out, back, handle := sc.OneWay.draw(r), sc.OneWay.draw(r), r.Float64()*0.3
			if f.brokerDown(b, t+out) {
				continue // failed: the probe goes unanswered (the probe path counts it lost)
			}
			remote := int64(math.Floor(f.clocks[h].read(t + out + handle)))
			ack := t + out + handle + back
			f.Obs = append(f.Obs, Observation{At: ack, Kind: ObsBracket, Host: h, Send: t, Ack: ack, Remote: remote, Truth: -1})
		}
	}
}

// clientMode returns the mode of host i when it is a producer or a consumer; brokers (false) are placed by probes.
func (g *generator) clientMode(i int) (Mode, bool) {
	switch g.f.Roles[i] {
	case RoleBroker:
		return 0, false
	case RoleConsumer:
		return g.sc.Consumer, true
	}
	return g.sc.Producer, true
}

// selfSyncs runs the self-syncs of ModeReported hosts: every SyncInterval the best of 8 round trips, kept in
// Flow.reports for the receipts and produce headers that carry them.
func (g *generator) selfSyncs() {
	f, sc, r := g.f, g.sc, g.r
	f.reports = make([][]timedReport, len(f.Hosts))
	for i := range f.Hosts {
		if mode, ok := g.clientMode(i); !ok || mode != ModeReported {
			continue
		}
		c := f.clocks[i]
		for t := g.start + r.Float64()*float64(sc.SyncInterval)/1e6; t < g.end; t += float64(sc.SyncInterval) / 1e6 {
			best := OffsetReport{}
			u := t
			for k := 0; k < 8; k++ {
				d1, d2 := sc.OneWay.draw(r), sc.OneWay.draw(r)
				t1, t2 := c.read(u), u+d1
				t3 := t2 + 0.05
				t4 := c.read(t3 + d2)
				lo, hi := t1-t2, t4-t3 // host − reference bounds
				if !best.Valid || (hi-lo)/2 < best.Unc {
					best = OffsetReport{Valid: true, Offset: (lo + hi) / 2, Unc: (hi - lo) / 2}
				}
				u = t3 + d2 + 1
			}
			f.reports[i] = append(f.reports[i], timedReport{at: u, r: best})
		}
	}
}

// syncExchanges adds the sync exchanges of ModeSynced producers and consumers with the collector, every
// SyncInterval; the collector sees each when its last leg returns.
func (g *generator) syncExchanges() {
	f, sc, r := g.f, g.sc, g.r
	for i := range f.Hosts {
		if mode, ok := g.clientMode(i); !ok || mode != ModeSynced {
			continue
		}
		c := f.clocks[i]
		for t := g.start + r.Float64()*float64(sc.SyncInterval)/1e6; t < g.end; t += float64(sc.SyncInterval) / 1e6 {
			d1, d2 := sc.OneWay.draw(r), sc.OneWay.draw(r)
			t2 := t + d1
			t3 := t2 + 0.05
			f.Obs = append(f.Obs, Observation{At: t3 + d2 + 1, Kind: ObsSync, Host: i,
				T1: c.read(t), T2: t2, T3: t3, T4: c.read(t3 + d2), Truth: -1})
		}
	}
}

// sortObs puts observations in the order the collector sees them: by arrival, ties in the order generated.
func sortObs(obs []Observation) {
	slices.SortStableFunc(obs, func(a, b Observation) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
}
