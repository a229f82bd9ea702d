// Package importrules holds the test that keeps docs/architecture.md's dependency rules true: which packages each
// package may import (its non-test files), and which packages alone may import each outside system's client
// (sarama, clickhouse-go, the Grafana SDK). It has no code of its own.
package importrules
