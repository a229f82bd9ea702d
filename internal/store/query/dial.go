package query

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// isDialError reports whether err is a failure to reach the server: refused, unreachable, unknown host, or a
// connection closed before the handshake finished.
func isDialError(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &opErr) || errors.As(err, &dnsErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// hungUp reports a connection the peer closed or reset.
func hungUp(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE)
}
