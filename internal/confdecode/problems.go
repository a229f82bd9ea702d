// Package confdecode decodes Tidemark's YAML configuration into its structs, one way for every reader: `tidemark
// run`, `tidemark lag`, `lag record` and latency/instrument's LoadKafkaConfig. Parse reads a document (koanf with
// its YAML parser), Decode fills a struct from a subtree with the same rules (yaml tags, unknown keys refused,
// durations as "30s", `tls: true` for a tls: block) and the same errors (one sorted line per bad key, named by its
// full key, in the file's terms), and Walk lists a struct's keys for the code that derives key lists from it.
//
// It imports koanf's core, its YAML parser and mapstructure only, so that latency/instrument can use it.
package confdecode

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// decodeProblems turns the decoder's errors into one line per bad key in the configuration's own terms, every key
// once and sorted: "collector.max_batch: want a whole number, got \"abc\"", "collector.bogus: unknown key …". The
// decoder itself reports Go names ('main.runConfig' has invalid keys: …) and its messages, several keys to a line.
// Values are read back from raw, the decoded subtree, so a line shows what the user wrote. root is the decoded
// subtree's key ("" for the whole configuration) and rootType the Go type decoded into (main.runConfig), the name the
// decoder gives the root's unknown keys.
func decodeProblems(err error, raw any, root, rootType string) error {
	lines := map[string]string{}
	var other []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		de, ok := e.(*mapstructure.DecodeError)
		if !ok {
			if u := errors.Unwrap(e); u != nil { // a wrapper ("decoding failed due to the following error(s)")
				walk(u)
			} else {
				other = append(other, e.Error())
			}
			return
		}
		key := de.Name()
		if key == rootType {
			key = root
		}
		inner := de.Unwrap()
		if j, ok := inner.(interface{ Unwrap() []error }); ok { // nested: the inner errors carry full names
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		msg := inner.Error()
		if rest, ok := strings.CutPrefix(msg, "has invalid keys: "); ok {
			for _, name := range strings.Split(rest, ", ") {
				full := name
				if key != "" {
					full = key + "." + name
				}
				lines[full] = full + ": unknown key (a typo, or an option of another version?)"
			}
			return
		}
		lines[key] = key + ": " + wantGot(inner, lookup(raw, root, key))
	}
	walk(err)
	keys := make([]string, 0, len(lines))
	for key := range lines {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	var out []error
	for _, key := range keys {
		out = append(out, errors.New(lines[key]))
	}
	for _, o := range other {
		out = append(out, errors.New(o))
	}
	return errors.Join(out...)
}

// wantGot says what a key wanted and what it got, for a decode error of its value.
func wantGot(err error, got any) string {
	var want string
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(err, &pe):
		want = typeText(pe.Expected.Type())
	case errors.As(err, &ue):
		want = typeText(ue.Expected.Type())
	case strings.HasPrefix(err.Error(), "time: "):
		want = typeText(reflect.TypeOf(time.Duration(0)))
	case strings.HasPrefix(err.Error(), "expected a map"):
		want = "a block of keys"
	default:
		return err.Error() // a value's own parser (enums): its message already says what it accepts
	}
	return fmt.Sprintf("want %s, got %s", want, valueText(got))
}

// typeText names a Go type as a configuration value.
func typeText(t reflect.Type) string {
	if t == reflect.TypeOf(time.Duration(0)) {
		return "a duration like 500ms, 30s or 1m30s"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number ≥ 0"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a block of keys"
	case reflect.Pointer:
		return typeText(t.Elem())
	}
	return t.String()
}

// valueText shows a configured value as the user wrote it, briefly.
func valueText(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 60 {
			x = x[:60] + "…"
		}
		return fmt.Sprintf("%q", x)
	case map[string]any:
		return "a block of keys"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	}
	return fmt.Sprint(v)
}
