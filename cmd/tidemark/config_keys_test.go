package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/confdecode"
)

// runConfigKeys is every key of runConfig, in the order of its fields.
func runConfigKeys() []confdecode.Key { return confdecode.Walk(reflect.TypeOf(runConfig{}), "") }

// TestConfigKeysFromStructs: the environment's list keys and the keys that must not be set empty are derived from
// runConfig's fields, so a key added to a block is covered without a hand-kept list.
func TestConfigKeysFromStructs(t *testing.T) {
	// Every scalar list outside clusters: (the environment cannot address a list entry) and nothing else.
	wantLists := []string{"clickhouse.addr", "collector.slo_thresholds", "collector.tap.topics", "kafka.brokers",
		"kafka.sasl.oauth.scopes", "lag.group_allow", "lag.group_deny", "lag.topic_allow", "lag.topic_deny"}
	var lists []string
	for k := range listKeys {
		lists = append(lists, k)
	}
	slices.Sort(lists)
	if !slices.Equal(lists, wantLists) {
		t.Errorf("list keys %v, want %v", lists, wantLists)
	}
	// The string fields setDefaults fills. collector.replay_state_topic is among them: the hand-kept list lacked it.
	for _, want := range []string{"kafka.client_id", "clickhouse.database", "collector.replay_state_topic",
		"collector.probe.instance_id", "lag.election.group", "tracing.service_name", "http.listen", "log.format"} {
		if !slices.Contains(defaultedStrings, want) {
			t.Errorf("defaulted strings lack %s: %v", want, defaultedStrings)
		}
	}
	// Strings without a default: empty is their default, so setting them empty is no mistake.
	for _, not := range []string{"kafka.sasl.user", "clickhouse.password_file", "tracing.endpoint", "collector.tap.topics"} {
		if slices.Contains(defaultedStrings, not) {
			t.Errorf("defaulted strings have %s, which has no default", not)
		}
	}
	// A derived key is enforced: the empty value of one the hand-kept list missed is refused.
	if _, err := loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\ncollector: {replay_state_topic: \"\"}\n"), nil, noEnv); err == nil ||
		!strings.Contains(err.Error(), "collector.replay_state_topic: must not be empty") {
		t.Errorf("empty collector.replay_state_topic: err %v", err)
	}
	// A list key from the environment is split on commas.
	cfg, err := loadConfig(writeConfig(t, "kafka: {brokers: [k:9092]}\n"), nil,
		func() []string { return []string{"TIDEMARK_LAG__TOPIC_DENY=a.*,b.*"} })
	if err != nil || !reflect.DeepEqual(cfg.Lag.TopicDeny, []string{"a.*", "b.*"}) {
		t.Errorf("TIDEMARK_LAG__TOPIC_DENY: %v, err %v", cfg.Lag.TopicDeny, err)
	}
}

// TestConfigDeprecatedSpellings: lag_enabled and lag.cluster keep working for one release, each with a warning
// naming the key that replaces it; the current spellings warn about nothing.
func TestConfigDeprecatedSpellings(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		warnings   []string
		lagOn      []bool
		names      []string
	}{
		{"current spellings", "kafka: {brokers: [k:9092]}\nclickhouse: {addr: [ch:9000]}\nlag: {enabled: false}\n",
			nil, []bool{false}, []string{"default"}},
		{"lag_enabled", "kafka: {brokers: [k:9092]}\nclickhouse: {addr: [ch:9000]}\nlag_enabled: false\n",
			[]string{"config: lag_enabled is deprecated and will be removed in the next release: use lag.enabled"},
			[]bool{false}, []string{"default"}},
		{"lag.cluster", "kafka: {brokers: [k:9092]}\nlag: {cluster: prod}\n",
			[]string{"config: lag.cluster is deprecated and will be removed in the next release: use clusters[].name"},
			[]bool{true}, []string{"prod"}},
		// lag_enabled was process-wide: it sets every cluster's lag.enabled that the entry does not set itself.
		{"lag_enabled with clusters", `clickhouse: {addr: [ch:9000]}
lag_enabled: false
clusters:
  - {name: a, kafka: {brokers: [a:9092]}}
  - {name: b, kafka: {brokers: [b:9092]}, lag: {enabled: true, cluster: b}}
`, []string{"config: clusters[1].lag.cluster is deprecated and will be removed in the next release: use clusters[].name",
			"config: lag_enabled is deprecated and will be removed in the next release: use lag.enabled"},
			[]bool{false, true}, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadConfig(writeConfig(t, tc.yaml), nil, noEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.warnings, tc.warnings) {
				t.Errorf("warnings %q, want %q", cfg.warnings, tc.warnings)
			}
			var on []bool
			var names []string
			for _, cl := range cfg.clusterList() {
				on, names = append(on, *cl.Lag.Enabled), append(names, cl.Name)
			}
			if !slices.Equal(on, tc.lagOn) || !slices.Equal(names, tc.names) {
				t.Errorf("lag enabled %v, names %v; want %v, %v", on, names, tc.lagOn, tc.names)
			}
		})
	}
	for _, tc := range []struct{ name, yaml, want string }{
		{"both spellings", "kafka: {brokers: [k:9092]}\nlag_enabled: true\nlag: {enabled: false}\n",
			"lag_enabled: set lag.enabled only"},
		// A cluster whose lag exporter is off runs nothing without ClickHouse: named by its own key.
		{"a cluster with nothing to run", "clusters:\n  - {name: a, kafka: {brokers: [a:9092]}, lag: {enabled: false}}\n",
			"clusters[0].lag.enabled: false and no clickhouse block: nothing to run"},
	} {
		if _, err := loadConfig(writeConfig(t, tc.yaml), nil, noEnv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
}
