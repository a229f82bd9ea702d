// Package prometheus holds no Go code: it is where Tidemark's Prometheus rules live (tidemark.rules.yml), with their
// promtool unit tests (tidemark.rules.test.yml) and the Go tests that run promtool and check that every metric a rule
// selects is one the lag exporter or the collector registers. docs/alerting.md explains each rule.
package prometheus
