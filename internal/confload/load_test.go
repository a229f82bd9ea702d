package confload

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
)

// testConfig is a small configuration with every kind of key the loader treats apart: a block, a scalar list, a
// list of blocks, a defaulted string and deprecated keys (top level and inside the list's entries).
type testConfig struct {
	Kafka struct {
		Brokers  []string `yaml:"brokers"`
		ClientID string   `yaml:"client_id"`
	} `yaml:"kafka"`
	Poll     time.Duration `yaml:"poll"`
	Old      *bool         `yaml:"old" deprecated:"new"`
	Clusters []struct {
		Name  string `yaml:"name"`
		Alias string `yaml:"alias" deprecated:"clusters[].name"`
	} `yaml:"clusters"`
	hidden int
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func testLoader() *Loader {
	return &Loader{
		EnvPrefix:    "T_",
		Aliases:      map[string]string{"T_BROKERS": "kafka.brokers"},
		AliasBlocked: func(k *koanf.Koanf, key string) bool { return k.Exists("clusters") },
		ListKeys:     ListKeys(reflect.TypeOf(testConfig{})),
		Defaulted:    []string{"kafka.client_id"},
		MaxBytes:     1 << 10,
	}
}

// TestLoadLayers: the file, then the variables, then the changed flags, each winning over the ones before; an alias
// fills its key only when nothing else sets it.
func TestLoadLayers(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        []string
		flags      []string
		brokers    []string
		clientID   string
		poll       time.Duration
	}{
		{"file only", "kafka: {brokers: [f:1], client_id: f}\npoll: 1s\n", nil, nil, []string{"f:1"}, "f", time.Second},
		// A list key from a variable is split on commas; the variable wins over the file.
		{"variable over file", "kafka: {brokers: [f:1], client_id: f}\n", []string{"T_KAFKA__BROKERS=e:1,e:2", "T_POLL=5s"},
			nil, []string{"e:1", "e:2"}, "f", 0},
		// T_POLL has no double underscore: not configuration, ignored (poll stays unset).
		{"flag over variable", "", []string{"T_KAFKA__CLIENT_ID=e"}, []string{"--kafka.client_id=c", "--poll=2s"},
			nil, "c", 2 * time.Second},
		// The alias fills kafka.brokers only when the file does not set it.
		{"alias fills an unset key", "poll: 1s\n", []string{"T_BROKERS=a:1,a:2"}, nil, []string{"a:1", "a:2"}, "", time.Second},
		{"alias below the file", "kafka: {brokers: [f:1]}\n", []string{"T_BROKERS=a:1"}, nil, []string{"f:1"}, "", 0},
		{"alias blocked", "clusters: [{name: x}]\n", []string{"T_BROKERS=a:1"}, nil, nil, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			fs.String("kafka.client_id", "", "")
			fs.Duration("poll", 0, "")
			fs.String("config", "", "")
			if err := fs.Parse(append(tc.flags, "--config=ignored")); err != nil {
				t.Fatal(err)
			}
			key := func(name string) string {
				if name == "config" {
					return ""
				}
				return name
			}
			k, err := testLoader().Load(writeFile(t, tc.file), fs, func() []string { return tc.env }, key)
			if err != nil {
				t.Fatal(err)
			}
			var c testConfig
			if err := Decode(k, "", &c); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Kafka.Brokers, tc.brokers) || c.Kafka.ClientID != tc.clientID || c.Poll != tc.poll {
				t.Errorf("brokers %v, client_id %q, poll %v; want %v, %q, %v", c.Kafka.Brokers, c.Kafka.ClientID, c.Poll,
					tc.brokers, tc.clientID, tc.poll)
			}
		})
	}
}

// TestLoadErrors: each source's failure says which source it was; an explicitly empty defaulted key is refused.
func TestLoadErrors(t *testing.T) {
	noEnv := func() []string { return nil }
	for _, tc := range []struct {
		name, file string
		env        []string
		want       string
	}{
		{"empty defaulted key", "kafka: {client_id: ''}\n", nil,
			"config: kafka.client_id: must not be empty (remove the key for its default)"},
		{"empty from a variable", "", []string{"T_KAFKA__CLIENT_ID="}, "config: kafka.client_id: must not be empty"},
		{"not YAML", "kafka: [\n", nil, "read config "},
		{"over the cap", strings.Repeat("#", 1<<10+1), nil, "read config: "},
	} {
		env := noEnv
		if tc.env != nil {
			env = func() []string { return tc.env }
		}
		if _, err := testLoader().Load(writeFile(t, tc.file), nil, env, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := testLoader().Load(filepath.Join(t.TempDir(), "absent.yaml"), nil, noEnv, nil); err == nil ||
		!strings.HasPrefix(err.Error(), "read config: open ") {
		t.Errorf("absent file: %v", err)
	}
	k, err := testLoader().Load(writeFile(t, "poll: soon\nbogus: 1\n"), nil, noEnv, nil)
	if err != nil {
		t.Fatal(err)
	}
	var c testConfig
	want := "config: bogus: unknown key (a typo, or an option of another version?)\n" +
		`poll: want a duration like 500ms, 30s or 1m30s, got "soon"`
	if err := Decode(k, "", &c); err == nil || err.Error() != want {
		t.Errorf("decode: %v, want %q", err, want)
	}
}

// TestKeysFromStructs: the list keys and the deprecated keys come from the struct's tags; a deprecated key inside
// a list of blocks is named with its entry's index.
func TestKeysFromStructs(t *testing.T) {
	lists := ListKeys(reflect.TypeOf(testConfig{}))
	if !reflect.DeepEqual(lists, map[string]bool{"kafka.brokers": true}) { // clusters is a list of blocks: no variable
		t.Errorf("list keys %v", lists)
	}
	k, err := testLoader().Load(writeFile(t, "old: true\nclusters: [{name: a}, {alias: b}]\n"), nil, func() []string { return nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"config: clusters[1].alias is deprecated and will be removed in the next release: use clusters[].name",
		"config: old is deprecated and will be removed in the next release: use new",
	}
	if got := DeprecatedKeys(k, reflect.TypeOf(testConfig{})); !slices.Equal(got, want) {
		t.Errorf("deprecated %q, want %q", got, want)
	}
}

// TestPrefixLines: a block's errors are named from the document's root, every line.
func TestPrefixLines(t *testing.T) {
	err := PrefixLines("clusters[1].", os.ErrNotExist)
	if err.Error() != "clusters[1].file does not exist" {
		t.Errorf("got %q", err)
	}
	two := PrefixLines("c.", errorString("a: bad\nb: bad"))
	if two.Error() != "c.a: bad\nc.b: bad" {
		t.Errorf("got %q", two)
	}
	if PrefixLines("", os.ErrNotExist) != os.ErrNotExist {
		t.Error(`"" changed the error`)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
