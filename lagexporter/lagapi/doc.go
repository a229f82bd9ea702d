// Package lagapi serves the lag exporter's snapshots as JSON over HTTP, for scripts, UIs and autoscalers that read lag
// rather than scrape it.
//
// [Handler] answers two APIs from each cluster's latest immutable [lagexporter.Snapshot] (the snapshot /metrics is
// rendered from), so a request never calls Kafka:
//
//   - GET /api/v1/lag: every group with the fields `tidemark lag -o json` prints, filtered by cluster, group and
//     status (lag.go);
//   - Burrow's v3 HTTP API (burrow.go): the cluster list and detail, the group list, a group's status and lag, and
//     the topic list and offsets, in the JSON shape of linkedin/Burrow's httpserver package, so that clients written
//     for Burrow (Telegraf's burrow input, burrow_exporter, Burrow dashboards) read Tidemark's lag unchanged.
//
// docs/api.md documents both, with the mapping from Tidemark's statuses to Burrow's.
package lagapi
