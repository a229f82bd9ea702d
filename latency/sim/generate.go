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
	if sc.Brokers < 1 || sc.Producers < 1 || sc.Consumers < 1 || sc.Partitions < 1 || sc.Rate <= 0 || sc.Duration <= 0 {
		return nil, fmt.Errorf("generate scenario %q: hosts, partitions, rate and duration must be positive", sc.Name)
	}
	for _, iv := range []time.Duration{sc.ProbeInterval, sc.SyncInterval, sc.CommitInterval, sc.PollInterval} {
		if iv <= 0 {
			return nil, fmt.Errorf("generate scenario %q: intervals must be positive", sc.Name)
		}
	}
	r := rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15))
	f := &Flow{Scenario: sc, MinIngest: math.Inf(1)}
	start := msOf(sc.Start)
	end := start + float64(sc.Duration)/1e6
	addHost := func(role Role, name string) {
		h := &host{name: name, startMs: start,
			offset: (r.Float64()*2 - 1) * float64(sc.MaxOffset) / 1e6,
			drift:  sc.DriftPPM * 1e-6}
		if r.IntN(2) == 0 {
			h.drift = -h.drift
		}
		f.Hosts, f.Roles, f.clocks = append(f.Hosts, name), append(f.Roles, role), append(f.clocks, h)
	}
	for i := 0; i < sc.Producers; i++ {
		addHost(RoleProducer, fmt.Sprintf("producer-%d", i))
	}
	for i := 0; i < sc.Brokers; i++ {
		addHost(RoleBroker, fmt.Sprintf("broker-%d", i))
		if i < len(sc.BrokerOffsets) {
			f.clocks[len(f.clocks)-1].offset = float64(sc.BrokerOffsets[i]) / 1e6
		}
	}
	for _, fo := range sc.Failovers {
		if fo.From < 0 || fo.From >= sc.Brokers || fo.To < 0 || fo.To >= sc.Brokers || fo.From == fo.To {
			return nil, fmt.Errorf("generate scenario %q: failover from broker %d to %d of %d", sc.Name, fo.From, fo.To, sc.Brokers)
		}
	}
	for i := 0; i < sc.Consumers; i++ {
		addHost(RoleConsumer, fmt.Sprintf("consumer-%d", i))
	}
	hostIndex := func(role Role, i int) int {
		switch role {
		case RoleProducer:
			return i
		case RoleBroker:
			return sc.Producers + i
		}
		return sc.Producers + sc.Brokers + i
	}
	for _, s := range sc.Steps {
		h := f.clocks[hostIndex(s.Role, s.Index)]
		h.steps = append(h.steps, s)
		h.stepsAbs = append(h.stepsAbs, start+float64(s.At)/1e6)
	}
	stampOn := func(mode Mode, h int, ref float64, unit latency.Unit) Stamp {
		if mode == ModeReference {
			return Stamp{Host: -1, Value: int64(math.Floor(ref * 1e6)), Unit: latency.Nanos}
		}
		v := f.clocks[h].read(ref)
		if unit == latency.Millis {
			return Stamp{Host: h, Value: int64(math.Floor(v)), Unit: latency.Millis}
		}
		return Stamp{Host: h, Value: int64(math.Floor(v * 1e6)), Unit: latency.Nanos}
	}

	// Probes: every ProbeInterval per broker, with jitter; the broker stamps the arrival after a little handling.
	for b := 0; b < sc.Brokers; b++ {
		h := hostIndex(RoleBroker, b)
		for t := start + r.Float64()*float64(sc.ProbeInterval)/1e6; t < end; t += float64(sc.ProbeInterval) / 1e6 {
			out, back, handle := sc.OneWay.draw(r), sc.OneWay.draw(r), r.Float64()*0.3
			if f.brokerDown(b, t+out) {
				continue // failed: the probe goes unanswered (the probe path counts it lost)
			}
			remote := int64(math.Floor(f.clocks[h].read(t + out + handle)))
			ack := t + out + handle + back
			f.Obs = append(f.Obs, Observation{At: ack, Kind: ObsBracket, Host: h, Send: t, Ack: ack, Remote: remote, Truth: -1})
		}
	}
	// Self-syncing hosts (ModeReported): every SyncInterval the best of 8 round trips, kept for their receipts.
	f.reports = make([][]timedReport, len(f.Hosts))
	for i := range f.Hosts {
		mode := sc.Producer
		switch f.Roles[i] {
		case RoleBroker:
			continue
		case RoleConsumer:
			mode = sc.Consumer
		}
		if mode != ModeReported {
			continue
		}
		c := f.clocks[i]
		for t := start + r.Float64()*float64(sc.SyncInterval)/1e6; t < end; t += float64(sc.SyncInterval) / 1e6 {
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
	// Sync exchanges of synced producers and consumers.
	for i := range f.Hosts {
		mode := sc.Producer
		switch f.Roles[i] {
		case RoleBroker:
			continue
		case RoleConsumer:
			mode = sc.Consumer
		}
		if mode != ModeSynced {
			continue
		}
		c := f.clocks[i]
		for t := start + r.Float64()*float64(sc.SyncInterval)/1e6; t < end; t += float64(sc.SyncInterval) / 1e6 {
			d1, d2 := sc.OneWay.draw(r), sc.OneWay.draw(r)
			t2 := t + d1
			t3 := t2 + 0.05
			f.Obs = append(f.Obs, Observation{At: t3 + d2 + 1, Kind: ObsSync, Host: i,
				T1: c.read(t), T2: t2, T3: t3, T4: c.read(t3 + d2), Truth: -1})
		}
	}

	for p := 0; p < sc.Partitions; p++ {
		f.partition(r, p, start, end, hostIndex, stampOn)
	}
	slices.SortStableFunc(f.Obs, func(a, b Observation) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
	return f, nil
}

// partition simulates one partition: production, appends on its leader, one consumer at a time with commits,
// pauses, rewinds and rebalances, and the lag exporter's commit polls.
func (f *Flow) partition(r *rand.Rand, p int, start, end float64, hostIndex func(Role, int) int,
	stampOn func(Mode, int, float64, latency.Unit) Stamp) {
	sc := f.Scenario
	preferred := p % sc.Brokers
	var recs []simRecord
	lastAppend := math.Inf(-1)
	produceUnit := latency.Nanos // instrumented producers write a ns produce-time header
	var produceReports []OffsetReport
	if sc.Producer == ModeEnvelope {
		produceUnit = latency.Millis // uninstrumented: CreateTime, ms
	}
	for t := start + r.ExpFloat64()/sc.Rate*1e3; t < end; t += r.ExpFloat64() / sc.Rate * 1e3 {
		prod := hostIndex(RoleProducer, r.IntN(sc.Producers))
		app := math.Max(lastAppend, t+sc.OneWay.draw(r)+r.Float64()*0.3)
		leader, avail := f.leaderAt(preferred, app)
		if app < avail { // an election is under way: the producer's retry is appended by the new leader
			app = avail
			leader, _ = f.leaderAt(preferred, app)
		}
		broker := hostIndex(RoleBroker, leader)
		lastAppend = app
		f.MinIngest = math.Min(f.MinIngest, app-t)
		if sc.Producer == ModeReported {
			produceReports = append(produceReports, f.reportAt(prod, t))
		}
		recs = append(recs, simRecord{produce: t, append: app, producer: prod, broker: broker,
			produceStamp: stampOn(sc.Producer, prod, t, produceUnit),
			appendStamp:  int64(math.Floor(f.clocks[broker].read(app)))})
		if sc.ProducerAcks {
			// The acknowledgement travels back one way; it reaches the collector through the receipts topic after
			// the emitter's linger (100 ms) and another one-way trip.
			ack := app + sc.OneWay.draw(r) + r.Float64()*0.3
			pc := f.clocks[prod]
			f.Obs = append(f.Obs, Observation{At: ack + 100 + sc.OneWay.draw(r), Kind: ObsAck, Host: prod, Broker: broker,
				T1: pc.read(t), T4: pc.read(ack), Remote: recs[len(recs)-1].appendStamp, Truth: -1})
		}
	}

	type event struct {
		at   float64
		kind int // 0 pause, 1 rewind, 2 rebalance
		i    int
	}
	var evs []event
	for i, x := range sc.Pauses {
		if x.Partition == p || x.Partition < 0 {
			evs = append(evs, event{start + float64(x.At)/1e6, 0, i})
		}
	}
	for i, x := range sc.Rewinds {
		if x.Partition == p {
			evs = append(evs, event{start + float64(x.At)/1e6, 1, i})
		}
	}
	for i, x := range sc.Rebalances {
		if x.Partition == p {
			evs = append(evs, event{start + float64(x.At)/1e6, 2, i})
		}
	}
	slices.SortFunc(evs, func(a, b event) int { return int(math.Copysign(1, a.at-b.at)) })

	type commit struct {
		at     float64
		offset int64
	}
	groupStart := start
	var hist []commit
	committed, high := int64(-1), int64(-1)
	if sc.NewGroupAt > 0 {
		groupStart = start + float64(sc.NewGroupAt)/1e6
	} else {
		committed, high = 0, 0
		hist = append(hist, commit{start, 0})
	}
	doCommit := func(at float64, o int64) {
		if o != committed {
			hist = append(hist, commit{at, o})
		}
		committed, high = o, max(high, o)
	}
	cons := p % sc.Consumers
	now := groupStart
	commitEvery := float64(sc.CommitInterval) / 1e6
	nextCommit := now + commitEvery
	pos, processedNext := int64(0), int64(0)
	ev := 0
	receiptAt := math.Inf(-1)
	for pos < int64(len(recs)) {
		rec := recs[pos]
		recv := math.Max(now, rec.append+sc.OneWay.draw(r)+r.Float64()*2)
		if ev < len(evs) && evs[ev].at <= recv {
			e := evs[ev]
			ev++
			for nextCommit <= e.at {
				doCommit(nextCommit, pos)
				nextCommit += commitEvery
			}
			switch e.kind {
			case 0:
				x := sc.Pauses[e.i]
				now = math.Max(now, e.at+float64(x.For)/1e6)
			case 1:
				x := sc.Rewinds[e.i]
				doCommit(e.at, pos) // clean stop
				back := max(0, pos-x.Back)
				doCommit(e.at+2500, back)
				pos, now = back, e.at+5000
			case 2:
				x := sc.Rebalances[e.i]
				pos = max(committed, 0) // the next owner resumes from the last commit
				now = e.at + float64(x.Downtime)/1e6
				cons = (cons + 1) % sc.Consumers
			}
			nextCommit = now + commitEvery
			continue
		}
		if recv >= end {
			break
		}
		proc := recv + sc.Processing.draw(r)
		for nextCommit <= proc {
			doCommit(nextCommit, pos)
			nextCommit += commitEvery
		}
		ch := hostIndex(RoleConsumer, cons)
		tr := Truth{Partition: p, Offset: pos, Ingest: rec.append - rec.produce, QueueWait: recv - rec.append,
			Processing: proc - recv, Delivery: proc - rec.append, E2E: proc - rec.produce,
			ProducerHost: rec.producer, BrokerHost: rec.broker, ConsumerHost: ch, AppendMs: rec.append}
		switch {
		case pos >= processedNext && sc.NewGroupAt > 0 && rec.append < groupStart:
			tr.Class = latency.ClassBackfill
		case pos >= processedNext:
			tr.Class = latency.ClassLive
		case pos < high:
			tr.Class = latency.ClassReplay
		default:
			tr.Class = latency.ClassRedelivery
		}
		// Receipts of one partition reach the collector in order (keyed by source partition).
		receiptAt = math.Max(receiptAt, proc+sc.OneWay.draw(r))
		o := Observation{At: receiptAt, Kind: ObsRecord, Partition: p, Offset: pos, Truth: len(f.Truths)}
		o.Stamps[latency.Produce] = rec.produceStamp
		o.Stamps[latency.Append] = Stamp{Host: rec.broker, Value: rec.appendStamp, Unit: latency.Millis}
		if sc.LeaderCacheTTL > 0 {
			l, _ := f.leaderAt(preferred, f.cachedAt(receiptAt))
			o.Stamps[latency.Append].Host = hostIndex(RoleBroker, l)
		}
		if sc.WithReceive {
			o.Stamps[latency.Receive] = stampOn(sc.Consumer, ch, recv, latency.Nanos)
		}
		o.Stamps[latency.Processed] = stampOn(sc.Consumer, ch, proc, latency.Nanos)
		if sc.Producer == ModeReported {
			o.ProducerReport = produceReports[pos]
		}
		if sc.Consumer == ModeReported {
			o.ConsumerReport = f.reportAt(ch, proc)
		}
		f.Truths = append(f.Truths, tr)
		f.Obs = append(f.Obs, o)
		processedNext = max(processedNext, pos+1)
		pos++
		now = proc
	}
	// The lag exporter polls the committed offset; a new group shows no commit (-1) until its first commit.
	poll := float64(sc.PollInterval) / 1e6
	hi := 0
	for t := groupStart; t < end; t += poll {
		for hi < len(hist) && hist[hi].at <= t {
			hi++
		}
		o := int64(-1)
		if hi > 0 {
			o = hist[hi-1].offset
		}
		f.Obs = append(f.Obs, Observation{At: t, Kind: ObsCommit, Partition: p, Offset: o, Truth: -1})
	}
}
