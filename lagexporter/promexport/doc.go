// Package promexport serves the lag exporter's snapshots to Prometheus.
//
// [Collector] is a prometheus.Collector that mirrors the latest immutable [lagexporter.Snapshot] of a
// [SnapshotSource] (a *lagexporter.Loop) as constant metrics, so a scrape never calls Kafka; [Register] registers one
// for a loop. [Handler] serves exactly the same series rendered once per snapshot (gzip, family by family), for
// clusters where building hundreds of thousands of constant metrics per scrape is too slow. Every metric is listed
// in docs/metrics.md (TestMetricsDocAgrees checks the two agree); the model behind the numbers is package
// lagexporter (docs/lag.md).
package promexport
