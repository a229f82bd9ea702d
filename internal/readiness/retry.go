package readiness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff is an exponential retry policy: the first wait Initial, each next one Multiplier times longer up to Max,
// every wait jittered by ±50 % (backoff's default randomization), with no limit on the attempts or the time.
type Backoff struct {
	Initial, Max time.Duration
	Multiplier   float64
}

// DependencyBackoff is how `tidemark run` retries a dependency that does not answer (Kafka, ClickHouse): 0.5 s
// doubling to 30 s.
func DependencyBackoff() Backoff {
	return Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, Multiplier: 2}
}

// Retry calls connect until it succeeds or ctx ends, waiting as b says between attempts, logging each failed
// attempt once (a warning, "cannot reach <what>; retrying") and publishing it as st's reason ("connecting to
// <what>: <error>"). It returns connect's value, or the cause of ctx's end (context.Canceled after a signal).
func Retry[T any](ctx context.Context, b Backoff, log *slog.Logger, st *State, what string, connect func() (T, error)) (T, error) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval, eb.MaxInterval, eb.Multiplier = b.Initial, b.Max, b.Multiplier
	return backoff.Retry(ctx, func() (T, error) {
		v, err := connect()
		if err != nil {
			st.Set(fmt.Sprintf("connecting to %s: %v", what, err))
		}
		return v, err
	}, backoff.WithBackOff(eb), backoff.WithMaxElapsedTime(0), backoff.WithNotify(func(err error, next time.Duration) {
		log.Warn("cannot reach "+what+"; retrying", "in", next.Round(time.Millisecond), "err", err)
	}))
}

// StartError is the error to return when a dependency's retries ended under sctx: sctx's cause when something other
// than a cancel ended it (the HTTP server failed), else err (context.Canceled after a signal, a clean stop).
func StartError(sctx context.Context, err error) error {
	if cause := context.Cause(sctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
