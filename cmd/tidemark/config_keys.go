package main

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/knadh/koanf/v2"

	"github.com/tidemark/tidemark/internal/confdecode"
)

// runConfigKeys is every key of runConfig, in the order of its fields.
func runConfigKeys() []confdecode.Key { return confdecode.Walk(reflect.TypeOf(runConfig{}), "") }

// envListKeys are the keys whose value is a list of scalars: split on commas when they come from the environment.
// Keys under a list of blocks (clusters[]) have no environment form.
func envListKeys() map[string]bool {
	out := map[string]bool{}
	for _, k := range runConfigKeys() {
		t := confdecode.LeafType(k.Field.Type)
		if k.Index != nil && t.Kind() == reflect.Slice && !confdecode.IsBlock(t.Elem()) {
			out[k.Name] = true
		}
	}
	return out
}

// defaultedStringKeys are the string keys whose empty value setDefaults replaces: the string fields of a zero
// runConfig that setDefaults leaves non-empty. Their empty value in a file is an error, not a request for the default.
func defaultedStringKeys() []string {
	var c runConfig
	c.setDefaults()
	return confdecode.DefaultedStrings(&c, "")
}

var (
	listKeys         = envListKeys()
	defaultedStrings = defaultedStringKeys()
)

// deprecatedKeys returns one warning per deprecated key k sets (a field with a `deprecated` tag naming its
// replacement), each naming the key to use instead; keys inside clusters: entries are named with their index.
func deprecatedKeys(k *koanf.Koanf) []string {
	var out []string
	entries, _ := k.Get("clusters").([]any)
	for _, ck := range runConfigKeys() {
		if ck.Deprecated == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(ck.Name, "clusters[]."); ok {
			for i, e := range entries {
				if m, ok := e.(map[string]any); ok && koanfHas(m, rest) {
					out = append(out, deprecation(fmt.Sprintf("clusters[%d].%s", i, rest), ck.Deprecated))
				}
			}
			continue
		}
		if ck.Index != nil && k.Exists(ck.Name) {
			out = append(out, deprecation(ck.Name, ck.Deprecated))
		}
	}
	sort.Strings(out)
	return out
}

func deprecation(key, use string) string {
	return fmt.Sprintf("config: %s is deprecated and will be removed in the next release: use %s", key, use)
}

// koanfHas reports whether the nested map m has the dotted key.
func koanfHas(m map[string]any, key string) bool {
	head, rest, more := strings.Cut(key, ".")
	v, ok := m[head]
	if !ok || !more {
		return ok
	}
	sub, ok := v.(map[string]any)
	return ok && koanfHas(sub, rest)
}
