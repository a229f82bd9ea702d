package main

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
)

// silentListener accepts connections on a loopback port and never writes to them, as a ClickHouse native port does
// with a Kafka request. It holds the connections until the test ends.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		close(conns)
		for c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestLagNotKafkaHonoursTimeout: `tidemark lag` against a port that accepts but never answers returns with the
// ApiVersions deadline error --timeout set, naming the port as not Kafka (not "broker unreachable").
func TestLagNotKafkaHonoursTimeout(t *testing.T) {
	addr := silentListener(t)
	_, err := runLag(t, "--brokers", addr, "--timeout", "300ms")
	if !errors.Is(err, kafkaconfig.ErrNotKafka) {
		t.Fatalf("err = %v, want ErrNotKafka", err)
	}
	if errors.Is(err, kafkaconfig.ErrUnreachable) {
		t.Fatalf("err = %v: the connection succeeded, it must not say unreachable", err)
	}
	// It returned because the read deadline --timeout set passed, not at sarama's own 15 s read timeout.
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a network deadline error underneath", err)
	}
	want := "kafka broker " + addr + " (PLAINTEXT): not a Kafka broker (no ApiVersions answer within 300ms)"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %q, want it to start with %q", err, want)
	}
}
