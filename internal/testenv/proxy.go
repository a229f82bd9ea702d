package testenv

import (
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on loopback in front of a real server, for fault tests that must not stop the shared server:
//
//   - Down closes every connection and refuses new ones (the server is unreachable: an outage, a partition);
//     Up listens again on the same address.
//   - Pause stops forwarding bytes in both directions while keeping every connection open, and holds new ones (the
//     server is frozen, as under SIGSTOP, or a network that drops packets without resetting); Resume forwards again,
//     bytes read meanwhile included.
//
// It stops with the test.
type Proxy struct {
	t      testing.TB
	target string
	addr   string

	mu     sync.Mutex // guards ln, conns, paused, resume
	ln     net.Listener
	conns  map[net.Conn]struct{}
	paused bool
	resume chan struct{} // closed by Resume; replaced by Pause
}

// NewProxy starts a proxy to target (host:port) on a free loopback port.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p := &Proxy{t: t, target: target, conns: map[net.Conn]struct{}{}, resume: make(chan struct{})}
	close(p.resume)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() { p.Resume(); p.Down() })
	return p
}

// Addr is the proxy's host:port: give it to the client under test instead of the server's.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !p.track(c) || !p.track(s) {
		_ = c.Close()
		_ = s.Close()
		return
	}
	go func() { p.copy(s, c); _ = s.Close() }()
	p.copy(c, s)
	_ = c.Close()
}

// copy forwards src to dst until either fails, holding each chunk while the proxy is paused.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			resume := p.resume
			p.mu.Unlock()
			<-resume
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Down closes the listener and every open connection.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Up listens again on the same address.
func (p *Proxy) Up() {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy up on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// Pause stops forwarding (connections stay open, bytes are held). Idempotent.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused, p.resume = true, make(chan struct{})
	}
}

// Resume forwards again what was held and what follows. Idempotent.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.resume)
	}
}
