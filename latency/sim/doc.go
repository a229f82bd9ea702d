// Package sim generates ground-truth message flows across producer, broker and consumer hosts whose clocks are
// offset (up to ±10 s), drift (tens of ppm) and step, with network delay distributions, consumer pauses, offset
// rewinds, rebalance redeliveries and new-group backfills; it feeds only what a real collector observes (probe
// brackets, sync exchanges, polled commits, record stamps truncated to their units) into a latency.Engine and
// scores the engine's results against the truth it kept aside.
//
// [Generate] builds a [Scenario]'s observations and truths; [Run] feeds and scores them into a [Report]. The
// named scenarios of cmd/bench-latency are in [Scenarios].
package sim
