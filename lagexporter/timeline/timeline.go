package timeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// ErrInvalid is wrapped by every error reading a timeline file; the message names the file and line.
var ErrInvalid = errors.New("bad timeline")

// ConfigBlock is the configuration carried by a timeline's first line; durations are Go duration strings.
type ConfigBlock struct {
	Cluster      string                  `json:"cluster,omitempty"`
	Granularity  lagexporter.Granularity `json:"granularity,omitempty"`
	GroupAllow   []string                `json:"group_allow,omitempty"`
	GroupDeny    []string                `json:"group_deny,omitempty"`
	TopicAllow   []string                `json:"topic_allow,omitempty"`
	TopicDeny    []string                `json:"topic_deny,omitempty"`
	Groups       []lagexporter.GroupRule `json:"groups,omitempty"`
	ReadRecords  *bool                   `json:"read_record_timestamps,omitempty"`
	Window       int                     `json:"status_window,omitempty"`
	StopAfter    string                  `json:"status_stop_after,omitempty"`
	WarnTimeLag  string                  `json:"status_warn_time_lag,omitempty"`
	ErrTimeLag   string                  `json:"status_err_time_lag,omitempty"`
	WarnOffset   int64                   `json:"status_warn_offset_lag,omitempty"`
	ErrOffset    int64                   `json:"status_err_offset_lag,omitempty"`
	SimpleWindow string                  `json:"status_simple_consumer_window,omitempty"`
	AheadReads   int                     `json:"status_ahead_reads,omitempty"`
}

