// Package secret holds configuration values that must never be printed: passwords, client secrets, bearer tokens.
//
// A [String] prints as "[redacted]" through every path a value takes out of a process by accident: fmt verbs
// (including %+v and %#v of an enclosing struct), slog, JSON, YAML and text marshalling. Only [String.Reveal] gives
// the value, at the one place that hands it to a client library. [Resolve] is the "value or file" rule every secret
// setting follows: a secret is written inline (or set through the environment), or read from a file (a Kubernetes
// Secret mounted as a volume), never both.
package secret

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// Redacted is what a non-empty String prints as.
const Redacted = "[redacted]"

// String is a secret value. Its zero value is "no secret" and prints as "".
type String string

// Reveal returns the secret itself. Call it only where the value is handed to a client library.
func (s String) Reveal() string { return string(s) }

// String implements fmt.Stringer: "[redacted]", or "" for no secret.
func (s String) String() string {
	if s == "" {
		return ""
	}
	return Redacted
}

// Format implements fmt.Formatter so that every verb (%v, %+v, %#v, %s, %q, %x) prints the redacted form.
func (s String) Format(f fmt.State, verb rune) {
	if verb == 'q' {
		fmt.Fprintf(f, "%q", s.String())
		return
	}
	fmt.Fprint(f, s.String())
}

// GoString implements fmt.GoStringer.
func (s String) GoString() string { return fmt.Sprintf("%q", s.String()) }

// LogValue implements slog.LogValuer.
func (s String) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText implements encoding.TextMarshaler (JSON and YAML encoders use it).
func (s String) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ReadFile reads a secret from path: the whole file, less trailing line breaks (an editor's or `echo`'s newline is
// never part of a password). An empty file is an error: it is a mount that has not been filled. Errors name the
// path, never the content.
func ReadFile(path string) (String, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read secret file: %w", err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("secret file %s is empty", path)
	}
	return String(v), nil
}

// ErrBoth is returned by Resolve when a secret is given both inline and as a file.
var ErrBoth = errors.New("set the value or the file, not both")

// Resolve returns the secret configured as key (inline value v) or key_file (path file): the file's content when
// file is set, else v. Errors name the key.
func Resolve(key string, v String, file string) (String, error) {
	if file == "" {
		return v, nil
	}
	if v != "" {
		return "", fmt.Errorf("%s / %s_file: %w", key, key, ErrBoth)
	}
	s, err := ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_file: %w", key, err)
	}
	return s, nil
}
