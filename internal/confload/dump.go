package confload

import (
	"encoding"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Dump returns v (a configuration struct, or a pointer to one) as YAML with its keys as written in a config file:
// durations as "10s", secrets (secret.String, a TextMarshaler) as "[redacted]", the values of a `headers:` map (an
// OTLP exporter's API key or Authorization header) as "[redacted]", unexported fields (compiled patterns) left out,
// and the top-level keys named in omit left out too.
func Dump(v any, omit ...string) ([]byte, error) {
	out := dumpValue(reflect.ValueOf(v))
	if m, ok := out.(map[string]any); ok {
		for _, key := range omit {
			delete(m, key)
		}
	}
	return yaml.Marshal(out)
}

var durationType = reflect.TypeOf(time.Duration(0))

// dumpValue is v as Dump prints it: maps of keys for structs and maps, lists for slices, strings for durations
// and TextMarshalers, nil for a nil pointer, the value itself otherwise.
func dumpValue(v reflect.Value) any {
	if v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		return dumpValue(v.Elem())
	}
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	if tm, ok := v.Interface().(encoding.TextMarshaler); ok && v.Kind() != reflect.Struct {
		b, _ := tm.MarshalText()
		return string(b)
	}
	switch v.Kind() {
	case reflect.Struct:
		return dumpStruct(v)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = dumpValue(v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[k.String()] = dumpValue(v.MapIndex(k))
		}
		return out
	}
	return v.Interface()
}

// dumpStruct is the struct v as a map from its yaml keys, exported fields only.
func dumpStruct(v reflect.Value) map[string]any {
	out := map[string]any{}
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || name == "" {
			continue
		}
		if fv := v.Field(i); fv.Kind() == reflect.Map && name == "headers" {
			out[name] = redactValues(fv) // tracing.headers carry API keys and bearer tokens
			continue
		}
		out[name] = dumpValue(v.Field(i))
	}
	return out
}

// redactValues is a map's keys with every value "[redacted]".
func redactValues(m reflect.Value) map[string]any {
	out := map[string]any{}
	for _, k := range m.MapKeys() {
		out[k.String()] = "[redacted]"
	}
	return out
}
