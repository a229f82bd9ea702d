package latency

import (
	"errors"
	"fmt"
	"math"

	"github.com/DataDog/sketches-go/ddsketch"
	"github.com/DataDog/sketches-go/ddsketch/mapping"
	"github.com/DataDog/sketches-go/ddsketch/store"
)

// sketchMaxBins bounds a sketch's memory: 2048 bins at 1 % relative accuracy cover a ratio of about 1e17 between the
// largest and the smallest value kept exactly; smaller values collapse into the lowest bin.
const sketchMaxBins = 2048

// Sketch is a mergeable quantile sketch of latencies in milliseconds with a relative-error guarantee: every quantile
// it returns is within ±RelativeAccuracy of the true value at that rank. It is DDSketch (Masson, Rim, Lee, "DDSketch:
// a fast and fully-mergeable quantile sketch with relative-error guarantees", VLDB 2019), DataDog's sketches-go
// implementation with the cubically interpolated mapping. Not safe for concurrent use.
type Sketch struct {
	dd *ddsketch.DDSketch
}

// NewSketch returns an empty sketch; relativeAccuracy is in (0, 1), e.g. 0.01.
func NewSketch(relativeAccuracy float64) (*Sketch, error) {
	m, err := mapping.NewCubicallyInterpolatedMapping(relativeAccuracy)
	if err != nil {
		return nil, fmt.Errorf("create sketch mapping with accuracy %v: %w", relativeAccuracy, err)
	}
	return &Sketch{dd: ddsketch.NewDDSketch(m, store.NewCollapsingLowestDenseStore(sketchMaxBins), store.NewCollapsingLowestDenseStore(sketchMaxBins))}, nil
}

// Add inserts one latency (ms). Negative, NaN and infinite values are refused (false): a negative latency is a
// measurement error that must have been caught before.
func (s *Sketch) Add(ms float64) bool {
	if !(ms >= 0) || math.IsInf(ms, 1) {
		return false
	}
	return s.dd.Add(ms) == nil
}

// Count returns the number of values added (merged counts included).
func (s *Sketch) Count() float64 { return s.dd.GetCount() }

// Quantile returns the value at quantile q in [0, 1] in ms; an empty sketch returns NaN.
func (s *Sketch) Quantile(q float64) float64 {
	v, err := s.dd.GetValueAtQuantile(q)
	if err != nil {
		return math.NaN()
	}
	return v
}

// Sum returns the (approximate) sum of the values in ms.
func (s *Sketch) Sum() float64 { return s.dd.GetSum() }

// Merge adds other's values into s. Both must have the same relative accuracy.
func (s *Sketch) Merge(other *Sketch) error {
	if err := s.dd.MergeWith(other.dd); err != nil {
		return fmt.Errorf("merge sketches: %w", err)
	}
	return nil
}

// Copy returns an independent copy.
func (s *Sketch) Copy() *Sketch { return &Sketch{dd: s.dd.Copy()} }

// Clear empties the sketch, keeping its allocation.
func (s *Sketch) Clear() { s.dd.Clear() }

// Encode appends the sketch's sketches-go binary encoding (mapping included) to b; DecodeSketch reads it back.
func (s *Sketch) Encode(b []byte) []byte {
	s.dd.Encode(&b, false)
	return b
}

// ErrCorruptSketch is returned by DecodeSketch for input the sketch library could not decode without panicking.
var ErrCorruptSketch = errors.New("corrupt sketch encoding")

// DecodeSketch decodes a sketch written by Encode (e.g. a stored rollup state). Corrupt input gives an error
// wrapping ErrCorruptSketch or the library's own: sketches-go v1.4.8 panics (index out of range in the collapsing
// store) on some crafted bin indices, found by FuzzDecodeSketch, so the panic is recovered here.
func DecodeSketch(b []byte) (s *Sketch, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("decode sketch of %d bytes: %w: %v", len(b), ErrCorruptSketch, r)
		}
	}()
	dd, err := ddsketch.DecodeDDSketch(b, func() store.Store { return store.NewCollapsingLowestDenseStore(sketchMaxBins) }, nil)
	if err != nil {
		return nil, fmt.Errorf("decode sketch of %d bytes: %w", len(b), err)
	}
	return &Sketch{dd: dd}, nil
}
