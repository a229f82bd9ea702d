package benchproc

import (
	"math"
	"slices"
)

// Spread summarises one figure over a benchmark's alternated rounds: the median (the figure quoted) and the
// smallest and largest round, so a reader sees how much the machine moved the figure. Runs are the rounds' values
// in the order they ran.
type Spread struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Runs   []float64 `json:"runs"`
}

// NewSpread summarises vs (the median of an even count is the mean of the two middle values); NaN values (a
// round that measured nothing) are left out of the median, min and max but kept in Runs. All zeros for no values.
func NewSpread(vs []float64) Spread {
	s := Spread{Runs: append([]float64(nil), vs...)}
	var ok []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return s
	}
	slices.Sort(ok)
	s.Min, s.Max = ok[0], ok[len(ok)-1]
	if m := len(ok) / 2; len(ok)%2 == 1 {
		s.Median = ok[m]
	} else {
		s.Median = (ok[m-1] + ok[m]) / 2
	}
	return s
}
