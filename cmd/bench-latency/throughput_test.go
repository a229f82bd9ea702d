package main

import (
	"math/rand/v2"
	"testing"

	"github.com/tidemark/tidemark/latency/sim"
)

// TestCutChunks: the chunks the sides alternate on cover every event and every record exactly once, in order, and
// each but the last holds exactly per records.
func TestCutChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 200; trial++ {
		var events []event
		records := 0
		for i, n := 0, r.IntN(60); i < n; i++ {
			kind := sim.ObsRecord
			if r.IntN(4) == 0 {
				kind = sim.ObsBracket
			}
			if kind == sim.ObsRecord {
				records++
			}
			events = append(events, event{kind: kind})
		}
		per := 1 + r.IntN(8)
		chunks := cutChunks(events, per)
		ev, rec := 0, 0
		for k, c := range chunks {
			if c.ev0 != ev || c.rec0 != rec || c.ev1 <= c.ev0 {
				t.Fatalf("trial %d: chunk %d %+v does not continue at event %d, record %d", trial, k, c, ev, rec)
			}
			n := 0
			for _, e := range events[c.ev0:c.ev1] {
				if e.kind == sim.ObsRecord {
					n++
				}
			}
			if n != c.rec1-c.rec0 || (k < len(chunks)-1 && n != per) {
				t.Fatalf("trial %d: chunk %d %+v holds %d records, per %d", trial, k, c, n, per)
			}
			ev, rec = c.ev1, c.rec1
		}
		if ev != len(events) || rec != records {
			t.Fatalf("trial %d: chunks end at event %d of %d, record %d of %d", trial, ev, len(events), rec, records)
		}
	}
}
