package sim

import "time"

// base is the common deployment of the named scenarios, at the target conditions: offsets up to ±10 s,
// drift 50 ppm, one-way delays 1–20 ms.
func base(name string, seed uint64) Scenario {
	return Scenario{
		Name: name, Seed: seed, Start: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Duration: 3 * time.Minute,
		Brokers: 3, Producers: 3, Consumers: 3, Partitions: 6, Rate: 200,
		MaxOffset: 10 * time.Second, DriftPPM: 50,
		OneWay:     Delay{Min: 1, Mean: 5, Max: 20},
		Processing: Delay{Min: 0.1, Mean: 2, Max: 50},
		Producer:   ModeSynced, Consumer: ModeSynced, WithReceive: true,
		ProbeInterval: 100 * time.Millisecond, SyncInterval: time.Second,
		CommitInterval: time.Second, PollInterval: time.Second,
	}
}

// Scenarios returns the named scenarios cmd/bench-latency runs, in order:
//   - bracketed: the probe path; the collector produces and consumes, brokers are placed only by probe brackets;
//   - synced: instrumented producers and consumers that sync with the collector;
//   - envelope: uninstrumented producers (CreateTime, ms) placed only by the causal envelope;
//   - steps: synced, with a leader failover to a clock 400 ms behind, and NTP steps on a producer and a consumer;
//   - replay: synced, with two rewinds, two rebalances and a pause of every partition;
//   - backfill: synced, a new group appears after a minute and reads from the earliest offset;
//   - reported: producers and consumers sync themselves every 10 s (best of 8) and report offset ± uncertainty in
//     every header and receipt, the collector's receipts path;
//   - failover: synced; at 60 s broker 0 (clock +1.5 s) fails and its partitions' leadership moves, after a 300 ms
//     election, to broker 1 (clock −1.5 s: 3 s apart), for a minute; then broker 0 is back and leads again. Append
//     stamps carry the leader of their epoch, as the collector attributes them;
//   - failover-stale-leader: the same, with appends attributed to the leader a 30 s metadata cache sees when the
//     record is handled (what collectors did before leader epochs): those stamps are flagged, never trusted wrong.
func Scenarios() []Scenario {
	br := base("bracketed", 1)
	br.Producer, br.Consumer = ModeReference, ModeReference
	br.WithReceive = false

	sy := base("synced", 2)

	en := base("envelope", 3)
	en.Producer = ModeEnvelope

	st := base("steps", 4)
	st.Steps = []Step{
		{Role: RoleBroker, Index: 0, At: 60 * time.Second, Delta: -400 * time.Millisecond},
		{Role: RoleProducer, Index: 1, At: 90 * time.Second, Delta: 250 * time.Millisecond},
		{Role: RoleConsumer, Index: 2, At: 120 * time.Second, Delta: -150 * time.Millisecond},
	}

	rp := base("replay", 5)
	rp.Rewinds = []Rewind{{Partition: 0, At: 60 * time.Second, Back: 5000}, {Partition: 1, At: 80 * time.Second, Back: 2}}
	rp.Rebalances = []Rebalance{{Partition: 2, At: 70500 * time.Millisecond, Downtime: 3 * time.Second},
		{Partition: 3, At: 100300 * time.Millisecond, Downtime: 2 * time.Second}}
	rp.Pauses = []Pause{{Partition: -1, At: 40 * time.Second, For: 2 * time.Second}}

	bf := base("backfill", 6)
	bf.NewGroupAt = time.Minute

	re := base("reported", 7)
	re.Producer, re.Consumer = ModeReported, ModeReported
	re.SyncInterval = 10 * time.Second

	fo := base("failover", 8)
	fo.BrokerOffsets = []time.Duration{1500 * time.Millisecond, -1500 * time.Millisecond, 400 * time.Millisecond}
	fo.Failovers = []Failover{{From: 0, To: 1, At: 60 * time.Second, For: time.Minute, Election: 300 * time.Millisecond}}

	// The same failover with appends attributed the old way, to the leader a 30 s metadata cache sees at handling
	// time: for 25 s broker 1's stamps are corrected with broker 0's clock, 3 s off. No trusted stage may show it.
	fs := fo
	fs.Name, fs.LeaderCacheTTL = "failover-stale-leader", 30*time.Second

	return []Scenario{br, sy, en, st, rp, bf, re, fo, fs}
}
