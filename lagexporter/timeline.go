package lagexporter

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// A timeline file is JSON lines (docs/lag-timeline.md): an optional first line {"config": {...}} with the exporter
// configuration the timeline was recorded (or is to be evaluated) with, then one Observation per poll, in time order.
// `tidemark lag record` writes it from a live cluster; hand-written timelines pin the public cases in testdata/.

// TimelineConfigBlock is the configuration carried by a timeline's first line; durations are Go duration strings.
type TimelineConfigBlock struct {
	Cluster      string      `json:"cluster,omitempty"`
	Granularity  Granularity `json:"granularity,omitempty"`
	GroupAllow   []string    `json:"group_allow,omitempty"`
	GroupDeny    []string    `json:"group_deny,omitempty"`
	TopicAllow   []string    `json:"topic_allow,omitempty"`
	TopicDeny    []string    `json:"topic_deny,omitempty"`
	Groups       []GroupRule `json:"groups,omitempty"`
	ReadRecords  *bool       `json:"read_record_timestamps,omitempty"`
	Window       int         `json:"status_window,omitempty"`
	StopAfter    string      `json:"status_stop_after,omitempty"`
	WarnTimeLag  string      `json:"status_warn_time_lag,omitempty"`
	ErrTimeLag   string      `json:"status_err_time_lag,omitempty"`
	WarnOffset   int64       `json:"status_warn_offset_lag,omitempty"`
	ErrOffset    int64       `json:"status_err_offset_lag,omitempty"`
	SimpleWindow string      `json:"status_simple_consumer_window,omitempty"`
}

// Apply copies the block's settings over cfg (before SetDefaults/Validate).
func (b *TimelineConfigBlock) Apply(cfg *Config) error {
	if b.Cluster != "" {
		cfg.Cluster = b.Cluster
	}
	if b.Granularity != "" {
		cfg.Granularity = b.Granularity
	}
	cfg.GroupAllow = append(cfg.GroupAllow, b.GroupAllow...)
	cfg.GroupDeny = append(cfg.GroupDeny, b.GroupDeny...)
	cfg.TopicAllow = append(cfg.TopicAllow, b.TopicAllow...)
	cfg.TopicDeny = append(cfg.TopicDeny, b.TopicDeny...)
	cfg.Groups = append(cfg.Groups, b.Groups...)
	if b.ReadRecords != nil {
		cfg.ReadRecordTimestamps = b.ReadRecords
	}
	if b.Window != 0 {
		cfg.Status.Window = b.Window
	}
	cfg.Status.WarnOffsetLag = max(cfg.Status.WarnOffsetLag, b.WarnOffset)
	cfg.Status.ErrOffsetLag = max(cfg.Status.ErrOffsetLag, b.ErrOffset)
	for _, d := range []struct {
		s   string
		dst *time.Duration
		f   string
	}{{b.StopAfter, &cfg.Status.StopAfter, "status_stop_after"}, {b.WarnTimeLag, &cfg.Status.WarnTimeLag, "status_warn_time_lag"},
		{b.ErrTimeLag, &cfg.Status.ErrTimeLag, "status_err_time_lag"}, {b.SimpleWindow, &cfg.Status.SimpleConsumerWindow, "status_simple_consumer_window"}} {
		if d.s == "" {
			continue
		}
		v, err := time.ParseDuration(d.s)
		if err != nil {
			return fmt.Errorf("%s: %w", d.f, err)
		}
		*d.dst = v
	}
	return nil
}

