package sim

import (
	"testing"

	"github.com/tidemark/tidemark/latency"
)

func TestScenariosQuick(t *testing.T) {
	for _, sc := range Scenarios() {
		f, err := Generate(sc)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := Run(f, latency.Config{})
		if err != nil {
			t.Fatal(err)
		}
		p, r := rep.NonLivePrecisionRecall()
		t.Logf("%-10s recs=%d live=%d flagged=%d neg=%d summis=%d ingest p99=%.3f norm=%.3f deliv p99=%.3f norm=%.3f e2e p99=%.3f minIngest=%.2f prec=%.4f rec=%.4f acc=%.5f elapsed=%v",
			sc.Name, rep.Records, rep.Live, rep.Flagged, rep.NegativeStages, rep.SumMismatch,
			rep.Stage[latency.StageIngest].Quantile(0.99), rep.Stage[latency.StageIngest].NormQuantile(0.99),
			rep.Stage[latency.StageDelivery].Quantile(0.99), rep.Stage[latency.StageDelivery].NormQuantile(0.99),
			rep.Stage[latency.StageE2E].Quantile(0.99), rep.MinIngest, p, r, rep.ClassAccuracy(), rep.Elapsed)
		t.Logf("confusion %v", rep.Confusion)
		for k, oe := range rep.OffsetErr {
			if len(oe.Abs) > 0 {
				t.Logf("  offset err %v: p50 %.3f p99 %.3f max %.3f n=%d", latency.OffsetKind(k), oe.Quantile(0.5), oe.Quantile(0.99), oe.Quantile(1), len(oe.Abs))
			}
		}
	}
}
