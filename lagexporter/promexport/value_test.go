package promexport

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// appendValue is strconv.AppendFloat(x, v, 'g', -1, 64) with a shortcut for small integers: the bytes must be the
// same for every value, at and around the shortcut's bounds and for the values AppendFloat writes specially.
func TestAppendValueMatchesAppendFloat(t *testing.T) {
	vals := []float64{0, math.Copysign(0, -1), 1, -1, 7, 42, 999999, -999999, 1e6, -1e6, 1e6 - 0.5, 999999.5,
		1e6 + 1, 123456789, 0.5, -0.25, 1e-7, 1e21, 1 << 53, -(1 << 53), math.MaxInt64, math.MinInt64,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.NaN(), math.Inf(1), math.Inf(-1), 1754000000.123}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		vals = append(vals, float64(r.IntN(4_000_000)-2_000_000), r.NormFloat64()*1e6)
	}
	for _, v := range vals {
		want := string(strconv.AppendFloat(nil, v, 'g', -1, 64))
		if got := string(appendValue(nil, v)); got != want {
			t.Fatalf("appendValue(%v) = %q, AppendFloat writes %q", v, got, want)
		}
	}
}
