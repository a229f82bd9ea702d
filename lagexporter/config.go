package lagexporter

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Granularity selects the level of detail of the lag metrics, which bounds their cardinality.
type Granularity string

// The granularities.
const (
	GranularityPartition Granularity = "partition" // one series per (group, topic, partition), plus topic aggregates
	GranularityTopic     Granularity = "topic"     // only (group, topic) aggregates
	// GranularityPartitionLag is the smallest per-partition budget, like kminion's: one series per group-partition
	// (its effective lag), the lag sum per (group, topic), and lag, time lag and status per group (docs/metrics.md).
	GranularityPartitionLag Granularity = "partition_lag"
)

// Reset is what a group does on a partition without a committed offset (its auto.offset.reset), which decides the
// lag of such a partition (case C06). The broker does not expose it: it comes from per-group configuration.
type Reset string

// The reset policies.
const (
	ResetEarliest Reset = "earliest" // backlog counted from the log start (kadm's rule; Kafka's CLI prints "-")
	ResetLatest   Reset = "latest"   // lag 0: the group will start at the end
)

// GroupRule configures the groups whose name matches Match (a regular expression, anchored): their isolation level
// and reset policy. The first matching rule wins; unmatched groups are read_uncommitted / earliest.
type GroupRule struct {
	Match     string    `yaml:"match" json:"match"`
	Isolation Isolation `yaml:"isolation" json:"isolation,omitempty"`
	Reset     Reset     `yaml:"reset" json:"reset,omitempty"`
	re        *regexp.Regexp
}

// StatusConfig holds the thresholds of the status rules (status_rules.go).
type StatusConfig struct {
	// Window is the number of cycles a partition's sliding window holds (Burrow's intervals). Default 10.
	Window int `yaml:"window" json:"window,omitempty"`
	// StopAfter: a partition with lag whose committed offset has not changed for longer than this is STOP. Default 5m.
	StopAfter time.Duration `yaml:"stop_after" json:"stop_after,omitempty"`
	// WarnTimeLag / ErrTimeLag: time lag thresholds for WARN / ERR; 0 disables. Default 0.
	WarnTimeLag time.Duration `yaml:"warn_time_lag" json:"warn_time_lag,omitempty"`
	ErrTimeLag  time.Duration `yaml:"err_time_lag" json:"err_time_lag,omitempty"`
	// WarnOffsetLag / ErrOffsetLag: offset lag thresholds for WARN / ERR; 0 disables. Default 0.
	WarnOffsetLag int64 `yaml:"warn_offset_lag" json:"warn_offset_lag,omitempty"`
	ErrOffsetLag  int64 `yaml:"err_offset_lag" json:"err_offset_lag,omitempty"`
	// SimpleConsumerWindow: a group without members whose last commit is younger than this is a "simple consumer"
	// (assign(), Flink, Spark: case C14), not a dead group. Default 60s. The same window tells a Stable group's stale
	// commits on partitions nobody is assigned (flag unassigned) from commits someone still makes.
	SimpleConsumerWindow time.Duration `yaml:"simple_consumer_window" json:"simple_consumer_window,omitempty"`
	// AheadReads: a committed offset past End in this many consecutive commit-first reads makes the partition AHEAD.
	// Default 2 (one read can race a lagging broker's end offset).
	AheadReads int `yaml:"ahead_reads" json:"ahead_reads,omitempty"`
}

// Config configures the lag exporter's loop and collector. Call SetDefaults, then Validate (which also compiles the
// patterns) before use.
type Config struct {
	// Enabled runs the lag exporter (default true). `tidemark run` reads it; the one-shot `tidemark lag` commands
	// always measure.
	Enabled *bool `yaml:"enabled" json:"-"`
	// Cluster is the value of the `cluster` label. Default "default". In `tidemark run`'s configuration the cluster
	// is named by clusters[].name, which sets it; this key is that name's deprecated spelling.
	Cluster string `yaml:"cluster" json:"cluster,omitempty" deprecated:"clusters[].name"`
	// PollInterval is the time between cycle starts. Default 30s.
	PollInterval time.Duration `yaml:"poll_interval" json:"poll_interval,omitempty"`
	// CycleTimeout bounds one cycle's cluster reads. Default: PollInterval.
	CycleTimeout time.Duration `yaml:"cycle_timeout" json:"cycle_timeout,omitempty"`
	// Granularity of the lag metrics. Default partition.
	Granularity Granularity `yaml:"granularity" json:"granularity,omitempty"`
	// GroupAllow / GroupDeny / TopicAllow / TopicDeny are anchored regular expressions; a name is measured when it
	// matches some allow pattern (or there is none) and no deny pattern.
	GroupAllow []string `yaml:"group_allow" json:"group_allow,omitempty"`
	GroupDeny  []string `yaml:"group_deny" json:"group_deny,omitempty"`
	TopicAllow []string `yaml:"topic_allow" json:"topic_allow,omitempty"`
	TopicDeny  []string `yaml:"topic_deny" json:"topic_deny,omitempty"`
	// Groups holds per-group isolation and reset rules.
	Groups []GroupRule  `yaml:"groups" json:"groups,omitempty"`
	Status StatusConfig `yaml:"status" json:"status,omitzero"`
	// ReadRecordTimestamps enables the small fetch of the first unconsumed record (exact time lag and control-record
	// detection). Default true; when false, time lag is interpolated and flagged "estimated".
	ReadRecordTimestamps *bool `yaml:"read_record_timestamps" json:"read_record_timestamps,omitempty"`
	// KafkaExporterCompat also emits kafka_exporter's metric names (kafka_consumergroup_lag, ...). Default false.
	KafkaExporterCompat bool `yaml:"kafka_exporter_compat" json:"kafka_exporter_compat,omitempty"`
	// HistorySize is the number of (time, high watermark) points kept per partition for the interpolation fallback.
	// Default 64.
	HistorySize int `yaml:"history_size" json:"history_size,omitempty"`
	// Election elects one active exporter among replicas (election.go). Off by default.
	Election ElectionConfig `yaml:"election" json:"election,omitzero"`

	groupAllow, groupDeny, topicAllow, topicDeny []*regexp.Regexp
	compiled                                     bool
}

