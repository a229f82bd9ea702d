package store

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestWriteDeadlinesEndABlockedWrite writes to a server that accepts and never reads: once the socket buffers are
// full the Write blocks, and the wrapped connection's write deadline must end it with a deadline error (unwrapped,
// it would block for ever). The socket stays reachable for clickhouse-go's idle-connection check.
func TestWriteDeadlinesEndABlockedWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	d := &net.Dialer{}
	dial := writeDeadlines(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}, 50*time.Millisecond)
	c, err := dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-accepted
	defer server.Close()
	if _, err := c.(syscall.Conn).SyscallConn(); err != nil {
		t.Fatalf("SyscallConn of a wrapped connection: %v", err)
	}
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		_, err := c.Write(buf)
		if err == nil {
			if i > 1024 { // 1 GB into a peer that reads nothing: no buffer is that large
				t.Fatal("writes to a peer that never reads kept succeeding")
			}
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("blocked write ended with %v, want a deadline error", err)
		}
		return
	}
}
