package main

import "testing"

func TestMoverCommitted(t *testing.T) {
	m := &mover{records: 10, base: func(g, p int) int64 { return 50 }}
	for _, tc := range []struct {
		name  string
		g, p  int
		n     int64
		end   int64
		want  int64
		moved bool
	}{
		// group 0 keeps up: within (g+p) mod 3 records of the end
		{"keeps up", 0, 1, 3, 230, 229, true},
		// group 7 lags: base 50 + 3 moves × 10 records / 2
		{"lags", 7, 0, 3, 230, 65, true},
		// a lagging group's commit never passes the end
		{"lags, capped at the end", 8, 0, 100, 60, 60, true},
		// group 9 stopped: no commit at all
		{"stopped", 9, 0, 3, 230, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, moved := m.committed(tc.g, tc.p, tc.n, tc.end)
			if got != tc.want || moved != tc.moved {
				t.Fatalf("committed(%d, %d, %d, %d) = %d, %v; want %d, %v", tc.g, tc.p, tc.n, tc.end, got, moved, tc.want, tc.moved)
			}
		})
	}
}
