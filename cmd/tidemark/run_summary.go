package main

import (
	"fmt"
	"strings"
)

// startSummary is one line saying what `tidemark run` runs for cfg, so that a reader sees at once what their
// configuration did: for each cluster its brokers and its parts (the lag exporter, elected or not; the collector's
// paths), then where rows go (ClickHouse's addresses and database, or nowhere), whether hop spans are exported, and
// the HTTP address. It is logged at start ("tidemark running") and ends every /readyz body.
func startSummary(cfg *runConfig) string {
	var b strings.Builder
	for i, cl := range cfg.clusterList() {
		if i > 0 {
			b.WriteString("; ")
		}
		var parts []string
		if *cl.Lag.Enabled {
			p := "lag exporter"
			if cl.Lag.Election.Enabled {
				p += " (elected, lease group " + cl.Lag.Election.Group + ")"
			}
			parts = append(parts, p)
		}
		if cfg.clickHouse {
			var paths []string
			for _, p := range []struct {
				name string
				on   bool
			}{{"probe", cl.Collector.Probe.Enabled}, {"receipts", cl.Collector.Receipts.Enabled}, {"tap", cl.Collector.Tap.Enabled}} {
				if p.on {
					paths = append(paths, p.name)
				}
			}
			if len(paths) == 0 {
				parts = append(parts, "collector with no path enabled")
			} else {
				parts = append(parts, "collector paths "+strings.Join(paths, ", "))
			}
		}
		fmt.Fprintf(&b, "cluster %s (kafka %s): %s", cl.Name, strings.Join(cl.Kafka.Brokers, ","), strings.Join(parts, ", "))
	}
	if cfg.clickHouse {
		fmt.Fprintf(&b, "; writing to ClickHouse %s, database %s", strings.Join(cfg.ClickHouse.Addr, ","), cfg.ClickHouse.Database)
	} else {
		b.WriteString("; no ClickHouse (nothing stored)")
	}
	if cfg.Tracing.Enabled {
		fmt.Fprintf(&b, "; hop spans over OTLP/%s to %s", cfg.Tracing.Protocol, cfg.Tracing.Endpoint)
	} else {
		b.WriteString("; tracing off")
	}
	fmt.Fprintf(&b, "; http %s", cfg.HTTP.Listen)
	return b.String()
}
