package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"
)

// RunConfigKeys parses text, a `tidemark run` configuration, and fails t for each key that
// cmd/tidemark/testdata/config.yaml (which sets every option, and which cmd/tidemark's own test loads) does not
// have. A clusters: entry is checked like the top level: its name plus the kafka, lag and collector blocks.
//
// It returns the parsed configuration and the cluster that runs first: the first clusters: entry, or the
// configuration itself when it has no clusters: list. Both are maps of the YAML as written (no defaults applied).
func RunConfigKeys(t testing.TB, text string) (cfg, cluster map[string]any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("parse tidemark config: %v", err)
	}
	_, file, _, _ := runtime.Caller(0)
	example := filepath.Join(filepath.Dir(file), "..", "..", "cmd", "tidemark", "testdata", "config.yaml")
	b, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]any
	if err := yaml.Unmarshal(b, &all); err != nil {
		t.Fatalf("%s: %v", example, err)
	}
	var known []string
	keyPaths("", all, &known)
	check := func(where string, m map[string]any, extra ...string) {
		var have []string
		keyPaths("", m, &have)
		for _, k := range have {
			if !slices.Contains(known, k) && !slices.Contains(extra, k) {
				t.Errorf("config key %s%s is not an option of `tidemark run` (see %s)", where, k, example)
			}
		}
	}
	top := map[string]any{}
	for k, v := range cfg {
		if k != "clusters" {
			top[k] = v
		}
	}
	check("", top)
	cluster = cfg
	if list, ok := cfg["clusters"]; ok {
		entries, _ := list.([]any)
		if len(entries) == 0 {
			t.Fatalf("clusters: %v, want a list of clusters", list)
		}
		for i, e := range entries {
			m, ok := e.(map[string]any)
			if !ok {
				t.Fatalf("clusters[%d] is %T, want a mapping", i, e)
			}
			for k := range m {
				if k != "name" && k != "kafka" && k != "lag" && k != "collector" {
					t.Errorf("config key clusters[%d].%s: a cluster has name, kafka, lag and collector", i, k)
				}
			}
			check("clusters["+strconv.Itoa(i)+"].", m, "name")
		}
		cluster, _ = entries[0].(map[string]any)
	}
	return cfg, cluster
}

func keyPaths(prefix string, m map[string]any, out *[]string) {
	for k, v := range m {
		p := prefix + k
		*out = append(*out, p)
		if sub, ok := v.(map[string]any); ok {
			keyPaths(p+".", sub, out)
		}
	}
}
