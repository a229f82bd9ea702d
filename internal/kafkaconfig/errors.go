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
	if e.Kind != nil {
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
	)
	switch {
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

// Check connects to the bootstrap brokers in order and sends each a Metadata request for no topics, which needs
// the whole connection to work: TCP, TLS, ApiVersions and SASL. It returns nil at the first broker that answers,
// else one error for the brokers that failed the same way (an *Error naming them all), or several joined when
// they failed differently. ctx bounds the wait (each attempt is also bounded by the network timeouts).
func (cl *Client) Check(ctx context.Context) error {
	var errs []*Error
	for _, addr := range cl.cfg.Brokers {
		err := cl.checkOne(ctx, addr)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("check kafka %s: %w", addr, ctx.Err())
		}
		var ke *Error
		errors.As(cl.Explain(addr, err), &ke)
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
	if len(merged) == 1 {
		return merged[0]
	}
	out := make([]error, len(merged))
	for i, m := range merged {
		out[i] = m
	}
	return errors.Join(out...)
}

func (cl *Client) checkOne(ctx context.Context, addr string) error {
	sc := cl.Sarama()
	sc.Net.ReadTimeout = 15 * sc.Net.DialTimeout / 10
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
