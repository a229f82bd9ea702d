package latency_test

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/sim"
)

// BenchmarkObserve measures the per-record pipeline on the synced scenario's records (estimators warmed by the
// scenario's own brackets and sync exchanges).
func BenchmarkObserve(b *testing.B) {
	sc := sim.Scenarios()[1]
	sc.WithReceive = false
	sc.Duration = sc.Duration / 3
	f, err := sim.Generate(sc)
	if err != nil {
		b.Fatal(err)
	}
	e, _ := latency.NewEngine(latency.Config{})
	for _, n := range f.Hosts {
		e.Host(n)
	}
	var recs []latency.Record
	for _, o := range f.Obs {
		switch o.Kind {
		case sim.ObsBracket:
			_ = e.ObserveBracket(latency.Bracket{Host: latency.HostID(o.Host + 1), Send: msTime(o.Send), RemoteMs: o.Remote, Ack: msTime(o.Ack)})
		case sim.ObsSync:
			_ = e.ObserveSync(latency.SyncExchange{Host: latency.HostID(o.Host + 1), T1: msTime(o.T1), T2: msTime(o.T2), T3: msTime(o.T3), T4: msTime(o.T4)})
		case sim.ObsRecord:
			var r latency.Record
			r.Offset = int64(len(recs))
			for m, st := range o.Stamps {
				if st.Value != 0 {
					r.Stamps[m] = latency.Stamp{Value: st.Value, Host: latency.HostID(st.Host + 1), Unit: st.Unit}
				}
			}
			recs = append(recs, r)
		}
	}
	p := e.Path("g", "t", 0)
	var res latency.Result
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := &recs[i%len(recs)]
		r.Offset = int64(i)
		p.ObserveInto(r, &res)
	}
}

// BenchmarkSketchAdd is the baseline's unit of work.
func BenchmarkSketchAdd(b *testing.B) {
	s, _ := latency.NewSketch(0.01)
	for i := 0; i < b.N; i++ {
		s.Add(float64(i%5000) + 0.5)
	}
}

func msTime(ms float64) time.Time { return time.Unix(0, int64(ms*1e6)) }
