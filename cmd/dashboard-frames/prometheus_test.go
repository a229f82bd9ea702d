package main

import (
	"encoding/json"
	"testing"
	"time"
)

// TestPromInterpolate checks Grafana's regex format for the cluster variable and the $__ variables as Grafana
// computes them for a 5 s scrape interval and a 2 s panel interval.
func TestPromInterpolate(t *testing.T) {
	from := time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC)
	o := options{interval: 2 * time.Second, scrape: 5 * time.Second, from: from, to: from.Add(75 * time.Second)}
	vars := map[string]string{"cluster": "local,b.c", "group": "g"}
	for in, want := range map[string]string{
		`x{cluster=~"${cluster:regex}",group="$group"}`: `x{cluster=~"(local|b\\.c)",group="g"}`,
		`rate(x[$__rate_interval])`:                     `rate(x[20s])`,
		`x[$__interval] $__range`:                       `x[5s] 75s`,
	} {
		if got := promInterpolate(in, vars, o); got != want {
			t.Errorf("promInterpolate(%s) = %s, want %s", in, got, want)
		}
	}
	if got := promInterpolate(`${cluster:regex}`, map[string]string{"cluster": "local"}, o); got != "local" {
		t.Errorf("one value: %s", got)
	}
}

// TestPromFrames checks one frame per series, the labels on the value field and the legend as its display name.
func TestPromFrames(t *testing.T) {
	var r promResponse
	js := `{"status":"success","data":{"resultType":"matrix","result":[
	 {"metric":{"__name__":"m","topic":"t","partition":"0"},"values":[[1700000000,"1"],[1700000005.5,"2"]]},
	 {"metric":{"__name__":"m","topic":"t","partition":"1"},"values":[[1700000000,"NaN"]]}]}}`
	if err := json.Unmarshal([]byte(js), &r); err != nil {
		t.Fatal(err)
	}
	fs, err := promFrames(r, "A", "{{topic}}/{{partition}}")
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 2 || fs[0].Rows() != 2 || fs[1].Rows() != 1 {
		t.Fatalf("frames %v", fs)
	}
	v := fs[0].Fields[1]
	if v.Labels["partition"] != "0" || v.Labels["__name__"] != "" || v.Config.DisplayNameFromDS != "t/0" {
		t.Errorf("value field %v %v", v.Labels, v.Config)
	}
	if got := fs[0].Fields[0].At(1).(time.Time); got != time.UnixMilli(1700000005500).UTC() {
		t.Errorf("time %v", got)
	}
	if got := seriesName("", map[string]string{"__name__": "m", "b": "2", "a": "1"}); got != `m{a="1", b="2"}` {
		t.Errorf("seriesName = %s", got)
	}
}
