package main

import "testing"

// TestInterpolate checks the variable forms the shipped dashboards use in Tidemark targets and variable queries,
// and that names without a value (Grafana's own $__ variables) are left for the backend to reject or ignore.
func TestInterpolate(t *testing.T) {
	vars := map[string]string{"cluster": "a,b", "group": "billing", "topic": "*", "host": ""}
	for in, want := range map[string]string{
		`{"cluster":"${cluster:csv}","group":"${group}"}`: `{"cluster":"a,b","group":"billing"}`,
		`{"cluster":"$cluster","group":"$group"}`:         `{"cluster":"a,b","group":"billing"}`,
		`${topic:csv}|${host:csv}|$__rate_interval`:       `*||$__rate_interval`,
		`$groups ${groupx}`:                               `$groups ${groupx}`,
	} {
		if got := interpolate(in, vars); got != want {
			t.Errorf("interpolate(%s) = %s, want %s", in, got, want)
		}
	}
}
