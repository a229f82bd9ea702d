// Package dashboards defines Tidemark's Grafana dashboards as code: overview (lag and SLO at a glance), latency deep
// dive (stages, hosts, clock skew, slowest messages), consumer-group drill-down, and probe health.
//
// The checked-in JSON files beside this package are its output; `go test ./dashboards -update` rewrites them, and
// the tests fail when they drift from the code, when a panel uses a query type the plugin does not serve or a query
// the plugin would reject, or when a Prometheus panel names a metric docs/metrics.md does not list.
// deploy/grafana/provisioning provisions the plugin's datasource and these files.
package dashboards
