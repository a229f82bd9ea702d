package secret

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestStringNeverPrints(t *testing.T) {
	const pw = "hunter2-s3cret"
	type cfg struct {
		User     string
		Password String `json:"password" yaml:"password"`
	}
	c := cfg{User: "u", Password: pw}
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		outs = append(outs, fmt.Sprintf(verb, c), fmt.Sprintf(verb, c.Password))
	}
	j, _ := json.Marshal(c)
	y, _ := yaml.Marshal(c)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "password", c.Password, "cfg", c)
	outs = append(outs, string(j), string(y), logs.String())
	for _, o := range outs {
		if strings.Contains(o, pw) || strings.Contains(o, fmt.Sprintf("%x", pw)) {
			t.Errorf("secret leaked: %s", o)
		}
	}
	if !strings.Contains(string(j), Redacted) || !strings.Contains(fmt.Sprintf("%+v", c), Redacted) {
		t.Errorf("redacted form missing: %s / %+v", j, c)
	}
	if c.Password.Reveal() != pw {
		t.Fatal("Reveal lost the value")
	}
	if fmt.Sprint(String("")) != "" {
		t.Fatal("no secret must print as empty, so a dump shows it is unset")
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "pw")
	if err := os.WriteFile(f, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file string
		v          String
		want, err  string
	}{
		{name: "inline", v: "inline", want: "inline"},
		{name: "file, trailing CRLF trimmed", file: f, want: "from-file"},
		{name: "both", v: "x", file: f, err: "password / password_file: set the value or the file, not both"},
		{name: "missing file", file: filepath.Join(dir, "nope"), err: "password_file: read secret file: open " + filepath.Join(dir, "nope") + ": no such file or directory"},
		// an empty mount is a deployment mistake, not an empty password
		{name: "empty file", file: empty, err: "password_file: secret file " + empty + " is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve("password", tc.v, tc.file)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got %v, want %s", err, tc.err)
				}
				if tc.name == "both" && !errors.Is(err, ErrBoth) {
					t.Fatal("want ErrBoth")
				}
				return
			}
			if err != nil || got.Reveal() != tc.want {
				t.Fatalf("got %q, %v; want %q", got.Reveal(), err, tc.want)
			}
		})
	}
}