// Validate checks the block the way Config.Validate checks a configuration, naming each bad field by its key in the
// config line ("status_window: must be >= 2, got 1").
func (b *TimelineConfigBlock) Validate() error {
	var errs []error
	if b.WarnOffset < 0 {
		errs = append(errs, fmt.Errorf("status_warn_offset_lag: must be >= 0 (0 disables), got %d", b.WarnOffset))
	}
	if b.ErrOffset < 0 {
		errs = append(errs, fmt.Errorf("status_err_offset_lag: must be >= 0 (0 disables), got %d", b.ErrOffset))
	}
	var cfg Config
	if err := b.Apply(&cfg); err != nil {
		return errors.Join(append(errs, err)...)
	}
	cfg.SetDefaults()
	// the block's keys are Config's with "status." flattened to "status_"
	if err := cfg.validate(func(k string) string { return strings.Replace(k, "status.", "status_", 1) }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RecordRun describes records From..To-1 of a partition in a hand-written timeline: their kind and timestamps
// (Timestamp + (offset − From) × StepMs). Offsets between runs that no run covers are missing (compacted). Runs
// accumulate over the timeline's lines (a record once written keeps its timestamp).
type RecordRun struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	From      int64     `json:"from"`
	To        int64     `json:"to"`
	Timestamp time.Time `json:"timestamp,omitzero"`
	StepMs    float64   `json:"step_ms,omitempty"`
	// Kind is "data" (default), "control" (transaction markers), "aborted" (data of an aborted transaction: skipped
	// by read_committed) or "no_timestamp" (data whose timestamp is -1).
	Kind string `json:"kind,omitempty"`
}

// Bounds of a run's timestamps: step_ms is at most a day per offset either way, and the run's timestamps span at most
// maxRunSpan, so timestampAt never overflows a time.Duration (±292 years) and a typo cannot make centuries of lag.
const (
	maxStepMs  = float64(24 * time.Hour / time.Millisecond)
	maxRunSpan = 10 * 366 * 24 * time.Hour
)

func (r RecordRun) timestampAt(off int64) time.Time {
	ms := float64(off-r.From) * r.StepMs // |ms| <= maxRunSpan in ms after validate
	return r.Timestamp.Add(time.Duration(math.Round(ms * float64(time.Millisecond))))
}

// ValidRecordTimestamp reports whether t is a usable record timestamp: set and after the Unix epoch. Kafka's
// NO_TIMESTAMP is -1 and clients put 0 or negative values in records without a real clock (case C27), so the live
// reader and timelines both treat t <= 0 ms as missing rather than as a 56-year-old record.
func ValidRecordTimestamp(t time.Time) bool { return !t.IsZero() && t.UnixMilli() > 0 }

// Timeline is a parsed timeline file.
type Timeline struct {
	Name   string
	Config *TimelineConfigBlock
	Lines  []Observation
	lineNo []int // file line of each observation
}

// ReadTimelineFile reads and parses the timeline at path.
func ReadTimelineFile(path string) (*Timeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open timeline: %w", err)
	}
	defer f.Close()
	return ReadTimeline(f, path)
}

// ReadTimeline parses a timeline from r; name is used in errors, which wrap ErrTimeline and name the line:
// "timeline x.jsonl:3: groups[0].offsets[1]: ...".
func ReadTimeline(r io.Reader, name string) (*Timeline, error) {
	tl := &Timeline{Name: name}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<30)
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var o Observation
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("%w %s:%d: %w", ErrTimeline, name, n, err)
		}
		if _, err := dec.Token(); err != io.EOF { // one JSON value per line: a second one must not be dropped
			return nil, fmt.Errorf("%w %s:%d: trailing data after the JSON object at byte %d", ErrTimeline, name, n, dec.InputOffset()+1)
		}
		if o.Config != nil {
			if len(tl.Lines) > 0 || tl.Config != nil {
				return nil, fmt.Errorf("%w %s:%d: config must be on the first line, alone", ErrTimeline, name, n)
			}
			if err := o.Config.Validate(); err != nil {
				return nil, fmt.Errorf("%w %s:%d: config: %w", ErrTimeline, name, n, err)
			}
			tl.Config = o.Config
			continue
		}
		if err := o.validate(); err != nil {
			return nil, fmt.Errorf("%w %s:%d: %w", ErrTimeline, name, n, err)
		}
		if k := len(tl.Lines); k > 0 && o.Time.Before(tl.Lines[k-1].Time) {
			return nil, fmt.Errorf("%w %s:%d: time %s is before the previous line's %s", ErrTimeline, name, n,
				o.Time.Format(time.RFC3339Nano), tl.Lines[k-1].Time.Format(time.RFC3339Nano))
		}
		tl.Lines = append(tl.Lines, o)
		tl.lineNo = append(tl.lineNo, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w %s:%d: %w", ErrTimeline, name, n+1, err)
	}
	return tl, nil
}

