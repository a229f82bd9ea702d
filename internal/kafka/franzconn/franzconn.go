package franzconn

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/net/proxy"
)

// NewClient opens a franz-go client for the RPCs sarama lacks (OffsetForLeaderEpoch). It connects exactly as sc
// does (Options: the same client id, timeouts, the kafka: block's TLS dialer, SASL), so that the kafka: block
// stays the one place that knows how to reach the cluster. sc nil: sarama's defaults. Errors: a SASL mechanism
// Options cannot map, or kgo refusing the options.
func NewClient(brokers []string, sc *sarama.Config) (*kgo.Client, error) {
	if sc == nil {
		sc = sarama.NewConfig()
	}
	opts, err := Options(brokers, sc)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect franz-go client to %v: %w", brokers, err)
	}
	return cl, nil
}

// Options maps the parts of a sarama.Config that decide how to connect onto kgo options: seeds, client id, dial and
// read timeouts, the proxy dialer (the kafka: block's TLS), Net.TLS and SASL (PLAIN, SCRAM-SHA-256/512,
// OAUTHBEARER). A SASL mechanism kgo cannot be given from a sarama.Config (GSSAPI) is an error, as are a proxy dialer
// together with Net.TLS and OAUTHBEARER without a token provider.
func Options(seeds []string, conf *sarama.Config) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID(conf.ClientID),
		kgo.DialTimeout(conf.Net.DialTimeout),
		// Broker.Request adds this to the request's own timeout; the sarama reads bound their reads the same way.
		kgo.RequestTimeoutOverhead(conf.Net.ReadTimeout),
	}
	if conf.Net.Proxy.Enable && conf.Net.Proxy.Dialer != nil {
		// The kafka: block's TLS is a dialer (internal/kafkaconfig sets it as sarama's proxy dialer, with
		// Net.TLS off): the kgo connections must go through the same dialer, or they would speak plaintext to a
		// TLS listener.
		opts = append(opts, kgo.Dialer(contextDialer(conf.Net.Proxy.Dialer)))
		if conf.Net.TLS.Enable {
			return nil, errors.New("franz-go transport: both a proxy dialer and Net.TLS are set")
		}
	}
	if conf.Net.TLS.Enable {
		tc := conf.Net.TLS.Config
		if tc == nil {
			opts = append(opts, kgo.DialTLS())
		} else {
			opts = append(opts, kgo.DialTLSConfig(tc.Clone()))
		}
	}
	if conf.Net.SASL.Enable {
		s := conf.Net.SASL
		var m sasl.Mechanism
		switch s.Mechanism {
		case "", sarama.SASLTypePlaintext:
			m = plain.Auth{Zid: s.AuthIdentity, User: s.User, Pass: s.Password}.AsMechanism()
		case sarama.SASLTypeSCRAMSHA256:
			m = scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism()
		case sarama.SASLTypeSCRAMSHA512:
			m = scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism()
		case sarama.SASLTypeOAuth:
			if s.TokenProvider == nil {
				return nil, errors.New("franz-go transport: SASL/OAUTHBEARER without a token provider")
			}
			tp := s.TokenProvider
			m = oauth.Oauth(func(context.Context) (oauth.Auth, error) {
				tok, err := tp.Token()
				if err != nil {
					return oauth.Auth{}, err
				}
				return oauth.Auth{Token: tok.Token, Extensions: tok.Extensions}, nil
			})
		default:
			return nil, fmt.Errorf("franz-go transport: SASL mechanism %s is not supported for share and streams group reads", s.Mechanism)
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// contextDialer adapts sarama's proxy dialer to kgo's: its DialContext when it has one (tlsconf.Dialer does), so a
// cancelled request stops its handshake, else its Dial.
func contextDialer(d proxy.Dialer) func(ctx context.Context, network, host string) (net.Conn, error) {
	if cd, ok := d.(proxy.ContextDialer); ok {
		return cd.DialContext
	}
	return func(_ context.Context, network, host string) (net.Conn, error) { return d.Dial(network, host) }
}
