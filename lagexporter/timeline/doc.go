// Package timeline is the lag exporter's file format and the fake cluster that plays it back.
//
// A timeline file is JSON lines (docs/lag-timeline.md): an optional first line {"config": {...}} ([ConfigBlock])
// with the exporter configuration the timeline was recorded (or is to be evaluated) with, then one [Line] per poll, in
// time order: a [lagexporter.Observation] (what one cycle read from the cluster), plus, in hand-written timelines,
// [RecordRun] runs that describe the log. `tidemark lag record` writes one from a live cluster with a [Writer] as the
// loop's recorder; [Read] parses one strictly (every error wraps [ErrInvalid] and names the line).
//
// [Player] is a lagexporter.Cluster that answers from a timeline, one line per cycle, and [Eval] replays a timeline
// through the same lagexporter.Loop code path as a live cluster, the line's time as the clock. Hand-written timelines
// in testdata/ pin the public acceptance cases (cases_test.go).
package timeline
