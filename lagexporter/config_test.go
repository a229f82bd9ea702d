package lagexporter

import (
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := true
	want := Config{Cluster: "default", PollInterval: 30 * time.Second, CycleTimeout: 30 * time.Second,
		Granularity: GranularityPartition, ReadRecordTimestamps: &tr, HistorySize: 64,
		Status: StatusConfig{Window: 10, StopAfter: 5 * time.Minute, SimpleConsumerWindow: time.Minute, AheadReads: 2}}
	if c.Cluster != want.Cluster || c.PollInterval != want.PollInterval || c.CycleTimeout != want.CycleTimeout ||
		c.Granularity != want.Granularity || !*c.ReadRecordTimestamps || c.HistorySize != want.HistorySize || c.Status != want.Status {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"granularity enum lists values", func(c *Config) { c.Granularity = "group" }, `granularity: "group" is not one of partition, partition_lag, topic`},
		{"bad regexp names the field", func(c *Config) { c.GroupDeny = []string{"ok", "(["} }, "group_deny[1]:"},
		{"isolation enum", func(c *Config) { c.Groups = []GroupRule{{Match: "g", Isolation: "committed"}} }, `groups[0].isolation: "committed" is not one of read_uncommitted, read_committed`},
		{"reset enum", func(c *Config) { c.Groups = []GroupRule{{Match: "g", Reset: "none"}} }, `groups[0].reset: "none" is not one of earliest, latest`},
		{"window", func(c *Config) { c.Status.Window = 1 }, "status.window: must be >= 2"},
		{"negative threshold", func(c *Config) { c.Status.ErrTimeLag = -time.Second }, "status.err_time_lag: must be >= 0 (0 disables), got -1s"},
		// QA: only the bad key is named, not "status.stop_after and status.simple_consumer_window".
		{"one bad window names one key", func(c *Config) { c.Status.SimpleConsumerWindow = -time.Second }, "status.simple_consumer_window: must be > 0, got -1s"},
		// QA: the message quotes the pattern as typed, not the anchored ^(?:...)$ form.
		{"regexp error shows the typed pattern", func(c *Config) { c.Groups = []GroupRule{{Match: "app-(.*"}} }, "groups[0].match: error parsing regexp: missing closing ): `app-(.*`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			c.SetDefaults()
			tc.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			if _, err := NewLoop(&c, nil, time.Now); err == nil {
				t.Fatal("NewLoop accepted an invalid config")
			}
		})
	}
}

func TestConfigPatternsAndRules(t *testing.T) {
	c := Config{GroupAllow: []string{"app-.*"}, GroupDeny: []string{"app-test.*"}, TopicDeny: []string{"__.*"},
		Groups: []GroupRule{{Match: "app-tx.*", Isolation: ReadCommitted}, {Match: "app-.*", Reset: ResetLatest}}}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		group string
		ok    bool
	}{{"app-1", true}, {"app-test-1", false}, {"other", false}, {"xapp-1", false} /* anchored */} {
		if got := c.GroupAllowed(tc.group); got != tc.ok {
			t.Errorf("GroupAllowed(%q) = %v, want %v", tc.group, got, tc.ok)
		}
	}
	if c.TopicAllowed("__consumer_offsets") || !c.TopicAllowed("orders") {
		t.Error("topic patterns")
	}
	// first matching rule wins: app-tx1 is read_committed with the default reset (the second rule is not merged)
	if iso, reset := c.GroupSettings("app-tx1"); iso != ReadCommitted || reset != ResetEarliest {
		t.Errorf("app-tx1 = %s %s", iso, reset)
	}
	if iso, reset := c.GroupSettings("app-2"); iso != ReadUncommitted || reset != ResetLatest {
		t.Errorf("app-2 = %s %s", iso, reset)
	}
}

func TestConfigValidateErrorsOnePerKey(t *testing.T) {
	var c Config
	c.SetDefaults()
	c.Status.SimpleConsumerWindow = -time.Second
	c.Groups = []GroupRule{{Match: "app-(.*"}}
	c.TopicDeny = []string{"ok", "(["}
	err := c.ValidateAt("lag")
	if err == nil {
		t.Fatal("ValidateAt accepted a bad config")
	}
	// every joined line carries the full key path, in field order, and no line names a key that is fine
	want := []string{
		"lag.status.simple_consumer_window: must be > 0, got -1s",
		"lag.topic_deny[1]: error parsing regexp: missing closing ]: `[`",
		"lag.groups[0].match: error parsing regexp: missing closing ): `app-(.*`",
	}
	got := strings.Split(err.Error(), "\n")
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("ValidateAt lines =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if strings.Contains(err.Error(), "^(?:") || strings.Contains(err.Error(), "stop_after") {
		t.Fatalf("error leaks the anchored pattern or a good key: %v", err)
	}
}