// Apply copies the block's settings over cfg (before SetDefaults/Validate).
func (b *ConfigBlock) Apply(cfg *lagexporter.Config) error {
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
	if b.AheadReads != 0 {
		cfg.Status.AheadReads = b.AheadReads
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
func (b *ConfigBlock) Validate() error {
	var errs []error
	if b.WarnOffset < 0 {
		errs = append(errs, fmt.Errorf("status_warn_offset_lag: must be >= 0 (0 disables), got %d", b.WarnOffset))
	}
	if b.ErrOffset < 0 {
		errs = append(errs, fmt.Errorf("status_err_offset_lag: must be >= 0 (0 disables), got %d", b.ErrOffset))
	}
	var cfg lagexporter.Config
	if err := b.Apply(&cfg); err != nil {
		return errors.Join(append(errs, err)...)
	}
	cfg.SetDefaults()
	// the block's keys are Config's with "status." flattened to "status_"
	if err := cfg.ValidateKeys(func(k string) string { return strings.Replace(k, "status.", "status_", 1) }); err != nil {
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

// Line is one line of a timeline file: an observation (what one poll read), plus, in hand-written timelines, record
// runs; or, on the first line only, the configuration.
type Line struct {
	lagexporter.Observation
	Log    []RecordRun  `json:"log,omitempty"`    // hand-written timelines: record runs (see Player)
	Config *ConfigBlock `json:"config,omitempty"` // first line only: the exporter config
}

// Timeline is a parsed timeline file.
type Timeline struct {
	Name   string
	Config *ConfigBlock
	Lines  []Line
	lineNo []int // file line of each observation
}

// Configure applies the timeline's config line (if any) over cfg, then fills the defaults and validates it: the
// configuration to Eval or Play the timeline with.
func (tl *Timeline) Configure(cfg *lagexporter.Config) error {
	if tl.Config != nil {
		if err := tl.Config.Apply(cfg); err != nil {
			return fmt.Errorf("timeline %s config: %w", tl.Name, err)
		}
	}
	cfg.SetDefaults()
	return cfg.Validate()
}

// Append adds an observation line after the last one, numbered as the line after the last one's (for timelines
// built or extended in code).
func (tl *Timeline) Append(l Line) {
	n := 1
	if k := len(tl.lineNo); k > 0 {
		n = tl.lineNo[k-1] + 1
	}
	tl.Lines = append(tl.Lines, l)
	tl.lineNo = append(tl.lineNo, n)
}

// ReadFile reads and parses the timeline at path.
func ReadFile(path string) (*Timeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open timeline: %w", err)
	}
	defer f.Close()
	return Read(f, path)
}

// Read parses a timeline from r; name is used in errors, which wrap ErrInvalid and name the line:
// "bad timeline x.jsonl:3: groups[0].offsets[1]: ...".
func Read(r io.Reader, name string) (*Timeline, error) {
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
		var o Line
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return nil, fmt.Errorf("%w %s:%d: %w", ErrInvalid, name, n, err)
		}
		if _, err := dec.Token(); err != io.EOF { // one JSON value per line: a second one must not be dropped
			return nil, fmt.Errorf("%w %s:%d: trailing data after the JSON object at byte %d", ErrInvalid, name, n, dec.InputOffset()+1)
		}
		if o.Config != nil {
			if len(tl.Lines) > 0 || tl.Config != nil {
				return nil, fmt.Errorf("%w %s:%d: config must be on the first line, alone", ErrInvalid, name, n)
			}
			if err := o.Config.Validate(); err != nil {
				return nil, fmt.Errorf("%w %s:%d: config: %w", ErrInvalid, name, n, err)
			}
			tl.Config = o.Config
			continue
		}
		if err := o.validate(); err != nil {
			return nil, fmt.Errorf("%w %s:%d: %w", ErrInvalid, name, n, err)
		}
		if k := len(tl.Lines); k > 0 && o.Time.Before(tl.Lines[k-1].Time) {
			return nil, fmt.Errorf("%w %s:%d: time %s is before the previous line's %s", ErrInvalid, name, n,
				o.Time.Format(time.RFC3339Nano), tl.Lines[k-1].Time.Format(time.RFC3339Nano))
		}
		tl.Lines = append(tl.Lines, o)
		tl.lineNo = append(tl.lineNo, n)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w %s:%d: %w", ErrInvalid, name, n+1, err)
	}
	return tl, nil
}

func (o *Line) validate() error {
	if o.Time.IsZero() {
		return errors.New("time: required (RFC 3339)")
	}
	switch o.Failed {
	case "", lagexporter.ErrKindMetadata, lagexporter.ErrKindGroups:
	default:
		return fmt.Errorf("failed: %q is not one of metadata, groups", o.Failed)
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
		if r := t.Retention; r != nil && (r.RetentionMs < -1 || r.RetentionBytes < -1 || r.SegmentMs < 0 || r.SegmentBytes < 0) {
			return fmt.Errorf("topics[%d].retention: retention_ms and retention_bytes must be >= -1 (-1: unlimited), segment_ms and segment_bytes >= 0", i)
		}
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
		offs := make(map[partKey]bool, len(g.Offsets))
		for j, c := range g.Offsets {
			k := partKey{c.Topic, c.Partition}
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

// Writer appends observations to a timeline (JSON lines); use its Write as a Loop recorder.
type Writer struct {
	w       *bufio.Writer
	started bool
	cfg     *ConfigBlock
}

// NewWriter returns a writer to w whose first line will carry cfg (may be nil). Call Flush at the end.
func NewWriter(w io.Writer, cfg *ConfigBlock) *Writer {
	return &Writer{w: bufio.NewWriter(w), cfg: cfg}
}

// Write appends one observation line (and, first, the config line).
func (tw *Writer) Write(o *lagexporter.Observation) error {
	enc := json.NewEncoder(tw.w)
	if !tw.started && tw.cfg != nil {
		if err := enc.Encode(Line{Config: tw.cfg}); err != nil {
			return fmt.Errorf("write timeline config: %w", err)
		}
	}
	tw.started = true
	if err := enc.Encode(Line{Observation: *o}); err != nil {
		return fmt.Errorf("write timeline line: %w", err)
	}
	return tw.w.Flush()
}

// Flush flushes buffered lines.
func (tw *Writer) Flush() error { return tw.w.Flush() }

// partKey names one partition of a topic.
type partKey struct {
	topic     string
	partition int32
}
