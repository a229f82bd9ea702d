// Package report turns counts read from ClickHouse into the reports the `tidemark` CLI prints. It is pure: no I/O
// besides the io.Writer it is given, no clock (times are passed in).
//
// [NewSLOReport] builds an end-to-end latency SLO report per topic and consumer group from live-sample counts over a
// period and over trailing burn-rate windows, with the SLO arithmetic of package latency ([latency.Objective]:
// compliance, error budget remaining, burn rate; [latency.DefaultBurnWindows]: the SRE workbook's multiwindow,
// multi-burn-rate alerts). [SLOReport.WriteTable] and [SLOReport.WriteJSON] print it. docs/slo.md defines every
// number.
package report
