package latency

import (
	"math"
	"testing"
	"time"
)

// StageUncertainty is the sum of a stage's two ends' offset uncertainties (the fast path's result; the general path
// writes the same, TestFastPathMatchesGeneral).
func TestStageUncertainty(t *testing.T) {
	base := at("2026-11-29T12:00:00Z")
	e := mustEngine(t, Config{})
	for h, u := range map[string]time.Duration{"P1": 3 * time.Millisecond, "B1": time.Millisecond, "C1": 2 * time.Millisecond} {
		if err := e.ReportOffset(e.Host(h), 0, u, base); err != nil {
			t.Fatal(err)
		}
	}
	var r Record
	r.Offset = 1
	r.Stamps[Produce] = MillisStamp(e.Host("P1"), ms(base))
	r.Stamps[Append] = MillisStamp(e.Host("B1"), ms(base.Add(20*time.Millisecond)))
	r.Stamps[Receive] = MillisStamp(e.Host("C1"), ms(base.Add(60*time.Millisecond)))
	r.Stamps[Processed] = MillisStamp(e.Host("C1"), ms(base.Add(70*time.Millisecond)))
	res := e.Path("g", "t", 0).Observe(r)
	for _, c := range []struct {
		s    Stage
		want float64
	}{
		{StageIngest, 3 + 1},    // producer ± 3 ms, broker ± 1 ms
		{StageQueueWait, 1 + 2}, // broker, consumer
		{StageE2E, 3 + 2},       // what Result.Uncertainty says too
	} {
		if got := res.StageUncertainty(c.s); math.Abs(got-c.want) > 0.05 { // 0.05: the drift allowance since the report
			t.Errorf("%s uncertainty %v ms, want %v", c.s, got, c.want)
		}
	}
	if res.Uncertainty != res.StageUncertainty(StageE2E) {
		t.Errorf("e2e uncertainty %v vs %v", res.Uncertainty, res.StageUncertainty(StageE2E))
	}
}
