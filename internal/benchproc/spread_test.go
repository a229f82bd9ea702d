package benchproc

import (
	"math"
	"testing"
)

func TestNewSpread(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            []float64
		med, min, max float64
	}{
		{"odd count: the middle value", []float64{5, 1, 3}, 3, 1, 5},
		{"even count: mean of the two middle values", []float64{4, 1, 3, 10}, 3.5, 1, 10},
		{"one round", []float64{7}, 7, 7, 7},
		// a round that measured nothing must not pull the median to 0
		{"NaN left out", []float64{2, math.NaN(), 4}, 3, 2, 4},
		{"none", nil, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSpread(tc.in)
			if s.Median != tc.med || s.Min != tc.min || s.Max != tc.max {
				t.Fatalf("NewSpread(%v) = median %v min %v max %v, want %v %v %v", tc.in, s.Median, s.Min, s.Max, tc.med, tc.min, tc.max)
			}
			if len(s.Runs) != len(tc.in) {
				t.Fatalf("Runs %v, want the %d inputs in order", s.Runs, len(tc.in))
			}
		})
	}
}
