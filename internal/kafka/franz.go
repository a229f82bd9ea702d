package kafka

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// franzClient opens a franz-go client for the RPCs sarama lacks (OffsetForLeaderEpoch). It connects exactly as sc
// does, so that ClientConfig.Sarama stays the one place that knows how to reach the cluster: the same client id,
// TLS config, and SASL PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER (through sc's token provider). Other SASL mechanisms
// fail with a clear error.
func franzClient(brokers []string, sc *sarama.Config) (*kgo.Client, error) {
	if sc == nil {
		sc = sarama.NewConfig()
	}
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(sc.ClientID)}
	if sc.Net.TLS.Enable {
		opts = append(opts, kgo.DialTLSConfig(sc.Net.TLS.Config.Clone()))
	}
	if sc.Net.SASL.Enable {
		m, err := franzSASL(sc)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("connect franz-go client to %v: %w", brokers, err)
	}
	return cl, nil
}

func franzSASL(sc *sarama.Config) (sasl.Mechanism, error) {
	s := &sc.Net.SASL
	switch s.Mechanism {
	case sarama.SASLTypePlaintext, "":
		return plain.Auth{User: s.User, Pass: s.Password, Zid: s.AuthIdentity}.AsMechanism(), nil
	case sarama.SASLTypeSCRAMSHA256:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha256Mechanism(), nil
	case sarama.SASLTypeSCRAMSHA512:
		return scram.Auth{User: s.User, Pass: s.Password}.AsSha512Mechanism(), nil
	case sarama.SASLTypeOAuth:
		if s.TokenProvider == nil {
			return nil, fmt.Errorf("SASL OAUTHBEARER without a token provider")
		}
		tp := s.TokenProvider
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := tp.Token()
			if err != nil {
				return oauth.Auth{}, err
			}
			return oauth.Auth{Token: tok.Token, Extensions: tok.Extensions}, nil
		}), nil
	}
	return nil, fmt.Errorf("SASL mechanism %s is not supported for leader-epoch lookups", s.Mechanism)
}
