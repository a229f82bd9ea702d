package kafkaconfig_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/testenv"
)

// peer listens on loopback and runs serve on every accepted connection, which it closes afterwards.
func peer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String()
}

func check(t *testing.T, timeout time.Duration, brokers ...string) error {
	t.Helper()
	cl, err := kafkaconfig.Config{Brokers: brokers}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return cl.Check(ctx)
}

// TestCheckNotKafka: a peer that accepts the connection but does not answer ApiVersions like Kafka is "not a Kafka
// broker", never "unreachable", and the check ends at the context's deadline (or at the wrong answer).
func TestCheckNotKafka(t *testing.T) {
	silent := make(chan struct{})
	t.Cleanup(func() { close(silent) })
	cases := []struct {
		name  string
		serve func(net.Conn)
		want  string // the error after "kafka broker ADDR (PLAINTEXT): "
		// deadline: the check ended because the read deadline passed (a net timeout is underneath)
		deadline bool
	}{
		{"silent", func(net.Conn) { <-silent },
			"not a Kafka broker (no ApiVersions answer within 300ms): read tcp ", true},
		// An HTTP server's answer to bytes it cannot parse: the first 8 bytes are no Kafka size and correlation id.
		{"http", func(c net.Conn) {
			_, _ = c.Read(make([]byte, 64))
			_, _ = c.Write([]byte("HTTP/1.0 400 Bad Request\r\n\r\n"))
		}, `not a Kafka broker (its answer "HTTP/1.0" is not an ApiVersions response)`, false},
		// Three bytes and a hang-up: too short for a response header.
		{"short", func(c net.Conn) {
			_, _ = c.Read(make([]byte, 64))
			_, _ = c.Write([]byte{0, 0, 0})
		}, `not a Kafka broker (its answer "\x00\x00\x00" is not an ApiVersions response)`, false},
		// A well-formed frame whose correlation id is not the request's.
		{"wrong correlation id", func(c net.Conn) {
			_, _ = c.Read(make([]byte, 64))
			_, _ = c.Write([]byte{0, 0, 0, 6, 0, 0, 0, 9, 0, 0})
		}, `not a Kafka broker (its answer "\x00\x00\x00\x06\x00\x00\x00\t" is not an ApiVersions response)`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := peer(t, tc.serve)
			err := check(t, 300*time.Millisecond, addr)
			if !errors.Is(err, kafkaconfig.ErrNotKafka) || errors.Is(err, kafkaconfig.ErrUnreachable) {
				t.Fatalf("err = %v, want ErrNotKafka only", err)
			}
			prefix := "kafka broker " + addr + " (PLAINTEXT): "
			if got := strings.TrimPrefix(err.Error(), prefix); !strings.HasPrefix(got, tc.want) || got == err.Error() {
				t.Fatalf("err = %q, want %q%q...", err, prefix, tc.want)
			}
			var ne net.Error
			if timedOut := errors.As(err, &ne) && ne.Timeout(); timedOut != tc.deadline {
				t.Fatalf("err = %v: deadline error underneath = %v, want %v", err, timedOut, tc.deadline)
			}
		})
	}
}

// TestCheckDeadlineSpent: when the first broker spends the whole deadline, the others are named as not checked
// instead of being reported unreachable.
func TestCheckDeadlineSpent(t *testing.T) {
	silent := make(chan struct{})
	t.Cleanup(func() { close(silent) })
	first := peer(t, func(net.Conn) { <-silent })
	second := peer(t, func(net.Conn) { <-silent })
	err := check(t, 200*time.Millisecond, first, second)
	if !errors.Is(err, kafkaconfig.ErrNotKafka) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kafkaconfig.ErrUnreachable) {
		t.Fatalf("err = %v, want ErrNotKafka for the first and the deadline for the second", err)
	}
	if want := "kafka broker " + second + ": not checked: context deadline exceeded"; !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %q, want it to contain %q", err, want)
	}
}

// TestCheckRealKafka: the ApiVersions probe accepts a real broker's answer.
func TestCheckRealKafka(t *testing.T) {
	if err := check(t, 30*time.Second, testenv.Kafka(t)...); err != nil {
		t.Fatal(err)
	}
}
