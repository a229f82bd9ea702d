package kafkaconfig

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

// probeCorrelationID is the correlation id of the probe's one request; a Kafka broker echoes it in its answer.
const probeCorrelationID = 0x7469646d // "tidm"

// maxProbeResponse bounds the size an ApiVersions answer may announce (Kafka 4's is about 1 KiB with every feature):
// a larger size is a peer that answered something else, not a response worth reading.
const maxProbeResponse = 1 << 20

// notKafkaError is a peer that accepted the connection but did not answer ApiVersions like a Kafka broker: it said
// nothing within the probe's deadline, or its first bytes are not an ApiVersions response.
type notKafkaError struct {
	why string // "no ApiVersions answer within 2s", "its answer ... is not an ApiVersions response"
	err error  // the read error, nil for a wrong answer
}

func (e *notKafkaError) Error() string {
	if e.err == nil {
		return e.why
	}
	return e.why + ": " + e.err.Error()
}

func (e *notKafkaError) Unwrap() error { return e.err }

// probe connects to addr (TCP, then TLS when configured) and sends one ApiVersions v0 request, which every Kafka
// broker answers before any authentication (KIP-511 keeps v0 readable for this purpose). It returns nil when the
// answer is an ApiVersions response, a *notKafkaError when the peer accepted the connection but stays silent until
// the deadline or answers something else, and the dial or handshake error otherwise. deadline bounds the whole
// probe; ctx cancels it.
func (cl *Client) probe(ctx context.Context, addr string, deadline time.Time) error {
	budget := time.Until(deadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var (
		conn net.Conn
		err  error
	)
	if cl.dialer != nil {
		conn, err = cl.dialer.DialContext(ctx, "tcp", addr)
		var hse *tlsconf.HandshakeError
		if errors.As(err, &hse) && (errors.Is(err, context.DeadlineExceeded) || isTimeout(err)) && ctx.Err() != context.Canceled {
			return &notKafkaError{why: "no answer to the TLS handshake within " + roundBudget(budget), err: err}
		}
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	// The deadline is the context's: a cancelled context closes the connection, which ends the read at once.
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 0
	msg := kmsg.NewRequestFormatter(kmsg.FormatterClientID(cl.cfg.ClientID)).AppendRequest(nil, req, probeCorrelationID)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	var head [8]byte // int32 size, int32 correlation id
	if n, err := io.ReadFull(conn, head[:]); err != nil {
		switch {
		case n > 0 && (isTimeout(err) || errors.Is(err, io.ErrUnexpectedEOF)):
			return wrongAnswer(head[:n]) // a few bytes, then silence or a hang-up
		case isTimeout(err) && ctx.Err() != context.Canceled:
			return &notKafkaError{why: "no ApiVersions answer within " + roundBudget(budget), err: err}
		}
		return err
	}
	size := int32(binary.BigEndian.Uint32(head[:4]))
	corr := int32(binary.BigEndian.Uint32(head[4:]))
	if size < 4+2 || size > maxProbeResponse || corr != probeCorrelationID {
		return wrongAnswer(head[:])
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(conn, body); err != nil {
		if isTimeout(err) && ctx.Err() != context.Canceled {
			return &notKafkaError{why: "no complete ApiVersions answer within " + roundBudget(budget), err: err}
		}
		return err
	}
	resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
	resp.Version = 0
	if err := resp.ReadFrom(body); err != nil {
		return &notKafkaError{why: "its answer is not an ApiVersions response", err: err}
	}
	return nil
}

// tlsAnswerError is a peer that answered the plaintext probe with a TLS record (a TLS listener's alert).
type tlsAnswerError struct{ head []byte }

func (e *tlsAnswerError) Error() string {
	return fmt.Sprintf("the answer %s is a TLS record", strconv.QuoteToASCII(string(e.head)))
}

// wrongAnswer explains the first bytes of an answer that is not an ApiVersions response: a TLS record (content type
// 21 alert or 22 handshake, major version 3) is a TLS listener, anything else is not Kafka.
func wrongAnswer(head []byte) error {
	if len(head) >= 2 && (head[0] == 0x15 || head[0] == 0x16) && head[1] == 0x03 {
		return &tlsAnswerError{head: head}
	}
	return &notKafkaError{why: fmt.Sprintf("its answer %s is not an ApiVersions response", strconv.QuoteToASCII(string(head)))}
}

// isTimeout reports a network deadline that passed.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// roundBudget prints a probe's time budget to a tenth of a second (a deadline derived from "--timeout 2s" a few
// microseconds later prints as 2s).
func roundBudget(d time.Duration) string {
	if r := d.Round(100 * time.Millisecond); r > 0 {
		return r.String()
	}
	return d.Round(time.Millisecond).String()
}