func (o *Observation) validate() error {
	if o.Time.IsZero() {
		return errors.New("time: required (RFC 3339)")
	}
	topics := make(map[string]bool, len(o.Topics))
	for i, t := range o.Topics {
		if t.Topic == "" {
			return fmt.Errorf("topics[%d].topic: required", i)
		}
		if topics[t.Topic] {
			return fmt.Errorf("topics[%d]: duplicate topic %q", i, t.Topic)
		}
		topics[t.Topic] = true
		parts := make(map[int32]bool, len(t.Partitions))
		for j, p := range t.Partitions {
			if parts[p.Partition] {
				return fmt.Errorf("topics[%d].partitions[%d]: duplicate partition %s/%d", i, j, t.Topic, p.Partition)
			}
			parts[p.Partition] = true
		}
	}
	groups := make(map[string]bool, len(o.Groups))
	for i, g := range o.Groups {
		if g.Group == "" {
			return fmt.Errorf("groups[%d].group: required", i)
		}
		if groups[g.Group] {
			return fmt.Errorf("groups[%d]: duplicate group %q", i, g.Group)
		}
		groups[g.Group] = true
		offs := make(map[tpKey]bool, len(g.Offsets))
		for j, c := range g.Offsets {
			k := tpKey{c.Topic, c.Partition}
			if offs[k] {
				return fmt.Errorf("groups[%d].offsets[%d]: duplicate offset of group %q on %s/%d", i, j, g.Group, c.Topic, c.Partition)
			}
			offs[k] = true
		}
	}
	for i, r := range o.Log {
		if r.Topic == "" || r.From < 0 || r.To < r.From {
			return fmt.Errorf("log[%d]: need topic and 0 <= from <= to", i)
		}
		switch r.Kind {
		case "", "data", "control", "aborted", "no_timestamp":
		default:
			return fmt.Errorf("log[%d].kind: %q is not one of data, control, aborted, no_timestamp", i, r.Kind)
		}
		if (r.Kind == "" || r.Kind == "data" || r.Kind == "aborted") && r.Timestamp.IsZero() {
			return fmt.Errorf("log[%d].timestamp: required for kind %q", i, r.Kind)
		}
		if math.Abs(r.StepMs) > maxStepMs {
			return fmt.Errorf("log[%d].step_ms: %g is outside ±%g (one day per offset)", i, r.StepMs, maxStepMs)
		}
		if span := math.Abs(r.StepMs) * float64(r.To-r.From); span > float64(maxRunSpan/time.Millisecond) {
			return fmt.Errorf("log[%d]: step_ms × (to − from) = %g ms spans more than %s", i, span, maxRunSpan)
		}
	}
	return nil
}

// TimelineCluster is a Cluster that answers from a timeline, one line per cycle: Advance moves to the next line.
// Record reads are answered from the line's recorded Records, else synthesized from the Log runs seen so far.
type TimelineCluster struct {
	tl   *Timeline
	cur  int
	runs map[tpKey][]RecordRun
}

// NewTimelineCluster returns a cluster positioned before the first line.
func NewTimelineCluster(tl *Timeline) *TimelineCluster {
	return &TimelineCluster{tl: tl, cur: -1, runs: map[tpKey][]RecordRun{}}
}

// Advance moves to the next line and returns its time and file line number; false at the end.
func (c *TimelineCluster) Advance() (time.Time, int, bool) {
	if c.cur+1 >= len(c.tl.Lines) {
		return time.Time{}, 0, false
	}
	c.cur++
	o := &c.tl.Lines[c.cur]
	for _, r := range o.Log {
		k := tpKey{r.Topic, r.Partition}
		c.runs[k] = append(c.runs[k], r)
		slices.SortStableFunc(c.runs[k], func(a, b RecordRun) int { return cmp.Compare(a.From, b.From) })
	}
	return o.Time, c.tl.lineNo[c.cur], true
}

func (c *TimelineCluster) line() *Observation { return &c.tl.Lines[c.cur] }

// Metadata returns the line's topics without offsets.
func (c *TimelineCluster) Metadata(context.Context) ([]TopicObservation, error) {
	o := c.line()
	out := make([]TopicObservation, len(o.Topics))
	for i, t := range o.Topics {
		out[i] = TopicObservation{Topic: t.Topic, ID: t.ID, TimestampType: t.TimestampType}
		for _, p := range t.Partitions {
			out[i].Partitions = append(out[i].Partitions, PartitionObservation{Partition: p.Partition, Leader: p.Leader})
		}
	}
	return out, c.lineErrors(ErrKindMetadata)
}

