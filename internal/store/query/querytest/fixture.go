package querytest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// T0 is the start of the fixture's data: two whole minutes from T0 hold every latency row.
var T0 = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

// TraceID returns the fixture's trace id for a topic's offset: 32 hex digits.
func TraceID(topic string, offset int64) string {
	return fmt.Sprintf("%016x%016x", len(topic), offset+1)
}

// SeedFixture inserts the fixture the query and plugin integration tests assert against. Its values are chosen so
// every answer is exact (each bucket of each series holds one repeated value, so every percentile of it is that value):
//
// latency_events, group "billing":
//   - orders  (producer p1, consumer c1), minute T0:    offsets 0..9,  ingest 10, queue 30, process 60,  e2e 100
//   - orders,                             minute T0+1m: offsets 10..19, ingest 20, queue 80, process 200, e2e 300
//   - payments (producer p2, consumer c2), minute T0:   offsets 0..4,  ingest 100, queue 400, process 500, e2e 1000
//   - orders, minute T0: offsets 0..4 as replays with every stage 50000 (left out unless replays are included)
//   - orders, minute T0: offsets 100..101 with e2e invalid (99999, validity bit off); the other stages as offsets 0..9
//
// lag_snapshots (cluster "c"): billing/orders p0 lag 5 then 3, p1 lag 7 then 4 (time lag 2000 and 1500 last);
// billing/payments p0 lag 100, expired 50, time lag 9000; idle-group/archive p0 lag 1 at T0+1m.
//
// clock_offsets: c1 bracketed 12.5±1 at T0+5s then 13±0.5 at T0+50s; b1 an upper envelope at T0+61s: at most −4 ms
// (upper bound −3.9, no lower bound, uncertainty +inf), estimated −5.5 with the probe path's 1.5 ms.
//
// probe_events (topic _tidemark_probe): broker 1 seq 1..4 ok with e2e 20 (seq 2 delivered twice) and seq 5 lost at
// T0+1s..T0+5s; broker 2 seq 10..11 ok with e2e 40.
func SeedFixture(t testing.TB, conn driver.Conn) {
	t.Helper()
	var lat []Latency
	for o := int64(0); o < 20; o++ {
		at, in, qu, pr, e2e := T0.Add(time.Duration(o)*time.Second), int64(10), int64(30), int64(60), int64(100)
		if o >= 10 {
			at, in, qu, pr, e2e = T0.Add(time.Minute+time.Duration(o)*time.Second), 20, 80, 200, 300
		}
		lat = append(lat, Latency{Observed: at, Topic: "orders", Group: "billing", Offset: o, IngestMs: in, QueueMs: qu,
			ProcessMs: pr, E2EMs: e2e, ProducerHost: "p1", ConsumerHost: "c1", TraceID: TraceID("orders", o)})
	}
	for o := int64(0); o < 5; o++ {
		lat = append(lat, Latency{Observed: T0.Add(time.Duration(30+o) * time.Second), Topic: "payments", Group: "billing",
			Offset: o, IngestMs: 100, QueueMs: 400, ProcessMs: 500, E2EMs: 1000, ProducerHost: "p2", ConsumerHost: "c2",
			TraceID: TraceID("payments", o)})
		lat = append(lat, Latency{Observed: T0.Add(time.Duration(40+o) * time.Second), Topic: "orders", Group: "billing",
			Offset: o, ReplayClass: "replay", IngestMs: 50000, QueueMs: 50000, ProcessMs: 50000, E2EMs: 50000,
			ProducerHost: "p1", ConsumerHost: "c1", TraceID: TraceID("orders-replay", o)})
	}
	for o := int64(100); o < 102; o++ {
		lat = append(lat, Latency{Observed: T0.Add(50 * time.Second), Topic: "orders", Group: "billing", Offset: o,
			IngestMs: 10, QueueMs: 30, ProcessMs: 60, E2EMs: 99999, Valid: 7 | 7<<4, ProducerHost: "p1", ConsumerHost: "c1"})
	}
	InsertLatency(t, conn, lat)

	InsertLag(t, conn, []Lag{
		{At: T0.Add(10 * time.Second), Cluster: "c", Group: "billing", Topic: "orders", Partition: 0, Lag: 5, TimeLagMs: 3000},
		{At: T0.Add(10 * time.Second), Cluster: "c", Group: "billing", Topic: "orders", Partition: 1, Lag: 7, TimeLagMs: 2500},
		{At: T0.Add(40 * time.Second), Cluster: "c", Group: "billing", Topic: "orders", Partition: 0, Lag: 3, TimeLagMs: 2000},
		{At: T0.Add(40 * time.Second), Cluster: "c", Group: "billing", Topic: "orders", Partition: 1, Lag: 4, TimeLagMs: 1500},
		{At: T0.Add(20 * time.Second), Cluster: "c", Group: "billing", Topic: "payments", Partition: 0, Lag: 100, Expired: 50, TimeLagMs: 9000},
		{At: T0.Add(time.Minute), Cluster: "c", Group: "idle-group", Topic: "archive", Partition: 0, Lag: 1, TimeLagMs: 60000},
	})
	InsertClockOffsets(t, conn, []ClockOffset{
		{At: T0.Add(5 * time.Second), Host: "c1", Kind: "bracketed", OffsetMs: 12.5, UncertaintyMs: 1},
		{At: T0.Add(50 * time.Second), Host: "c1", Kind: "bracketed", OffsetMs: 13, UncertaintyMs: 0.5},
		{At: T0.Add(61 * time.Second), Host: "b1", Kind: "envelope", OffsetMs: -4, UncertaintyMs: math.Inf(1),
			LowerMs: math.Inf(-1), UpperMs: -3.9, Estimate: -5.5},
	})
	var probes []Probe
	for s := uint64(1); s <= 5; s++ {
		p := Probe{At: T0.Add(time.Duration(s) * time.Second), Topic: "_tidemark_probe", Seq: s, Broker: 1, E2EMs: 20, Status: "ok"}
		if s == 2 {
			p.Duplicates = 1
		}
		if s == 5 {
			p.Status, p.E2EMs = "lost", 0
		}
		probes = append(probes, p)
	}
	for s := uint64(10); s <= 11; s++ {
		probes = append(probes, Probe{At: T0.Add(time.Duration(s) * time.Second), Topic: "_tidemark_probe", Partition: 1,
			Seq: s, Broker: 2, E2EMs: 40, Status: "ok"})
	}
	InsertProbes(t, conn, probes)
}
