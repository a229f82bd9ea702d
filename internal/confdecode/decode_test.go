package confdecode

import (
	"testing"
	"time"
)

// TestDecodeNamesTheValue: a bad value is reported with its full key and the value as written, inside lists too
// (the decoder names a list entry clusters[1]; the value is read back from the same place).
func TestDecodeNamesTheValue(t *testing.T) {
	type lag struct {
		PollInterval time.Duration `yaml:"poll_interval"`
	}
	type cluster struct {
		Name string `yaml:"name"`
		Lag  lag    `yaml:"lag"`
	}
	type doc struct {
		Clusters []cluster `yaml:"clusters"`
		Lag      lag       `yaml:"lag"`
	}
	for _, tc := range []struct{ yaml, want string }{
		{"lag: {poll_interval: soon}\n", `lag.poll_interval: want a duration like 500ms, 30s or 1m30s, got "soon"`},
		{"clusters: [{name: a}, {name: b, lag: {poll_interval: later}}]\n",
			`clusters[1].lag.poll_interval: want a duration like 500ms, 30s or 1m30s, got "later"`},
		{"lag: {poll_intervall: 1s}\n", "lag.poll_intervall: unknown key (a typo, or an option of another version?)"},
	} {
		k, err := Parse([]byte(tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := Decode(Subtree(k, ""), "", &d); err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
