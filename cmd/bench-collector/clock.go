package main

import (
	"context"
	"fmt"
	"time"
)

// pollEvery is how often every phase reads its progress (the pipeline's /metrics, the baselines' counters): the
// same cadence on both sides, so their clocks have the same resolution.
const pollEvery = 100 * time.Millisecond

// sample is one reading of a phase's progress: records consumed (or rows written, for the insert baseline) and
// rows ClickHouse acknowledged, by at.
type sample struct {
	at              time.Time
	consumed, acked float64
}

// throughput is a phase's rows per second from its samples: the clock starts at the first sample that saw
// anything consumed and stops at the first sample with at least n − tail rows acknowledged, and the rate is the
// rows acknowledged by then over that time. tail is the writer's batch_rows: a finite input ends in a partial batch
// that waits up to the flush interval (1 s) for the writer's ticker, which a continuous stream never pays, so the
// clock stops when everything but that batch is acknowledged (the last full batch's acknowledgement). ok is false
// when the samples never got that far.
func throughput(samples []sample, n, tail int) (rowsPerS float64, first time.Time, ok bool) {
	for _, s := range samples {
		if first.IsZero() && s.consumed > 0 {
			first = s.at
		}
		if !first.IsZero() && s.acked >= float64(n-tail) && s.acked > 0 && s.at.After(first) {
			return s.acked / s.at.Sub(first).Seconds(), first, true
		}
	}
	return 0, first, false
}

// poll reads progress every pollEvery until n rows are acknowledged, and returns the samples; an error from
// progress, or timeout, ends it.
func poll(ctx context.Context, n int, timeout time.Duration, progress func() (consumed, acked float64, err error)) ([]sample, error) {
	var out []sample
	deadline := time.Now().Add(timeout)
	for {
		c, a, err := progress()
		if err != nil {
			return out, err
		}
		out = append(out, sample{time.Now(), c, a})
		if a >= float64(n) {
			return out, nil
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("%.0f of %d rows acknowledged in %v", a, n, timeout)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}
