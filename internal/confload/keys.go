package confload

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/knadh/koanf/v2"

	"github.com/tidemark/tidemark/internal/confdecode"
)

// ListKeys returns the keys of the configuration struct type t whose value is a list of scalars: split on commas
// when they come from the environment (Loader.ListKeys). Keys under a list of blocks (clusters[]) have no
// environment form and are left out.
func ListKeys(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for _, k := range confdecode.Walk(t, "") {
		lt := confdecode.LeafType(k.Field.Type)
		if k.Index != nil && lt.Kind() == reflect.Slice && !confdecode.IsBlock(lt.Elem()) {
			out[k.Name] = true
		}
	}
	return out
}

// DeprecatedKeys returns one warning per deprecated key of the configuration struct type t (a field with a
// `deprecated` tag naming its replacement) that k sets, each naming the key to use instead, sorted; keys inside
// the entries of a list of blocks are named with their index (clusters[1].lag.cluster).
func DeprecatedKeys(k *koanf.Koanf, t reflect.Type) []string {
	var out []string
	for _, ck := range confdecode.Walk(t, "") {
		if ck.Deprecated == "" {
			continue
		}
		if list, rest, ok := strings.Cut(ck.Name, "[]."); ok {
			entries, _ := k.Get(list).([]any)
			for i, e := range entries {
				if m, ok := e.(map[string]any); ok && has(m, rest) {
					out = append(out, deprecation(fmt.Sprintf("%s[%d].%s", list, i, rest), ck.Deprecated))
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

// has reports whether the nested map m has the dotted key.
func has(m map[string]any, key string) bool {
	head, rest, more := strings.Cut(key, ".")
	v, ok := m[head]
	if !ok || !more {
		return ok
	}
	sub, ok := v.(map[string]any)
	return ok && has(sub, rest)
}
