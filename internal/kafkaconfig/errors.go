package kafkaconfig

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

// The kinds of connection failure Explain tells apart; an *Error wraps one of them (errors.Is).
var (
	// ErrAuthentication: the broker rejected the credentials (wrong user or password, an expired or foreign token).
	ErrAuthentication = errors.New("authentication failed")
	// ErrMechanism: the listener does not enable the configured SASL mechanism.
	ErrMechanism = errors.New("SASL mechanism not enabled on this listener")
	// ErrUntrustedServer: the broker's certificate does not verify (unknown CA, wrong name, expired).
	ErrUntrustedServer = errors.New("broker certificate not trusted")
	// ErrClientCertificate: the broker refused the TLS handshake for want of a client certificate it trusts.
	ErrClientCertificate = errors.New("client certificate refused")
	// ErrSecurityProtocol: the listener speaks another security protocol than the client (a plaintext client on a
	// TLS port, TLS against a plaintext port, no SASL against a SASL listener).
	ErrSecurityProtocol = errors.New("security protocol mismatch")
	// ErrUnreachable: no TCP connection (refused, timed out, unknown host).
	ErrUnreachable = errors.New("broker unreachable")
	// ErrNotKafka: the peer accepted the connection but did not answer an ApiVersions request like a Kafka broker
	// (it stayed silent until the deadline, or answered something else: a ClickHouse or HTTP port).
	ErrNotKafka = errors.New("not a Kafka broker")
)

// Error is a failed connection to Kafka, explained: which broker(s), with which security protocol and mechanism,
// what kind of failure, what to check, and the underlying error. It never contains a secret.
type Error struct {
	Brokers []string // the address(es) that failed the same way
	Auth    string   // Config.Describe: "SASL_SSL, SCRAM-SHA-512 as tidemark"
	Kind    error    // one of the Err* kinds above, nil when unclassified
	Hint    string   // what to check, may be empty
	Err     error
}

