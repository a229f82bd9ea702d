package main

import (
	"encoding"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
)

// configKey is one key of `tidemark run`'s configuration as a file writes it, found by walking runConfig's yaml tags.
type configKey struct {
	// Key is the dotted path ("kafka.sasl.mechanism"); a list of blocks is written with [] ("clusters[].name",
	// "lag.groups[].match").
	Key string
	// Field is the struct field the key decodes into; Owner is the struct type that declares it.
	Field reflect.StructField
	Owner reflect.Type
	// Index is the field's path from runConfig (reflect.Value.FieldByIndex), nil under a list.
	Index []int
	// Deprecated is the key that replaces this one (the field's `deprecated` tag), "" for a current key.
	Deprecated string
}

// leafType is t without pointers.
func leafType(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var textUnmarshaler = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()

// isBlock reports whether t is decoded as a block of keys (a struct the decoder walks), not as one value.
func isBlock(t reflect.Type) bool {
	t = leafType(t)
	return t.Kind() == reflect.Struct && t != reflect.TypeOf(time.Time{}) && !reflect.PointerTo(t).Implements(textUnmarshaler)
}

// walkKeys calls fn for every key of the struct type t under prefix, blocks before their keys, in field order.
func walkKeys(t reflect.Type, prefix string, index []int, fn func(configKey)) {
	t = leafType(t)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" || name == "" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		var idx []int
		if index != nil {
			idx = append(append([]int{}, index...), i)
		}
		fn(configKey{Key: key, Field: f, Owner: t, Index: idx, Deprecated: f.Tag.Get("deprecated")})
		ft := leafType(f.Type)
		switch {
		case isBlock(ft):
			walkKeys(ft, key, idx, fn)
		case ft.Kind() == reflect.Slice && isBlock(ft.Elem()):
			walkKeys(ft.Elem(), key+"[]", nil, fn)
		}
	}
}

// runConfigKeys is every key of runConfig, in the order of its fields.
func runConfigKeys() []configKey {
	var out []configKey
	walkKeys(reflect.TypeOf(runConfig{}), "", []int{}, func(k configKey) { out = append(out, k) })
	return out
}

// envListKeys are the keys whose value is a list of scalars: split on commas when they come from the environment.
// Keys under a list of blocks (clusters[]) have no environment form.
func envListKeys() map[string]bool {
	out := map[string]bool{}
	for _, k := range runConfigKeys() {
		t := leafType(k.Field.Type)
		if k.Index != nil && t.Kind() == reflect.Slice && !isBlock(t.Elem()) {
			out[k.Key] = true
		}
	}
	return out
}

// defaultedStringKeys are the string keys whose empty value setDefaults replaces: the string fields of a zero
// runConfig that setDefaults leaves non-empty. Their empty value in a file is an error, not a request for the default.
func defaultedStringKeys() []string {
	var c runConfig
	c.setDefaults()
	v := reflect.ValueOf(c)
	var out []string
	for _, k := range runConfigKeys() {
		if k.Index == nil || k.Field.Type.Kind() != reflect.String {
			continue
		}
		if v.FieldByIndex(k.Index).String() != "" {
			out = append(out, k.Key)
		}
	}
	return out
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
		if rest, ok := strings.CutPrefix(ck.Key, "clusters[]."); ok {
			for i, e := range entries {
				if m, ok := e.(map[string]any); ok && koanfHas(m, rest) {
					out = append(out, deprecation(fmt.Sprintf("clusters[%d].%s", i, rest), ck.Deprecated))
				}
			}
			continue
		}
		if ck.Index != nil && k.Exists(ck.Key) {
			out = append(out, deprecation(ck.Key, ck.Deprecated))
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
