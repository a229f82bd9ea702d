// Package pkg links [Real], [Real.M], [Missing], [Real.Gone], [strings.Builder], [strings.Nope] and [pkg/sub.X].
// It cites pkg/pkg.go, pkg/none.go, out/built.bin (ignored: made at run time) and docs/<name>.md (a placeholder).
package pkg

// Real is real.
type Real struct{}

// M is a method.
func (Real) M() {}

// other is the doc of F by mistake.
func F() {}

func other() {}
