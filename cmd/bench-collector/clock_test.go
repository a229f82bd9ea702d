package main

import (
	"testing"
	"time"
)

func TestThroughput(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name    string
		samples []sample
		n, tail int
		want    float64
		ok      bool
	}{
		{
			// the clock starts at the first sample that saw a record, not at the first sample
			name:    "starts at the first consumption",
			samples: []sample{{at(0), 0, 0}, {at(100), 5, 0}, {at(1100), 9, 50000}, {at(2100), 10, 60000}},
			n:       60000, tail: 10000,
			want: 50000 / 1.0, ok: true,
		},
		{
			// stops at the last full batch's ack: the 1 s wait for the partial batch (2100 → 3100) is not timed
			name:    "partial last batch not timed",
			samples: []sample{{at(0), 1, 0}, {at(1000), 9, 20000}, {at(2000), 10, 40960}, {at(3000), 10, 50000}},
			n:       50000, tail: 10000,
			want: 40960 / 2.0, ok: true,
		},
		{
			name: "never got there", samples: []sample{{at(0), 1, 0}, {at(100), 2, 10}}, n: 100, tail: 10,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, ok := throughput(tc.samples, tc.n, tc.tail)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("throughput = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
