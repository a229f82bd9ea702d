package confload

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/confdecode"
)

// Loader is how a configuration's sources are read and layered, later ones winning: the file, the environment, the
// flags. The zero value reads the file without a cap and no variable.
type Loader struct {
	// EnvPrefix starts every configuration variable ("TIDEMARK_"); after it a key's dots are written as double
	// underscores (TIDEMARK_COLLECTOR__TAP__SAMPLE_RATE sets collector.tap.sample_rate). A variable with the prefix
	// and no double underscore is not configuration and is ignored. "" reads no variable.
	EnvPrefix string
	// Aliases maps whole variable names to the key each fills, split on commas, when neither the file nor a
	// double-underscore variable sets that key (TIDEMARK_KAFKA_BROKERS fills kafka.brokers).
	Aliases map[string]string
	// AliasBlocked, when set, reports that an alias must not fill key in the sources read so far, k (kafka.brokers
	// beside a clusters: list, say).
	AliasBlocked func(k *koanf.Koanf, key string) bool
	// ListKeys are the keys whose value from a variable is a list, split on commas (ListKeys derives them).
	ListKeys map[string]bool
	// Defaulted are the keys whose default applies to an absent key only: an explicitly empty value of one is an
	// error, not a request for the default (confdecode.DefaultedStrings derives them).
	Defaulted []string
	// MaxBytes caps the file read, in bytes (ReadCapped); 0 is no cap.
	MaxBytes int64
}

// Load layers the file at path (may be empty), the environment (environ, nil: os.Environ) and the changed flags of
// fs (may be nil; each flag's key is key(name), "" skips the flag) and checks that no key of Defaulted is set empty.
// Its errors say which source failed ("read config: …", "read environment: …", "read flags: …"); empty defaulted
// keys are reported together, one line each, after "config: ".
func (l *Loader) Load(path string, fs *pflag.FlagSet, environ func() []string, key func(name string) string) (*koanf.Koanf, error) {
	k, err := l.readFile(path)
	if err != nil {
		return nil, err
	}
	if environ == nil {
		environ = os.Environ
	}
	if err := l.loadEnv(k, environ); err != nil {
		return nil, err
	}
	if fs != nil {
		if err := k.Load(posflag.ProviderWithFlag(fs, ".", k, func(f *pflag.Flag) (string, any) {
			if !f.Changed {
				return "", nil
			}
			return key(f.Name), posflag.FlagVal(fs, f)
		}), nil); err != nil {
			return nil, fmt.Errorf("read flags: %w", err)
		}
	}
	if empty := confdecode.CheckEmpty(k, l.Defaulted); len(empty) > 0 {
		return nil, fmt.Errorf("config: %w", errors.Join(empty...))
	}
	return k, nil
}

// readFile parses the file at path, read up to MaxBytes; an empty path is an empty tree.
func (l *Loader) readFile(path string) (*koanf.Koanf, error) {
	if path == "" {
		return koanf.New("."), nil
	}
	read := os.ReadFile
	if l.MaxBytes > 0 {
		read = func(path string) ([]byte, error) { return ReadCapped(path, l.MaxBytes) }
	}
	b, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	k, err := confdecode.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	return k, nil
}

// loadEnv loads the double-underscore variables of environ over k, then the aliases into the keys still unset.
func (l *Loader) loadEnv(k *koanf.Koanf, environ func() []string) error {
	if l.EnvPrefix == "" {
		return nil
	}
	if err := k.Load(env.Provider(".", env.Opt{Prefix: l.EnvPrefix, TransformFunc: l.envKey, EnvironFunc: environ}), nil); err != nil {
		return fmt.Errorf("read environment: %w", err)
	}
	for _, kv := range environ() {
		name, v, _ := strings.Cut(kv, "=")
		key, ok := l.Aliases[name]
		if !ok || v == "" || k.Exists(key) || (l.AliasBlocked != nil && l.AliasBlocked(k, key)) {
			continue
		}
		if err := k.Set(key, strings.Split(v, ",")); err != nil {
			return fmt.Errorf("read environment: %s: %w", name, err)
		}
	}
	return nil
}

// envKey maps the variable k (with its value v) to its key and value, "" for a variable that sets no key.
func (l *Loader) envKey(k, v string) (string, any) {
	if _, alias := l.Aliases[k]; alias {
		return "", nil // applied by loadEnv, below the file
	}
	rest := strings.TrimPrefix(k, l.EnvPrefix)
	if !strings.Contains(rest, "__") {
		return "", nil
	}
	key := strings.ToLower(strings.ReplaceAll(rest, "__", "."))
	if l.ListKeys[key] {
		return key, strings.Split(v, ",")
	}
	return key, v
}

// Decode unmarshals the subtree of k at path ("" is everything) into out (a pointer to a struct); its errors are
// "config: " and one line per bad key, named by its full key (kafka.sasl.mechanism), sorted (confdecode.Decode).
func Decode(k *koanf.Koanf, path string, out any) error {
	if err := confdecode.Decode(confdecode.Subtree(k, path), path, out); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// PrefixLines prefixes every line of err's message with at ("" leaves err as it is): a block's errors, which name
// their keys from the block down, named from the document's root ("clusters[1]." + "collector.max_batch: …").
func PrefixLines(at string, err error) error {
	if at == "" {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	for i := range lines {
		lines[i] = at + lines[i]
	}
	return errors.New(strings.Join(lines, "\n"))
}
