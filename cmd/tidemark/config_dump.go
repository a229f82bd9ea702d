package main

import (
	"encoding"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// dumpConfig returns v (a configuration struct) as YAML with its keys as written in a config file: durations as
// "10s", secrets (secret.String, a TextMarshaler) as "[redacted]", the values of a `headers:` map (an OTLP
// exporter's API key or Authorization header) as "[redacted]", unexported fields (compiled patterns) left out.
// It is what `tidemark run --print-config` prints.
func dumpConfig(v any) ([]byte, error) { return yaml.Marshal(dumpValue(reflect.ValueOf(v))) }

// dumpRunConfig is dumpConfig of what `tidemark run` uses of c: with clusters: the top-level kafka, lag and collector
// blocks are left out (setting them beside clusters: is an error, and their defaults are not what runs), and
// without a clickhouse block, clickhouse and migrate are (a pure lag exporter uses neither).
func dumpRunConfig(c *runConfig) ([]byte, error) {
	m := dumpValue(reflect.ValueOf(c)).(map[string]any)
	delete(m, "lag_enabled") // deprecated: its value is in lag.enabled
	if len(c.Clusters) > 0 {
		delete(m, "kafka")
		delete(m, "lag")
		delete(m, "collector")
	}
	if !c.clickHouse {
		delete(m, "clickhouse")
		delete(m, "migrate")
	}
	return yaml.Marshal(m)
}

var durationType = reflect.TypeOf(time.Duration(0))

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

// redactValues is a map's keys with every value "[redacted]".
func redactValues(m reflect.Value) map[string]any {
	out := map[string]any{}
	for _, k := range m.MapKeys() {
		out[k.String()] = "[redacted]"
	}
	return out
}