// SetDefaults fills every zero field with its default.
func (c *Config) SetDefaults() {
	if c.Enabled == nil {
		t := true
		c.Enabled = &t
	}
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	if c.PollInterval == 0 {
		c.PollInterval = 30 * time.Second
	}
	if c.CycleTimeout == 0 {
		c.CycleTimeout = c.PollInterval
	}
	if c.Granularity == "" {
		c.Granularity = GranularityPartition
	}
	if c.ReadRecordTimestamps == nil {
		t := true
		c.ReadRecordTimestamps = &t
	}
	if c.HistorySize == 0 {
		c.HistorySize = 64
	}
	c.Election.setDefaults(c.Cluster)
	s := &c.Status
	if s.Window == 0 {
		s.Window = 10
	}
	if s.StopAfter == 0 {
		s.StopAfter = 5 * time.Minute
	}
	if s.SimpleConsumerWindow == 0 {
		s.SimpleConsumerWindow = time.Minute
	}
	if s.AheadReads == 0 {
		s.AheadReads = 2
	}
}

// Validate checks every field and compiles the patterns. The error joins every problem found, each on its own line
// and each naming the one YAML key that is wrong ("status.window: must be >= 2, got 1"). Use ValidateAt when the
// config is nested in a larger document.
func (c *Config) Validate() error { return c.validate(func(k string) string { return k }) }

// ValidateAt is Validate with every key prefixed by prefix and a dot, so that each joined line names the full key path
// as the user wrote it: ValidateAt("lag") reports "lag.groups[0].match: ...", not "lag: groups[0].match: ...".
func (c *Config) ValidateAt(prefix string) error {
	if prefix == "" {
		return c.Validate()
	}
	return c.validate(func(k string) string { return prefix + "." + k })
}

// ValidateKeys is Validate with every key path of this struct ("status.window") mapped through key, for a config
// written under other names (a timeline's config line flattens "status." to "status_").
func (c *Config) ValidateKeys(key func(path string) string) error { return c.validate(key) }

// CompilePattern compiles a user's allow/deny/match pattern anchored at both ends. A syntax error quotes the pattern as
// written, not the anchored form the exporter compiles.
func CompilePattern(p string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(p); err != nil {
		return nil, err
	}
	return regexp.Compile("^(?:" + p + ")$")
}

// validate checks every field; key maps a key path of this struct ("status.window") to the name the user wrote. The
// problems are reported in field order: the loop's settings, the status thresholds, the election, the history, then
// the patterns and group rules (which it compiles).
func (c *Config) validate(key func(string) string) error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key(k), fmt.Sprintf(format, args...)))
	}
	if c.PollInterval <= 0 {
		bad("poll_interval", "must be > 0, got %s", c.PollInterval)
	}
	if c.CycleTimeout <= 0 {
		bad("cycle_timeout", "must be > 0, got %s", c.CycleTimeout)
	}
	switch c.Granularity {
	case GranularityPartition, GranularityTopic, GranularityPartitionLag:
	default:
		bad("granularity", "%q is not one of partition, partition_lag, topic", c.Granularity)
	}
	c.Status.validate(bad)
	c.Election.validate(bad)
	if c.HistorySize < 2 {
		bad("history_size", "must be >= 2, got %d", c.HistorySize)
	}
	c.compilePatterns(bad)
	c.compileGroupRules(bad)
	c.compiled = len(errs) == 0
	return errors.Join(errs...)
}

