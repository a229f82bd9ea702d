package dashboards

// SLO used by the dashboards: 99.9% of live messages end-to-end within 500 ms (the plugin's defaults). Teams with
// another SLO change these two numbers and run `go test ./dashboards -update`.
const (
	sloThresholdMs = 500
	sloObjective   = 0.999
)

// filters are the dashboard variables every Tidemark target is narrowed by.
var filters = map[string]any{"cluster": "${cluster:csv}", "topic": "${topic:csv}", "group": "${group:csv}"}

// inCluster narrows a list variable to the selected clusters.
var inCluster = map[string]string{"cluster": "$cluster"}

func with(m map[string]any, extra map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// All returns every dashboard, keyed by file name.
func All() map[string]Dashboard {
	return map[string]Dashboard{
		"overview.json":       Overview(),
		"latency.json":        Latency(),
		"consumer-group.json": ConsumerGroup(),
		"probe-health.json":   ProbeHealth(),
	}
}

// Overview is lag and SLO at a glance.
func Overview() Dashboard {
	slo := q("A", "slo", with(filters, map[string]any{"sloThresholdMs": sloThresholdMs, "sloObjective": sloObjective}))
	return newDashboard("tidemark-overview", "Tidemark / Overview",
		"Kafka end-to-end latency against the SLO, consumer lag by group, and the collector's health.").
		vars(datasourceVar, prometheusVar, clusterVar(),
			listVar("topic", "Topic", "topics", inCluster), listVar("group", "Group", "groups", inCluster)).
		row("SLO: 99.9% of live messages end-to-end within 500 ms").
		add(6, 6, only(stat("Compliance", "Share of live messages within the threshold, per bucket (last bucket shown).",
			FieldConfig{Defaults: map[string]any{"unit": "percentunit", "decimals": 3,
				"thresholds": thresholds("red", nil, "orange", 0.99, "green", sloObjective)}}, slo), "compliance")).
		add(6, 6, only(stat("Error budget remaining", "1 − bad ÷ (allowed bad) since the start of the range.",
			FieldConfig{Defaults: map[string]any{"unit": "percentunit", "decimals": 1,
				"thresholds": thresholds("red", nil, "orange", 0.25, "green", 0.5)}}, slo), "error_budget_remaining")).
		add(12, 6, only(timeseries("Burn rate", "Bad share ÷ allowed bad share: 1 spends the budget exactly over the SLO window; "+
			"14.4 over 1 h is the classic page.", FieldConfig{Defaults: map[string]any{"unit": "short",
			"thresholds": thresholds("green", nil, "orange", 1, "red", 14.4), "custom": map[string]any{"thresholdsStyle": map[string]any{"mode": "line"}}}}, slo), "burn_rate")).
		row("Latency and lag").
		add(12, 8, only(timeseries("End-to-end latency by topic", "Corrected for clock skew; replays left out. Dashed: p99's band, "+
			"between which the true p99 lies (each sample's clock uncertainty).", banded("ms"),
			q("A", "stage_percentiles", with(filters, map[string]any{"stage": "e2e", "percentiles": []float64{0.5, 0.99}, "groupBy": "topic"}))),
			"p50", "p99", "p99_lower", "p99_upper")).
		add(12, 8, only(timeseries("Consumer lag by group", "Records the group will still receive (effective lag).", unit("short"),
			q("A", "consumer_lag", with(filters, map[string]any{"groupBy": "group"}))), "lag")).
		add(12, 8, only(timeseries("Time lag by group", "Now − timestamp of the first unconsumed record; the oldest partition decides.", unit("s"),
			q("A", "consumer_lag", with(filters, map[string]any{"groupBy": "group"}))), "time_lag")).
		add(6, 8, stat("Groups not OK", "Groups whose Burrow-style status is WARN, STALL, STOP, ERR or REWIND.",
			FieldConfig{Defaults: map[string]any{"unit": "short", "thresholds": thresholds("green", nil, "red", 1)}},
			prom("A", `sum(tidemark_lag_group_status{status!="OK"}) or vector(0)`, "groups"))).
		add(6, 8, stat("Lag snapshot age", "Seconds since the lag exporter's served observation; it never queries Kafka during a scrape.",
			FieldConfig{Defaults: map[string]any{"unit": "s", "thresholds": thresholds("green", nil, "orange", 60, "red", 300)}},
			prom("A", `max(time() - tidemark_lag_exporter_snapshot_timestamp_seconds)`, "age"))).
		row("Data at risk").
		add(6, 6, stat("Groups within an hour of losing unread records", "Group-topics whose retention margin (time, or bytes at the "+
			"current rate) is under an hour: TidemarkConsumerGroupRetentionRisk.",
			FieldConfig{Defaults: map[string]any{"unit": "short", "thresholds": thresholds("green", nil, "red", 1)}},
			prom("A", `count(tidemark:lag_retention_margin_seconds:min < 3600) or vector(0)`, "groups"))).
		add(6, 6, stat("Unread records deleted (24 h)", "Records retention or DeleteRecords deleted below a group's commit.",
			FieldConfig{Defaults: map[string]any{"unit": "short", "thresholds": thresholds("green", nil, "red", 1)}},
			prom("A", `sum(increase(tidemark_lag_topic_unread_records_deleted_total[24h])) or vector(0)`, "records"))).
		add(6, 6, stat("End offsets that fell (24 h)", "Partition reads whose end offset was lower than the time before: truncation "+
			"after an unclean leader election, or a broker with stale offsets. Not a consumer rewind.",
			FieldConfig{Defaults: map[string]any{"unit": "short", "thresholds": thresholds("green", nil, "orange", 1)}},
			prom("A", `sum(increase(tidemark_topic_end_offset_decreases_total[24h])) or vector(0)`, "reads"))).
		add(6, 6, stat("Replaying groups", "Groups replaying after an offset rewind; their status still says whether they are healthy.",
			FieldConfig{Defaults: map[string]any{"unit": "short"}}, prom("A", `sum(tidemark_lag_group_replaying) or vector(0)`, "groups"))).
		row("Lag exporter").
		add(12, 8, timeseries("Failing partitions by error code", "Partitions whose offsets could not be read, by Kafka error code "+
			"(only partitions failing now have a series); a leader that moved mid-cycle is retried and does not show here.", unit("short"),
			prom("A", `count by (code) (tidemark_lag_exporter_partition_errors_total)`, "{{code}}"))).
		add(12, 8, timeseries("Invalid record timestamps", "Record timestamps the exporter met and did not use, per second, by reason "+
			"(missing, wrong unit, future).", unit("short"),
			prom("A", `sum by (reason) (rate(tidemark_lag_exporter_invalid_timestamps_total[5m]))`, "{{reason}}"))).
		build()
}

// Latency is the per-stage deep dive: where the time goes, on which hosts, how far clocks disagree, and which
// messages were slowest.
func Latency() Dashboard {
	f := with(filters, map[string]any{"host": "${host:csv}"})
	stage := func(s, title, desc string) Panel {
		return only(timeseries(title, desc+" Dashed: the band of p50 and p99, between which the true percentile lies.", banded("ms"),
			q("A", "stage_percentiles", with(f, map[string]any{"stage": s, "percentiles": []float64{0.5, 0.9, 0.99}, "groupBy": "topic"}))),
			"p50", "p90", "p99", "p50_lower", "p50_upper", "p99_lower", "p99_upper")
	}
	return newDashboard("tidemark-latency", "Tidemark / Latency deep dive",
		"Each stage of a message's trip (produce → append → receive → processed) by topic and host, clock offsets, and the slowest messages with their traces.").
		vars(datasourceVar, clusterVar(), listVar("topic", "Topic", "topics", inCluster), listVar("group", "Group", "groups", inCluster),
			listVar("host", "Host", "hosts", inCluster)).
		row("Stages").
		add(12, 8, stage("produce_append", "Ingest (produce → append)", "Broker append time − producer time, after skew correction.")).
		add(12, 8, stage("append_receive", "Queue wait (append → receive)", "Consumer receive time − broker append time.")).
		add(12, 8, stage("receive_process", "Processing (receive → processed)", "Processing completion − receive, on the consumer's clock.")).
		add(12, 8, stage("e2e", "End-to-end", "Processed − produced; the stages sum to it.")).
		row("Hosts and clocks").
		add(12, 8, only(timeseries("End-to-end p99 by consumer host", "A single slow host stands out here. Dashed: p99's band.", banded("ms"),
			q("A", "stage_percentiles", with(f, map[string]any{"stage": "e2e", "percentiles": []float64{0.99}, "groupBy": "host"}))),
			"p99", "p99_lower", "p99_upper")).
		add(12, 8, timeseries("Clock offsets", "Host clock − reference clock, with the half-width of the interval it is known to lie in.",
			unit("ms"), q("A", "clock_offsets", map[string]any{"cluster": "${cluster:csv}", "host": "${host:csv}"}))).
		add(12, 8, Panel{Type: "barchart", Title: "End-to-end distribution", Description: "Latency at each percentile over the whole range.",
			Datasource: tidemark, Targets: []map[string]any{q("A", "e2e_distribution", with(f, map[string]any{"stage": "e2e"}))},
			FieldConfig: unit("ms"), Options: map[string]any{"xField": "percentile", "orientation": "vertical", "showValue": "never"}}).
		add(12, 8, table("Slowest messages", "Click a trace id to open the trace in the tracing datasource set on the Tidemark datasource.",
			q("A", "slowest_messages", with(f, map[string]any{"stage": "e2e", "limit": 20})))).
		build()
}

// ConsumerGroup drills into one group: backlog per topic, whether it is draining, its latency and SLO, and the
// Prometheus per-partition view.
func ConsumerGroup() Dashboard {
	g := map[string]any{"cluster": "${cluster:csv}", "group": "${group}", "topic": "${topic:csv}"}
	group := listVar("group", "Group", "groups", inCluster)
	group.Multi, group.IncludeAll, group.AllValue = false, false, ""
	group.Current = nil
	return newDashboard("tidemark-consumer-group", "Tidemark / Consumer group",
		"One consumer group: lag per topic, time lag, latency, SLO and the slowest messages it processed.").
		vars(datasourceVar, prometheusVar, clusterVar(), group,
			listVar("topic", "Topic", "topics", map[string]string{"cluster": "$cluster", "group": "$group"})).
		row("Backlog").
		add(12, 8, only(timeseries("Lag by topic", "Records the group will still receive.", unit("short"),
			q("A", "consumer_lag", with(g, map[string]any{"groupBy": "topic"}))), "lag")).
		add(12, 8, only(timeseries("Time lag by topic", "How old the oldest unconsumed record is.", unit("s"),
			q("A", "consumer_lag", with(g, map[string]any{"groupBy": "topic"}))), "time_lag")).
		add(12, 8, timeseries("Lag by partition (Prometheus)", "The lag exporter's live per-partition view.", unit("short"),
			prom("A", `tidemark_lag_partition_offsets{group="$group"}`, "{{topic}}/{{partition}}"))).
		add(12, 8, timeseries("Status", "1 for the group's current status; replaying is the episode beside it (a replaying group "+
			"that dies is STOP).", unit("short"),
			prom("A", `tidemark_lag_group_status{group="$group"} == 1`, "{{status}}"),
			prom("B", `tidemark_lag_group_replaying{group="$group"} == 1`, "replaying"))).
		add(16, 8, only(timeseries("Lag by subtopology",
			"A streams group's (KIP-1071) backlog per subtopology, its source and repartition topics together; other groups show one series.",
			unit("short"), q("A", "consumer_lag", with(g, map[string]any{"groupBy": "subtopology"}))), "lag")).
		add(8, 8, nameOnly(stat("Group type", "Kafka's group type: classic, consumer (KIP-848), share (KIP-932, lag from the share-partition start offset) or streams (KIP-1071).",
			unit("none"), prom("A", `tidemark_lag_group_info{group="$group"}`, "{{group_type}}")))).
		row("Time left").
		add(12, 8, timeseries("Retention margin", "Time left before retention may delete a record the group has not read (retention.ms "+
			"− time lag; or the bytes left at the rate they shrink): a lower bound by up to one segment. Page under 1 h.",
			FieldConfig{Defaults: map[string]any{"unit": "s", "thresholds": thresholds("red", nil, "orange", 3600, "green", 6*3600),
				"custom": map[string]any{"thresholdsStyle": map[string]any{"mode": "line"}}}},
			prom("A", `tidemark:lag_retention_margin_seconds:min{group="$group"}`, "{{topic}}"))).
		add(12, 8, timeseries("Catch-up estimate", "Seconds until the lag reaches 0 at the drain rate of the status window "+
			"(least-squares slope of the lag); +Inf (shown as no value) while it does not fall.", unit("s"),
			prom("A", `tidemark_lag_group_catch_up_seconds{group="$group"} < +Inf`, "catch-up"))).
		add(12, 8, timeseries("Retention margin in bytes", "Bytes producers may still append before retention.bytes reaches the "+
			"first unconsumed record (topics with a finite retention.bytes).", unit("bytes"),
			prom("A", `tidemark_lag_topic_retention_margin_bytes{group="$group"}`, "{{topic}}"))).
		add(12, 8, timeseries("Unread records deleted", "Records deleted below the group's commit (retention, DeleteRecords): lost unread.",
			unit("short"), prom("A", `increase(tidemark_lag_topic_unread_records_deleted_total{group="$group"}[$__rate_interval])`, "{{topic}}"))).
		row("Anomalies").
		add(8, 8, timeseries("Committed ahead of the end", "Committed offset − End where the commit is past End (status AHEAD after "+
			"consecutive reads): records written below the commit are skipped.", unit("short"),
			prom("A", `tidemark_lag_partition_ahead_offsets{group="$group"}`, "{{topic}}/{{partition}}"))).
		add(8, 8, timeseries("Skipped at the head of the backlog", "Raw − effective lag, split: transaction markers and aborted "+
			"records (control), and offsets compaction removed (compacted: the time lag is then a lower bound).", unit("short"),
			prom("A", `sum by (topic) (tidemark_lag_partition_control_offsets{group="$group"})`, "{{topic}} control"),
			prom("B", `sum by (topic) (tidemark_lag_partition_compacted_offsets{group="$group"})`, "{{topic}} compacted"))).
		add(8, 8, timeseries("Open transactions", "High watermark − last stable offset of the group's partitions: what a read_committed "+
			"group cannot consume until the oldest open transaction ends.", unit("short"),
			prom("A", `max by (topic) (tidemark_partition_open_transaction_offsets `+
				`and on (cluster, topic, partition) tidemark_lag_partition_offsets{group="$group"})`, "{{topic}}"))).
		add(8, 8, timeseries("Stale partitions", "Seconds since the values shown for a partition were read (its offsets, or the "+
			"group's commits, could not be read since); such partitions are left out of the sums.", unit("s"),
			prom("A", `tidemark_lag_partition_stale_seconds{group="$group"}`, "{{topic}}/{{partition}}"))).
		add(8, 8, timeseries("Stale commits on unassigned partitions", "Partitions with commits none of the Stable group's members "+
			"is assigned (Burrow #854): left out of the lag and status; delete them with kafka-consumer-groups --delete-offsets.",
			unit("short"), prom("A", `tidemark_lag_topic_unassigned_committed_partitions{group="$group"} > 0`, "{{topic}}"))).
		add(8, 8, timeseries("Completeness", "Partitions of the group whose lag is unknown or stale this cycle: the sums are lower "+
			"bounds while it is above 0.", unit("short"),
			prom("A", `sum by (topic) (tidemark_lag_topic_unknown_partitions{group="$group"})`, "{{topic}}"))).
		row("Latency and SLO").
		add(12, 8, only(timeseries("End-to-end latency by topic", "Dashed: p99's band, between which the true p99 lies.", banded("ms"),
			q("A", "stage_percentiles", with(g, map[string]any{"stage": "e2e", "percentiles": []float64{0.5, 0.99}, "groupBy": "topic"}))),
			"p50", "p99", "p99_lower", "p99_upper")).
		add(12, 8, only(timeseries("SLO compliance", "Dashed: the band [min, max] the true compliance lies in, from each sample's interval.",
			sloBand(), q("A", "slo", with(g, map[string]any{"sloThresholdMs": sloThresholdMs, "sloObjective": sloObjective, "groupBy": "topic"}))),
			"compliance", "compliance_min", "compliance_max")).
		add(24, 8, table("Slowest messages of the group", "",
			q("A", "slowest_messages", with(g, map[string]any{"stage": "e2e", "limit": 50})))).
		build()
}

// ProbeHealth is the probe path: per-broker loss, duplicates, delivery latency and broker clock offsets.
func ProbeHealth() Dashboard {
	pr := func(title, desc, u string, fields ...string) Panel {
		return only(timeseries(title, desc, unit(u), q("A", "probe_health", map[string]any{"cluster": "${cluster:csv}", "host": "${broker:csv}"})), fields...)
	}
	broker := Variable{Name: "broker", Label: "Broker ids", Type: "textbox", Query: "", Current: map[string]any{"text": "", "value": ""}}
	return newDashboard("tidemark-probe-health", "Tidemark / Probe health",
		"Tidemark's own probe records, one stream per broker: loss, duplicates, delivery latency and broker clock offsets.").
		vars(datasourceVar, clusterVar(), broker).
		add(12, 8, pr("Probe loss", "Lost probes ÷ sent, per broker.", "percentunit", "loss_ratio")).
		add(12, 8, pr("Duplicates", "Extra deliveries of a probe beyond the first.", "short", "duplicates")).
		add(12, 8, pr("Probe delivery latency", "Send → receive of delivered probes, p50 and p99.", "ms", "p50", "p99")).
		add(12, 8, pr("Probes sent", "", "short", "sent")).
		add(24, 8, timeseries("Broker clock offsets", "Bracketed from send, append and ack times to within half a round trip.",
			unit("ms"), q("A", "clock_offsets", map[string]any{"cluster": "${cluster:csv}"}))).
		build()
}

// sloBand is the SLO compliance panel's field config: percent from 99 % up, the band's ends dashed.
func sloBand() FieldConfig {
	fc := banded("percentunit")
	fc.Defaults["min"], fc.Defaults["max"] = 0.99, 1
	fc.Overrides[0]["matcher"] = map[string]any{"id": "byRegexp", "options": ".*compliance (min|max).*"}
	return fc
}

// only keeps the named value fields of the panel's Tidemark queries (the query model's "fields"), so the panel and
// any alert rule made from it see just those numbers.
// Targets are copied first: panels may share one target definition (the overview's three SLO panels do).
func only(p Panel, fields ...string) Panel {
	targets := make([]map[string]any, len(p.Targets))
	for i, t := range p.Targets {
		targets[i] = with(t, nil)
		if ds, ok := t["datasource"].(*DatasourceRef); ok && ds.Type == PluginType {
			targets[i]["fields"] = fields
		}
	}
	p.Targets = targets
	return p
}

// nameOnly makes a stat show its series' name (an info series' label) instead of its value.
func nameOnly(p Panel) Panel {
	p.Options["textMode"], p.Options["colorMode"], p.Options["graphMode"] = "name", "none", "none"
	return p
}
