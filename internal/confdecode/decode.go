package confdecode

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

// Parse parses the YAML document b into a koanf tree (keys split on dots).
func Parse(b []byte) (*koanf.Koanf, error) {
	k := koanf.New(".")
	if err := k.Load(rawbytes.Provider(b), yaml.Parser()); err != nil {
		return nil, err
	}
	return k, nil
}

// Subtree returns the value at path of k ("" is the whole tree), as Decode takes it.
func Subtree(k *koanf.Koanf, path string) any {
	if path == "" {
		return k.Raw()
	}
	return k.Get(path)
}

// Decode unmarshals raw (a subtree of the configuration as Subtree returns it) at key root ("" for the whole
// document) into out, a pointer to a struct, by its yaml tags. Its errors are one line per bad key, named by its
// full key (kafka.sasl.mechanism, clusters[0].lag.poll_interval), sorted: an unknown key (a typo, an option of
// another version) and a value of the wrong type ("want a duration like 500ms, 30s or 1m30s, got \"xyz\"").
func Decode(raw any, root string, out any) error {
	dc := &mapstructure.DecoderConfig{
		RootName:         root,
		TagName:          "yaml",
		ErrorUnused:      true, // an unknown key is a mistake (a typo, an option of another version), never ignored
		WeaklyTypedInput: true,
		Result:           out,
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.TextUnmarshallerHookFunc(),
			tlsBoolHook,
		),
	}
	d, err := mapstructure.NewDecoder(dc)
	if err != nil {
		return err
	}
	if err := d.Decode(raw); err != nil {
		return decodeProblems(err, raw, root, reflect.TypeOf(out).Elem().String())
	}
	return nil
}

// tlsBoolHook accepts `tls: true` / `tls: false` for a tls: block (the form clickhouse.tls had before the block
// existed): true is TLS with the system roots.
func tlsBoolHook(from, to reflect.Type, v any) (any, error) {
	if to != reflect.TypeOf(tlsconf.Config{}) {
		return v, nil
	}
	switch b := v.(type) {
	case bool:
		return map[string]any{"enabled": b}, nil
	case string:
		if p, err := strconv.ParseBool(b); err == nil { // from the environment: TIDEMARK_CLICKHOUSE__TLS=true
			return map[string]any{"enabled": p}, nil
		}
	}
	return v, nil
}

// lookup returns the value of the full key (as the decoder names it: "clusters[1].lag.poll_interval") inside raw,
// the subtree at root; nil when there is none.
func lookup(raw any, root, key string) any {
	if root != "" {
		rest, ok := strings.CutPrefix(key, root)
		if !ok {
			return nil
		}
		key = strings.TrimPrefix(rest, ".")
	}
	cur := raw
	for key != "" {
		var part string
		if strings.HasPrefix(key, "[") {
			end := strings.IndexByte(key, ']')
			if end < 0 {
				return nil
			}
			i, err := strconv.Atoi(key[1:end])
			l, ok := cur.([]any)
			if err != nil || !ok || i < 0 || i >= len(l) {
				return nil
			}
			cur, key = l[i], strings.TrimPrefix(key[end+1:], ".")
			continue
		}
		part, key = key, ""
		if i := strings.IndexAny(part, ".["); i >= 0 {
			part, key = part[:i], strings.TrimPrefix(part[i:], ".")
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	return cur
}

// CheckEmpty returns one error per key of keys that k sets to nothing or "": keys whose default applies to an
// absent key only, where an explicitly empty value is a mistake (an unset variable in a template, say).
func CheckEmpty(k *koanf.Koanf, keys []string) []error {
	var out []error
	for _, key := range keys {
		if k.Exists(key) {
			if v := k.Get(key); v == nil || v == "" {
				out = append(out, fmt.Errorf("%s: must not be empty (remove the key for its default)", key))
			}
		}
	}
	return out
}
