package confload

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/secret"
)

// TestDump: the dump writes keys as a file does, durations in Go's form, secrets and header values redacted,
// unexported fields and the omitted top-level keys left out, a nil list as [].
func TestDump(t *testing.T) {
	type tls struct {
		Enabled bool `yaml:"enabled"`
	}
	type conf struct {
		Password secret.String     `yaml:"password"`
		Timeout  time.Duration     `yaml:"timeout"`
		Headers  map[string]string `yaml:"headers"`
		Topics   []string          `yaml:"topics"`
		TLS      *tls              `yaml:"tls"`
		Skip     int               `yaml:"-"`
		Old      int               `yaml:"old"`
		compiled string
	}
	c := conf{Password: "hunter2", Timeout: 90 * time.Second, Headers: map[string]string{"x-api-key": "k"},
		TLS: &tls{Enabled: true}, Skip: 1, Old: 2, compiled: "x"}
	out, err := Dump(&c, "old")
	if err != nil {
		t.Fatal(err)
	}
	want := `headers:
    x-api-key: '[redacted]'
password: '[redacted]'
timeout: 1m30s
tls:
    enabled: true
topics: []
`
	if string(out) != want {
		t.Errorf("dump:\n%s\nwant:\n%s", out, want)
	}
}
