package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"golang.org/x/net/proxy"
)

// sarama has no share-group (KIP-932) or streams-group (KIP-1071) RPCs. ClusterReader sends those few requests with
// franz-go's kmsg over a kgo client used only as a transport: each request goes to the broker the sarama reads already
// chose (the group's coordinator, known from its ListGroups), so batching stays one request per coordinator. The kgo
// client is built from the reader's sarama.Config (client id, timeouts, TLS, SASL), so it connects exactly as the
// sarama connections do; it is created on first use and only when the cluster has share or streams groups.

// franzClient returns the reader's kgo client, creating it on first use.
func (c *ClusterReader) franzClient() (*kgo.Client, error) {
	c.franzMu.Lock()
	defer c.franzMu.Unlock()
	if c.franz != nil {
		return c.franz, nil
	}
	opts, err := franzOptions(c.seeds, c.conf)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("new franz-go client: %w", err)
	}
	c.franz = cl
	return cl, nil
}

// franzRequest sends req to broker id over the kgo transport (one request, no retry: the next cycle retries).
func (c *ClusterReader) franzRequest(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	cl, err := c.franzClient()
	if err != nil {
		return nil, err
	}
	c.requests.Add(1)
	return cl.Broker(int(id)).Request(ctx, req)
}

// franzOptions maps the parts of a sarama.Config that decide how to connect onto kgo options. A SASL mechanism kgo
// cannot be given from a sarama.Config (GSSAPI) is an error: share and streams groups are then reported unsupported.
func franzOptions(seeds []string, conf *sarama.Config) ([]kgo.Opt, error) {
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