// validate reports through bad every status threshold out of range, each under its key below "status.".
func (s *StatusConfig) validate(bad func(k, format string, args ...any)) {
	if s.Window < 2 {
		bad("status.window", "must be >= 2, got %d", s.Window)
	}
	if s.StopAfter <= 0 {
		bad("status.stop_after", "must be > 0, got %s", s.StopAfter)
	}
	if s.SimpleConsumerWindow <= 0 {
		bad("status.simple_consumer_window", "must be > 0, got %s", s.SimpleConsumerWindow)
	}
	if s.AheadReads < 1 {
		bad("status.ahead_reads", "must be >= 1, got %d", s.AheadReads)
	}
	for _, d := range []struct {
		k string
		v time.Duration
	}{{"status.warn_time_lag", s.WarnTimeLag}, {"status.err_time_lag", s.ErrTimeLag}} {
		if d.v < 0 {
			bad(d.k, "must be >= 0 (0 disables), got %s", d.v)
		}
	}
	for _, d := range []struct {
		k string
		v int64
	}{{"status.warn_offset_lag", s.WarnOffsetLag}, {"status.err_offset_lag", s.ErrOffsetLag}} {
		if d.v < 0 {
			bad(d.k, "must be >= 0 (0 disables), got %d", d.v)
		}
	}
}

// compilePatterns compiles the allow and deny patterns (CompilePattern), reporting through bad each that does not
// compile under its key and index ("group_deny[1]"); the others are used.
func (c *Config) compilePatterns(bad func(k, format string, args ...any)) {
	compile := func(field string, pats []string) []*regexp.Regexp {
		out := make([]*regexp.Regexp, 0, len(pats))
		for i, p := range pats {
			re, err := CompilePattern(p)
			if err != nil {
				bad(fmt.Sprintf("%s[%d]", field, i), "%v", err)
				continue
			}
			out = append(out, re)
		}
		return out
	}
	c.groupAllow = compile("group_allow", c.GroupAllow)
	c.groupDeny = compile("group_deny", c.GroupDeny)
	c.topicAllow = compile("topic_allow", c.TopicAllow)
	c.topicDeny = compile("topic_deny", c.TopicDeny)
}

// compileGroupRules compiles each group rule's match pattern and checks its isolation and reset values, reporting
// through bad each problem under the rule's index ("groups[0].reset").
func (c *Config) compileGroupRules(bad func(k, format string, args ...any)) {
	for i := range c.Groups {
		r := &c.Groups[i]
		var err error
		if r.re, err = CompilePattern(r.Match); err != nil {
			bad(fmt.Sprintf("groups[%d].match", i), "%v", err)
		}
		switch r.Isolation {
		case "", ReadUncommitted, ReadCommitted:
		default:
			bad(fmt.Sprintf("groups[%d].isolation", i), "%q is not one of read_uncommitted, read_committed", r.Isolation)
		}
		switch r.Reset {
		case "", ResetEarliest, ResetLatest:
		default:
			bad(fmt.Sprintf("groups[%d].reset", i), "%q is not one of earliest, latest", r.Reset)
		}
	}
}

// GroupAllowed reports whether group passes the allow/deny patterns. Validate must have succeeded.
func (c *Config) GroupAllowed(group string) bool { return allowed(group, c.groupAllow, c.groupDeny) }

// TopicAllowed reports whether topic passes the allow/deny patterns. Validate must have succeeded.
func (c *Config) TopicAllowed(topic string) bool { return allowed(topic, c.topicAllow, c.topicDeny) }

// GroupSettings returns the isolation level and reset policy configured for group (first matching rule; defaults
// read_uncommitted and earliest).
func (c *Config) GroupSettings(group string) (Isolation, Reset) {
	return c.GroupSettingsOf(&GroupObservation{Group: group})
}

// GroupSettingsOf is GroupSettings for an observed group: without a rule setting reset, the group's own policy
// (g.Reset, a share group's share.auto.offset.reset) applies, and a share group of unknown policy resets to latest,
// Kafka's default share.auto.offset.reset (a share-partition is initialized at the end unless configured otherwise).
func (c *Config) GroupSettingsOf(g *GroupObservation) (Isolation, Reset) {
	group := g.Group
	iso, reset := ReadUncommitted, ResetEarliest
	switch {
	case g.Reset != "":
		reset = g.Reset
	case g.Type() == GroupShare:
		reset = ResetLatest
	}
	for _, r := range c.Groups {
		if r.re != nil && r.re.MatchString(group) {
			if r.Isolation != "" {
				iso = r.Isolation
			}
			if r.Reset != "" {
				reset = r.Reset
			}
			break
		}
	}
	return iso, reset
}

func allowed(name string, allow, deny []*regexp.Regexp) bool {
	ok := len(allow) == 0
	for _, re := range allow {
		if re.MatchString(name) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for _, re := range deny {
		if re.MatchString(name) {
			return false
		}
	}
	return true
}
