package main

import "github.com/tidemark/tidemark/internal/confload"

// dumpRunConfig is what `tidemark run --print-config` prints: confload.Dump of what `tidemark run` uses of c (keys
// as a file writes them, secrets redacted). With clusters: the top-level kafka, lag and collector blocks are left
// out (setting them beside clusters: is an error, and their defaults are not what runs), and without a clickhouse
// block, clickhouse and migrate are (a pure lag exporter uses neither).
func dumpRunConfig(c *runConfig) ([]byte, error) {
	omit := []string{"lag_enabled"} // deprecated: its value is in lag.enabled
	if len(c.Clusters) > 0 {
		omit = append(omit, "kafka", "lag", "collector")
	}
	if !c.clickHouse {
		omit = append(omit, "clickhouse", "migrate")
	}
	return confload.Dump(c, omit...)
}
