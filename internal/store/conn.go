package store

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"
)

// writeDeadlines wraps dial so that every Write on its connections must finish within timeout (none when timeout
// <= 0). clickhouse-go bounds a batch's Send by its context (a watchdog closes the connection) but not the data
// blocks a Flush sends while the INSERT stays open (the writer streams latency batches block by block, see
// insertBlockRows): without a bound, a ClickHouse that stops reading (frozen, a stalled proxy) would block the
// writer's flusher, and Writer.Close, for ever once the socket buffers are full. A Write that times out fails the
// attempt, which the writer retries (retryable) on a fresh connection.
func writeDeadlines(dial func(ctx context.Context, addr string) (net.Conn, error), timeout time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	if timeout <= 0 {
		return dial
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &deadlineConn{Conn: c, timeout: timeout}, nil
	}
}

// deadlineConn is a connection whose every Write carries a write deadline of timeout from its start (it replaces
// whatever write deadline was set before; reads keep clickhouse-go's deadlines).
type deadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *deadlineConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// SyscallConn exposes the socket underneath (through TLS), so clickhouse-go's liveness check of an idle pooled
// connection (a non-blocking read: has the server closed it?) still runs on wrapped connections.
func (c *deadlineConn) SyscallConn() (syscall.RawConn, error) {
	inner := c.Conn
	if t, ok := inner.(*tls.Conn); ok {
		inner = t.NetConn()
	}
	sc, ok := inner.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}