func (c *TimelineCluster) lineErrors(kind ErrorKind) error {
	var errs CycleErrors
	for _, e := range c.line().Errors {
		if e.Kind == kind {
			errs = append(errs, e)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// Groups returns the line's groups without offsets.
func (c *TimelineCluster) Groups(context.Context) ([]GroupObservation, error) {
	o := c.line()
	out := make([]GroupObservation, len(o.Groups))
	for i, g := range o.Groups {
		out[i] = GroupObservation{Group: g.Group, State: g.State, ProtocolType: g.ProtocolType, Members: g.Members}
	}
	return out, c.lineErrors(ErrKindGroups)
}

// CommittedOffsets returns the line's committed offsets of the named groups.
func (c *TimelineCluster) CommittedOffsets(_ context.Context, groups []string) ([]GroupObservation, error) {
	o := c.line()
	var out []GroupObservation
	for _, name := range groups {
		for _, g := range o.Groups {
			if g.Group == name {
				out = append(out, GroupObservation{Group: name, Offsets: g.Offsets, Error: g.Error})
			}
		}
	}
	return out, c.lineErrors(ErrKindCommitted)
}

// ListOffsets returns the line's partition offsets for the asked topics.
func (c *TimelineCluster) ListOffsets(_ context.Context, topics []TopicObservation) ([]TopicObservation, error) {
	o := c.line()
	var out []TopicObservation
	for _, want := range topics {
		for _, t := range o.Topics {
			if t.Topic == want.Topic {
				out = append(out, t)
			}
		}
	}
	return out, c.lineErrors(ErrKindListOffsets)
}

// ReadRecords answers from the line's recorded probes, else from the log runs.
func (c *TimelineCluster) ReadRecords(_ context.Context, reqs []RecordRequest) ([]RecordProbe, error) {
	o := c.line()
	out := make([]RecordProbe, 0, len(reqs))
	for _, rq := range reqs {
		found := false
		for _, r := range o.Records {
			if r.Topic == rq.Topic && r.Partition == rq.Partition && r.Offset == rq.Offset && isoOrDefault(r.Isolation) == rq.Isolation {
				r.TopicID = rq.TopicID
				out = append(out, r)
				found = true
				break
			}
		}
		if found {
			continue
		}
		if runs, ok := c.runs[tpKey{rq.Topic, rq.Partition}]; ok {
			out = append(out, probeRuns(runs, rq))
			continue
		}
		out = append(out, RecordProbe{Topic: rq.Topic, TopicID: rq.TopicID, Partition: rq.Partition, Offset: rq.Offset,
			Isolation: rq.Isolation, Error: "record not in timeline"})
	}
	return out, c.lineErrors(ErrKindRecords)
}

// probeRuns answers a record request from log runs sorted by From, the way a Fetch from rq.Offset would.
func probeRuns(runs []RecordRun, rq RecordRequest) RecordProbe {
	p := RecordProbe{Topic: rq.Topic, TopicID: rq.TopicID, Partition: rq.Partition, Offset: rq.Offset,
		Isolation: rq.Isolation, FirstOffset: -1, TimestampOffset: -1, ScannedTo: rq.End}
	pos := rq.Offset
	for _, r := range runs {
		if pos >= rq.End {
			break
		}
		if r.To <= pos {
			continue
		}
		if r.From > pos {
			if p.FirstOffset < 0 {
				p.Gap = true // offsets [pos, r.From) are missing: compacted
			}
			pos = r.From
			if pos >= rq.End {
				break
			}
		}
		switch {
		case r.Kind == "control", r.Kind == "aborted" && rq.Isolation == ReadCommitted:
			// not consumable
		case r.Kind == "no_timestamp":
			if p.FirstOffset < 0 {
				p.FirstOffset = pos
			}
		default:
			if p.FirstOffset < 0 {
				p.FirstOffset = pos
			}
			if ts := r.timestampAt(pos); ValidRecordTimestamp(ts) {
				p.TimestampOffset, p.Timestamp = pos, ts
				return p
			}
			// a timestamp <= 0 is missing, as in the live reader: keep looking at the next run (C27)
		}
		pos = r.To
	}
	if pos < rq.End && p.FirstOffset < 0 {
		p.Gap = true
	}
	return p
}

// Eval replays a timeline through the same Loop code path as a live cluster (TimelineCluster as the Cluster, the
// line's time as the clock) and calls fn with each line's file line number and snapshot. cfg must have passed
// Validate (apply tl.Config before that).
func Eval(ctx context.Context, tl *Timeline, cfg *Config, fn func(line int, s *Snapshot) error) error {
	tc := NewTimelineCluster(tl)
	var now time.Time
	loop, err := NewLoop(cfg, tc, func() time.Time { return now }, nil)
	if err != nil {
		return err
	}
	for {
		t, line, ok := tc.Advance()
		if !ok {
			return nil
		}
		now = t
		snap, err := loop.Cycle(ctx)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", tl.Name, line, err)
		}
		if err := fn(line, snap); err != nil {
			return err
		}
	}
}

// TimelineWriter appends observations to a timeline (JSON lines); use its Write as a Loop recorder.
type TimelineWriter struct {
	w       *bufio.Writer
	started bool
	cfg     *TimelineConfigBlock
}

// NewTimelineWriter returns a writer to w whose first line will carry cfg (may be nil). Call Flush at the end.
func NewTimelineWriter(w io.Writer, cfg *TimelineConfigBlock) *TimelineWriter {
	return &TimelineWriter{w: bufio.NewWriter(w), cfg: cfg}
}

// Write appends one observation line (and, first, the config line).
func (tw *TimelineWriter) Write(o *Observation) error {
	enc := json.NewEncoder(tw.w)
	if !tw.started && tw.cfg != nil {
		if err := enc.Encode(Observation{Config: tw.cfg}); err != nil {
			return fmt.Errorf("write timeline config: %w", err)
		}
	}
	tw.started = true
	if err := enc.Encode(o); err != nil {
		return fmt.Errorf("write timeline line: %w", err)
	}
	return tw.w.Flush()
}

// Flush flushes buffered lines.
func (tw *TimelineWriter) Flush() error { return tw.w.Flush() }
