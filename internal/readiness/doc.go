// Package readiness decides what `tidemark run`'s /readyz answers and how its dependencies are retried.
//
// A State is one part's readiness (the process's own, or one cluster's): a fixed reason while starting, connecting
// or stopping, else a check called at each request. Process serves /readyz from the process's State and every
// cluster's, so that one cluster down does not take the whole pod out of its Service. Lag and Cluster are the checks
// of a running cluster. Retry connects to a dependency (Kafka, ClickHouse) with exponential backoff until it
// answers, publishing each failure as the State's reason; StartError picks the error to return once retries ended.
package readiness
