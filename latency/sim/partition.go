package sim

import (
	"math"
	"slices"

	"github.com/tidemark/tidemark/latency"
)

// partition simulates one partition: production, appends on its leader, one consumer at a time with commits,
// pauses, rewinds and rebalances, and the lag exporter's commit polls.
func (g *generator) partition(p int) {
	preferred := p % g.sc.Brokers
	recs, produceReports := g.produce(preferred)
	c := g.newConsumption(p, preferred, recs, produceReports)
	c.run()
	g.pollCommits(p, c.groupStart, c.hist)
}

// produce draws the partition's records (Poisson arrivals at Scenario.Rate) and their appends on the leader of the
// partitions broker preferred leads, with their acknowledgements when Scenario.ProducerAcks. It returns the records
// in offset order and, for ModeReported producers, the self-sync result each record's produce header carries.
func (g *generator) produce(preferred int) (recs []simRecord, produceReports []OffsetReport) {
	f, sc, r := g.f, g.sc, g.r
	lastAppend := math.Inf(-1)
	produceUnit := latency.Nanos // instrumented producers write a ns produce-time header
	if sc.Producer == ModeEnvelope {
		produceUnit = latency.Millis // uninstrumented: CreateTime, ms
	}
	for t := g.start + r.ExpFloat64()/sc.Rate*1e3; t < g.end; t += r.ExpFloat64() / sc.Rate * 1e3 {
		prod := g.hostIndex(RoleProducer, r.IntN(sc.Producers))
		app := math.Max(lastAppend, t+sc.OneWay.draw(r)+r.Float64()*0.3)
		leader, avail := f.leaderAt(preferred, app)
		if app < avail { // an election is under way: the producer's retry is appended by the new leader
			app = avail
			leader, _ = f.leaderAt(preferred, app)
		}
		broker := g.hostIndex(RoleBroker, leader)
		lastAppend = app
		f.MinIngest = math.Min(f.MinIngest, app-t)
		if sc.Producer == ModeReported {
			produceReports = append(produceReports, f.reportAt(prod, t))
		}
		recs = append(recs, simRecord{produce: t, append: app, producer: prod, broker: broker,
			produceStamp: g.stampOn(sc.Producer, prod, t, produceUnit),
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
	return recs, produceReports
}

// eventKind is what happens to a partition's consumption at a partEvent.
type eventKind int

// Event kinds, one per Scenario list.
const (
	eventPause eventKind = iota
	eventRewind
	eventRebalance
)

// partEvent is a pause, rewind or rebalance of one partition at reference time at (ms); i indexes its Scenario list.
type partEvent struct {
	at   float64
	kind eventKind
	i    int
}

// events returns the pauses, rewinds and rebalances of partition p (pauses of every partition included) in time
// order.
func (g *generator) events(p int) []partEvent {
	sc := g.sc
	var evs []partEvent
	for i, x := range sc.Pauses {
		if x.Partition == p || x.Partition < 0 {
			evs = append(evs, partEvent{g.start + float64(x.At)/1e6, eventPause, i})
		}
	}
	for i, x := range sc.Rewinds {
		if x.Partition == p {
			evs = append(evs, partEvent{g.start + float64(x.At)/1e6, eventRewind, i})
		}
	}
	for i, x := range sc.Rebalances {
		if x.Partition == p {
			evs = append(evs, partEvent{g.start + float64(x.At)/1e6, eventRebalance, i})
		}
	}
	slices.SortFunc(evs, func(a, b partEvent) int { return int(math.Copysign(1, a.at-b.at)) })
	return evs
}

// commit is a committed offset and when it was committed (reference ms).
type commit struct {
	at     float64
	offset int64
}

// consumption is the consumer side of one partition as it runs: who owns the partition, where it reads, what it
// committed, and the receipts and truths it has added to the flow.
type consumption struct {
	g              *generator
	p, preferred   int
	recs           []simRecord
	produceReports []OffsetReport
	evs            []partEvent
	nextEv         int     // index in evs of the next event
	groupStart     float64 // when the group appears (reference ms)
	hist           []commit
	// committed is the last commit and high the highest (-1: none yet); a record below high is a replay.
	committed, high int64
	cons            int     // the consumer (index among the consumers) that owns the partition
	now             float64 // reference ms from which the owner can receive its next record
	// commitEvery is the commit interval and nextCommit when the next periodic commit falls (ms).
	commitEvery, nextCommit float64
	// pos is the offset read next; processedNext is one past the highest offset ever processed.
	pos, processedNext int64
	receiptAt          float64 // arrival of the latest receipt: receipts of one partition arrive in order
}

// newConsumption starts partition p's consumption at the group's start: an existing group from a commit of offset 0
// at the scenario start, a new one (Scenario.NewGroupAt) with no commit.
func (g *generator) newConsumption(p, preferred int, recs []simRecord, produceReports []OffsetReport) *consumption {
	sc := g.sc
	c := &consumption{g: g, p: p, preferred: preferred, recs: recs, produceReports: produceReports, evs: g.events(p),
		groupStart: g.start, committed: -1, high: -1, cons: p % sc.Consumers,
		commitEvery: float64(sc.CommitInterval) / 1e6, receiptAt: math.Inf(-1)}
	if sc.NewGroupAt > 0 {
		c.groupStart = g.start + float64(sc.NewGroupAt)/1e6
	} else {
		c.committed, c.high = 0, 0
		c.hist = append(c.hist, commit{g.start, 0})
	}
	c.now = c.groupStart
	c.nextCommit = c.now + c.commitEvery
	return c
}

// run consumes the records in offset order until they run out or the scenario ends, applying each event when the
// consumer reaches it. A record's receive time is drawn before the next event is checked, and drawn again after the
// event: that order of draws is part of what a seed replays.
func (c *consumption) run() {
	sc, r := c.g.sc, c.g.r
	for c.pos < int64(len(c.recs)) {
		rec := c.recs[c.pos]
		recv := math.Max(c.now, rec.append+sc.OneWay.draw(r)+r.Float64()*2)
		if c.nextEv < len(c.evs) && c.evs[c.nextEv].at <= recv {
			e := c.evs[c.nextEv]
			c.nextEv++
			c.apply(e)
			continue
		}
		if recv >= c.g.end {
			break
		}
		c.consume(rec, recv)
	}
}

// commit records a commit of offset o at reference time at (ms); the lag exporter sees only changes of offset.
func (c *consumption) commit(at float64, o int64) {
	if o != c.committed {
		c.hist = append(c.hist, commit{at, o})
	}
	c.committed, c.high = o, max(c.high, o)
}

// commitThrough makes the periodic commits of the current position due up to reference time t (ms).
func (c *consumption) commitThrough(t float64) {
	for c.nextCommit <= t {
		c.commit(c.nextCommit, c.pos)
		c.nextCommit += c.commitEvery
	}
}

// apply applies event e: a pause delays the owner; a rewind stops cleanly, moves the commit Back records lower and
// resumes there; a rebalance hands the partition, from its last commit, to the next consumer after the downtime.
func (c *consumption) apply(e partEvent) {
	sc := c.g.sc
	c.commitThrough(e.at)
	switch e.kind {
	case eventPause:
		x := sc.Pauses[e.i]
		c.now = math.Max(c.now, e.at+float64(x.For)/1e6)
	case eventRewind:
		x := sc.Rewinds[e.i]
		c.commit(e.at, c.pos) // clean stop
		back := max(0, c.pos-x.Back)
		c.commit(e.at+2500, back)
		c.pos, c.now = back, e.at+5000
	case eventRebalance:
		x := sc.Rebalances[e.i]
		c.pos = max(c.committed, 0) // the next owner resumes from the last commit
		c.now = e.at + float64(x.Downtime)/1e6
		c.cons = (c.cons + 1) % sc.Consumers
	}
	c.nextCommit = c.now + c.commitEvery
}

// consume processes record rec at pos, received at recv (reference ms): it draws the processing time and the
// receipt's trip to the collector, and adds the record's truth and its receipt to the flow.
func (c *consumption) consume(rec simRecord, recv float64) {
	f, sc, r := c.g.f, c.g.sc, c.g.r
	proc := recv + sc.Processing.draw(r)
	c.commitThrough(proc)
	ch := c.g.hostIndex(RoleConsumer, c.cons)
	tr := Truth{Partition: c.p, Offset: c.pos, Ingest: rec.append - rec.produce, QueueWait: recv - rec.append,
		Processing: proc - recv, Delivery: proc - rec.append, E2E: proc - rec.produce,
		ProducerHost: rec.producer, BrokerHost: rec.broker, ConsumerHost: ch, AppendMs: rec.append,
		Class: c.class(rec)}
	// Receipts of one partition reach the collector in order (keyed by source partition).
	c.receiptAt = math.Max(c.receiptAt, proc+sc.OneWay.draw(r))
	o := c.receipt(rec, ch, recv, proc)
	f.Truths = append(f.Truths, tr)
	f.Obs = append(f.Obs, o)
	c.processedNext = max(c.processedNext, c.pos+1)
	c.pos++
	c.now = proc
}

// class returns the true class of the record at pos: a first read is live (backfill when a new group reads what
// was appended before it appeared), a read again below the highest commit a replay, any other read again a
// redelivery.
func (c *consumption) class(rec simRecord) latency.Class {
	switch {
	case c.pos >= c.processedNext && c.g.sc.NewGroupAt > 0 && rec.append < c.groupStart:
		return latency.ClassBackfill
	case c.pos >= c.processedNext:
		return latency.ClassLive
	case c.pos < c.high:
		return latency.ClassReplay
	}
	return latency.ClassRedelivery
}

// receipt returns the receipt of record rec at pos, processed by host ch at proc after receiving it at recv (reference
// ms), as the collector sees it at receiptAt: its stamps and the reported offsets it carries. Its Truth indexes the
// truth consume adds next.
func (c *consumption) receipt(rec simRecord, ch int, recv, proc float64) Observation {
	g, f, sc := c.g, c.g.f, c.g.sc
	o := Observation{At: c.receiptAt, Kind: ObsRecord, Partition: c.p, Offset: c.pos, Truth: len(f.Truths)}
	o.Stamps[latency.Produce] = rec.produceStamp
	o.Stamps[latency.Append] = Stamp{Host: rec.broker, Value: rec.appendStamp, Unit: latency.Millis}
	if sc.LeaderCacheTTL > 0 {
		l, _ := f.leaderAt(c.preferred, f.cachedAt(c.receiptAt))
		o.Stamps[latency.Append].Host = g.hostIndex(RoleBroker, l)
	}
	if sc.WithReceive {
		o.Stamps[latency.Receive] = g.stampOn(sc.Consumer, ch, recv, latency.Nanos)
	}
	o.Stamps[latency.Processed] = g.stampOn(sc.Consumer, ch, proc, latency.Nanos)
	if sc.Producer == ModeReported {
		o.ProducerReport = c.produceReports[c.pos]
	}
	if sc.Consumer == ModeReported {
		o.ConsumerReport = f.reportAt(ch, proc)
	}
	return o
}

// pollCommits adds the lag exporter's polls of partition p's committed offset (hist), every PollInterval from the
// group's start; a new group shows no commit (-1) until its first commit.
func (g *generator) pollCommits(p int, groupStart float64, hist []commit) {
	poll := float64(g.sc.PollInterval) / 1e6
	hi := 0
	for t := groupStart; t < g.end; t += poll {
		for hi < len(hist) && hist[hi].at <= t {
			hi++
		}
		o := int64(-1)
		if hi > 0 {
			o = hist[hi-1].offset
		}
		g.f.Obs = append(g.f.Obs, Observation{At: t, Kind: ObsCommit, Partition: p, Offset: o, Truth: -1})
	}
}
