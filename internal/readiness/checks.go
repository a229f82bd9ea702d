package readiness

import (
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// HealthSource is what Lag reads: a lag exporter loop's health (lagexporter.Loop).
type HealthSource interface {
	Health() lagexporter.Health
}

// Lag is a lag exporter's readiness: ready once a cycle has published a snapshot, and not ready while no cycle has
// succeeded for three poll intervals plus a cycle timeout (cfg.PollInterval, cfg.CycleTimeout: the lag served is
// then stale; the reason says for how long, to the second). now is the clock (time.Now).
func Lag(loop HealthSource, cfg *lagexporter.Config, now func() time.Time) func() error {
	return func() error {
		h := loop.Health()
		if h.LastSuccess.IsZero() {
			return errors.New("lag exporter: no poll cycle has completed yet")
		}
		if age := now().Sub(h.LastSuccess); age > 3*cfg.PollInterval+cfg.CycleTimeout {
			return fmt.Errorf("lag exporter: no successful poll cycle for %s", age.Round(time.Second))
		}
		return nil
	}
}

// Cluster is a cluster's readiness once its lag exporter runs: its collector's check first, then its lag
// exporter's. A collector that is not ready while the lag exporter is says so too ("…; lag exporter ready"): the
// cluster's lag series are being served.
func Cluster(collector, lag func() error) func() error {
	return func() error {
		lerr := lag()
		if err := collector(); err != nil {
			if lerr == nil {
				return fmt.Errorf("%w; lag exporter ready", err)
			}
			return err
		}
		return lerr
	}
}
