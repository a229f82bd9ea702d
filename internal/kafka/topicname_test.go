package kafka

import (
	"strings"
	"testing"
)

// TestValidTopicName: the broker's rules (org.apache.kafka.common.internals.Topic.validate): 1 to 249 characters of
// [a-zA-Z0-9._-], not "." or "..".
func TestValidTopicName(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
		err  string
	}{
		{"orders", true, ""},
		{"a.b_c-D9", true, ""},
		{strings.Repeat("x", 249), true, ""},
		{"", false, "topic name is empty"},
		{strings.Repeat("x", 250), false, "is 250 characters long; Kafka allows at most 249"},
		{".", false, `topic name "." is not allowed`},
		{"..", false, `topic name ".." is not allowed`},
		{"...", true, ""},
		{"orders/eu", false, `character '/' is not allowed`},
		{"ordérs", false, `is not allowed (only a-z, A-Z, 0-9, '.', '_', '-')`},
	} {
		err := ValidTopicName(c.name)
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ValidTopicName(%.20q) = %v, want ok %v containing %q", c.name, err, c.ok, c.err)
		}
	}
}
