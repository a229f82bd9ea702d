package instrument

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// threadCPU is the CPU time the calling OS thread has used (the goroutine must be locked to it): being descheduled
// on a shared machine counts against neither side of a ratio.
func threadCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTracingCost: per record (record_bench_test.go), each tracing mode against tracing off in the same run.
// Every iteration is a round of 2000 records with tracing off and 2000 in the mode, alternated (and which goes
// first, too), each side timed by its thread's CPU time; x_off is the mode's total over off's, ns/record the
// mode's. The "off" row is off against itself: its distance from 1 is this machine's noise, the yardstick for the
// others. A noop provider is treated as off (newTracer).
func BenchmarkTracingCost(b *testing.B) {
	const perRound = 2000
	modes := []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"noop", noop.NewTracerProvider()},
		{"sdk-never-sample", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))},
		{"sdk-always-sample", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))},
	}
	for _, md := range modes {
		b.Run(md.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			base := newRecordPath(b, ProducerConfig{Host: "p1"}, ConsumerConfig{Group: "g", Host: "c1"})
			mode := newRecordPath(b, ProducerConfig{Host: "p1", TracerProvider: md.tp},
				ConsumerConfig{Group: "g", Host: "c1", TracerProvider: md.tp})
			defer base.stop()
			defer mode.stop()
			round := func(r *recordPath) time.Duration {
				t0 := threadCPU(b)
				for range perRound {
					r.one()
				}
				return threadCPU(b) - t0
			}
			round(base) // warm both: maps grown, the SDK's pools filled
			round(mode)
			var tBase, tMode time.Duration
			n := 0
			for b.Loop() {
				if n%2 == 0 {
					tBase += round(base)
					tMode += round(mode)
				} else {
					tMode += round(mode)
					tBase += round(base)
				}
				n++
			}
			b.ReportMetric(float64(tMode.Nanoseconds())/float64(n*perRound), "ns/record")
			b.ReportMetric(float64(tMode)/float64(tBase), "x_off")
			b.ReportMetric(0, "ns/op") // an iteration is two rounds: ns/record is the figure
		})
	}
}