func (e *Error) Error() string {
	var b strings.Builder
	if len(e.Brokers) == 1 {
		b.WriteString("kafka broker " + e.Brokers[0])
	} else {
		b.WriteString("kafka brokers " + strings.Join(e.Brokers, ", "))
	}
	b.WriteString(" (" + e.Auth + "): ")
	var nk *notKafkaError
	switch {
	case errors.As(e.Err, &nk): // the evidence reads as part of the kind: "not a Kafka broker (no ApiVersions answer within 2s)"
		b.WriteString(ErrNotKafka.Error() + " (" + nk.why + ")")
		if nk.err != nil {
			b.WriteString(": " + nk.err.Error())
		}
		return b.String()
	case e.Kind != nil:
		b.WriteString(e.Kind.Error() + ": ")
	}
	if e.Hint != "" {
		b.WriteString(e.Hint + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the kind and the underlying error, so errors.Is works with both.
func (e *Error) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// Explain returns err, from a connection to addr made with this client's settings, as an *Error. An error that is
// already an *Error is returned as it is.
func (cl *Client) Explain(addr string, err error) error {
	if err == nil {
		return nil
	}
	var ke *Error
	if errors.As(err, &ke) {
		return err
	}
	kind, hint := cl.classify(err)
	return &Error{Brokers: []string{addr}, Auth: cl.Describe(), Kind: kind, Hint: hint, Err: err}
}

func (cl *Client) classify(err error) (kind error, hint string) {
	c := cl.cfg
	var (
		cve   *tls.CertificateVerificationError
		alert tls.AlertError
		rhe   tls.RecordHeaderError
		hse   *tlsconf.HandshakeError
		ne    net.Error
		oe    *net.OpError
		nk    *notKafkaError
		tae   *tlsAnswerError
	)
	switch {
	case errors.As(err, &nk):
		return ErrNotKafka, ""
	case errors.As(err, &tae):
		return ErrSecurityProtocol, "the broker answered with TLS: the port is a TLS listener (kafka.tls.enabled is false)"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The caller's deadline cut the attempt short: nothing is known about the broker (context.DeadlineExceeded
		// is also a net.Error timeout, which must not read as "unreachable").
		return nil, ""
	case errors.Is(err, ErrToken):
		return ErrAuthentication, "could not get a token (kafka.sasl.oauth)"
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		switch c.SASL.Mechanism {
		case MechanismAWSMSKIAM:
			return ErrAuthentication, "the broker rejected the IAM token (the credentials' policy must allow kafka-cluster:Connect on this cluster; check kafka.sasl.aws.region)"
		case MechanismOAuthBearer:
			return ErrAuthentication, "the broker rejected the token (expired, or not signed by the issuer or for the audience the broker expects)"
		default:
			return ErrAuthentication, "the broker rejected user " + c.SASL.User + " or the password (kafka.sasl.password)"
		}
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return ErrMechanism, "the listener does not enable " + c.SASL.Mechanism
	case errors.Is(err, sarama.ErrIllegalSASLState):
		return ErrSecurityProtocol, "the listener does not expect SASL here (check kafka.sasl.mechanism and the port)"
	case errors.As(err, &cve):
		return ErrUntrustedServer, "check kafka.tls.ca_file (the CA that signed the broker's certificate) and kafka.tls.server_name"
	case errors.As(err, &oe) && oe.Op == "remote error", errors.As(err, &alert):
		// A TLS alert from the broker. Over TCP crypto/tls reports it as a net.OpError "remote error" (with TLS 1.3
		// the client's handshake completes first, so a refused client certificate shows at the first read).
		if strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "unknown ca") ||
			strings.Contains(err.Error(), "access denied") {
			return ErrClientCertificate, "the broker wants a client certificate it trusts (kafka.tls.cert_file / key_file)"
		}
		return ErrSecurityProtocol, "the broker refused the TLS handshake"
	case errors.As(err, &rhe):
		return ErrSecurityProtocol, "the broker did not answer TLS: the port may be a plaintext listener (kafka.tls.enabled is true)"
	case errors.As(err, &hse) && hungUp(err):
		return ErrSecurityProtocol, "the broker hung up during the TLS handshake: the port may be a plaintext listener"
	case hungUp(err):
		var why []string
		if !c.TLS.Enabled {
			why = append(why, "a TLS listener (kafka.tls.enabled is false)")
		}
		if c.SASL.Mechanism == "" {
			why = append(why, "a SASL listener (kafka.sasl.mechanism is empty)")
		}
		hint := "the broker closed the connection before answering"
		if len(why) > 0 {
			hint += ": the port may be " + strings.Join(why, " or ")
		}
		if c.TLS.Enabled { // with TLS 1.3 a refused client certificate can show as a reset at the first read
			hint += "; or the broker refused the client certificate (kafka.tls.cert_file)"
		}
		return ErrSecurityProtocol, hint
	case errors.As(err, &oe) && oe.Op == "dial", errors.As(err, &ne) && ne.Timeout():
		return ErrUnreachable, ""
	}
	return nil, ""
}

// hungUp reports a connection the peer closed: EOF, reset, broken pipe.
func hungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// Check connects to the bootstrap brokers in order. To each it first sends an ApiVersions request on a connection
// of its own (TCP and TLS), so that a peer that accepts but is not Kafka is told apart (ErrNotKafka) from one that
// cannot be reached; then a Metadata request for no topics through sarama, which needs the whole connection to work:
// TCP, TLS, ApiVersions and SASL. It returns nil at the first broker that answers, else one error for the brokers that
// failed the same way (an *Error naming them all), or several joined when they failed differently.
//
// ctx bounds every step: the dial, each read and write (sarama's network timeouts are cut to ctx's deadline) and the
// whole check. Without a deadline each attempt is bounded by the network timeouts (10 s dial, 15 s per answer). A
// deadline that passes while a broker is checked ends the check with the brokers checked so far; brokers after it are
// not tried.
func (cl *Client) Check(ctx context.Context) error {
	var (
		errs      []*Error
		unchecked []string
	)
	for i, addr := range cl.cfg.Brokers {
		if expired(ctx) && len(errs) > 0 {
			unchecked = cl.cfg.Brokers[i:]
			break
		}
		err := cl.checkOne(ctx, addr)
		if err == nil {
			return nil
		}
		var ke *Error
		errors.As(cl.Explain(addr, err), &ke)
		// A cancelled check, or a deadline that cut an attempt short without a classified failure, is the context's
		// error: the broker was not judged.
		if errors.Is(ctx.Err(), context.Canceled) || (expired(ctx) && ke.Kind == nil) {
			if len(errs) == 0 {
				return fmt.Errorf("check kafka %s: %w", addr, context.DeadlineExceeded)
			}
			unchecked = cl.cfg.Brokers[i:]
			break
		}
		errs = append(errs, ke)
	}
	// Merge brokers that failed identically (same kind, hint and message but for the address).
	var merged []*Error
	for _, e := range errs {
		msg := strings.ReplaceAll(e.Err.Error(), e.Brokers[0], "")
		i := slices.IndexFunc(merged, func(m *Error) bool {
			return m.Kind == e.Kind && m.Hint == e.Hint && strings.ReplaceAll(m.Err.Error(), m.Brokers[0], "") == msg
		})
		if i < 0 {
			merged = append(merged, e)
		} else {
			merged[i].Brokers = append(merged[i].Brokers, e.Brokers[0])
		}
	}
	if len(merged) == 1 && len(unchecked) == 0 {
		return merged[0]
	}
	out := make([]error, len(merged), len(merged)+1)
	for i, m := range merged {
		out[i] = m
	}
	if len(unchecked) > 0 {
		what := "kafka broker "
		if len(unchecked) > 1 {
			what = "kafka brokers "
		}
		out = append(out, fmt.Errorf("%s%s: not checked: %w", what, strings.Join(unchecked, ", "), context.DeadlineExceeded))
	}
	return errors.Join(out...)
}

// expired reports a context that is done or whose deadline has passed (a connection deadline can fire a moment
// before the context's own timer).
func expired(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || (ok && !time.Now().Before(d))
}

// checkOne probes addr, then asks it for metadata through sarama with every network timeout cut to ctx's deadline.
func (cl *Client) checkOne(ctx context.Context, addr string) error {
	sc := cl.Sarama()
	sc.Net.ReadTimeout = 15 * sc.Net.DialTimeout / 10
	deadline, ok := ctx.Deadline()
	if err := ctx.Err(); err != nil {
		return err
	}
	if expired(ctx) {
		return context.DeadlineExceeded
	}
	if !ok {
		deadline = time.Now().Add(sc.Net.DialTimeout + sc.Net.ReadTimeout)
	}
	if err := cl.probe(ctx, addr, deadline); err != nil {
		return err
	}
	if ok {
		left := time.Until(deadline)
		if left <= 0 {
			return context.DeadlineExceeded
		}
		BoundTimeouts(sc, left)
	}
	b := sarama.NewBroker(addr)
	if err := b.Open(sc); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{}))
		done <- err
	}()
	select {
	case err := <-done:
		_ = b.Close()
		return err
	case <-ctx.Done():
		go func() { <-done; _ = b.Close() }()
		return ctx.Err()
	}
}

// BoundTimeouts cuts sc's network timeouts (dial, read, write) and its metadata bound to at most d, so that no single
// network step of a client made from sc outlasts d.
func BoundTimeouts(sc *sarama.Config, d time.Duration) {
	sc.Net.DialTimeout = min(sc.Net.DialTimeout, d)
	sc.Net.ReadTimeout = min(sc.Net.ReadTimeout, d)
	sc.Net.WriteTimeout = min(sc.Net.WriteTimeout, d)
	if sc.Metadata.Timeout == 0 || sc.Metadata.Timeout > d {
		sc.Metadata.Timeout = d
	}
}
