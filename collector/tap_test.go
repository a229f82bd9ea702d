package collector

import (
	"testing"
)

func TestTapSamplingIsDeterministicAndProportional(t *testing.T) {
	tests := []struct {
		name   string
		rate   float64
		lo, hi int // accepted count of 20000 offsets: rate × 20000 ± 4σ (binomial)
	}{
		{"everything", 1, 20000, 20000},
		{"a quarter", 0.25, 4755, 5245}, // σ = √(20000·0.25·0.75) ≈ 61
		{"one percent", 0.01, 145, 255}, // σ ≈ 14
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTap(&pathDeps{}, "tap", tc.rate, "collector", nil)
			n := 0
			for off := int64(0); off < 20000; off++ {
				a := tp.sampled("orders", int32(off%3), off)
				// A re-read after a restart must make the same decision, or re-delivered rows would not collapse.
				if a != tp.sampled("orders", int32(off%3), off) {
					t.Fatalf("offset %d sampled differently on a second look", off)
				}
				if a {
					n++
				}
			}
			if n < tc.lo || n > tc.hi {
				t.Fatalf("sampled %d of 20000 at rate %v, want %d..%d", n, tc.rate, tc.lo, tc.hi)
			}
		})
	}
}
