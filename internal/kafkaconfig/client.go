package kafkaconfig

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/tidemark/tidemark/internal/secret"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

// Client is a Config with its files read: the TLS dialer (certificates re-read when they rotate), the password,
// and the OAUTHBEARER token source. It makes sarama configurations; all of them share the dialer and the token
// source (one token serves every connection until it is refreshed). Safe for concurrent use.
type Client struct {
	cfg      Config
	dialer   *tlsconf.Dialer
	password secret.String
	tokens   sarama.AccessTokenProvider
}

// Resolve validates c (after defaults) and reads its files: the CA bundle and client certificate, the password
// file, the OAuth client secret file. Call it again to pick up a changed password file (every connect attempt of
// `tidemark run` does). Errors name the key; none contains a secret.
func (c Config) Resolve() (*Client, error) {
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cl := &Client{cfg: c}
	var err error
	if cl.dialer, err = c.TLS.NewDialer(); err != nil {
		return nil, fmt.Errorf("kafka.tls: %w", err)
	}
	switch c.SASL.Mechanism {
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		if cl.password, err = secret.Resolve("kafka.sasl.password", c.SASL.Password, c.SASL.PasswordFile); err != nil {
			return nil, err
		}
	case MechanismOAuthBearer:
		if cl.tokens, err = newTokenProvider(c.SASL.OAuth, time.Now); err != nil {
			return nil, err
		}
	case MechanismAWSMSKIAM:
		if cl.tokens, err = newAWSTokenProvider(c.SASL.AWS, time.Now); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// Sarama resolves c and returns one sarama configuration (see Client.Sarama).
func (c Config) Sarama() (*sarama.Config, error) {
	cl, err := c.Resolve()
	if err != nil {
		return nil, err
	}
	return cl.Sarama(), nil
}

// Config returns the block the client was resolved from (defaults filled).
func (cl *Client) Config() Config { return cl.cfg }

// Brokers returns the bootstrap addresses.
func (cl *Client) Brokers() []string { return cl.cfg.Brokers }

// Describe is Config.Describe.
func (cl *Client) Describe() string { return cl.cfg.Describe() }

// Sarama returns a fresh sarama configuration for one client (callers set consumer or producer fields on it, so it
// must not be shared): Kafka 4 protocol (Kafka 4 removed the older versions sarama defaults to), the client id,
// bounded network timeouts, and TLS and SASL as configured. TLS goes through the shared dialer (sarama's
// Net.Proxy.Dialer), which does the handshake and the certificate checks itself.
func (cl *Client) Sarama() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V4_0_0_0
	sc.ClientID = cl.cfg.ClientID
	sc.Net.DialTimeout = 10 * time.Second
	sc.Net.ReadTimeout = 30 * time.Second
	sc.Net.WriteTimeout = 10 * time.Second
	if cl.dialer != nil {
		sc.Net.Proxy.Enable, sc.Net.Proxy.Dialer = true, cl.dialer
	}
	s := cl.cfg.SASL
	if s.Mechanism == "" {
		return sc
	}
	sc.Net.SASL.Enable = true
	sc.Net.SASL.Handshake = true
	sc.Net.SASL.Version = sarama.SASLHandshakeV1
	switch s.Mechanism {
	case MechanismPlain:
		sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		sc.Net.SASL.User, sc.Net.SASL.Password = s.User, cl.password.Reveal()
	case MechanismSCRAMSHA256:
		sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		sc.Net.SASL.User, sc.Net.SASL.Password = s.User, cl.password.Reveal()
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256, file: s.PasswordFile} }
	case MechanismSCRAMSHA512:
		sc.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		sc.Net.SASL.User, sc.Net.SASL.Password = s.User, cl.password.Reveal()
		sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512, file: s.PasswordFile} }
	case MechanismOAuthBearer, MechanismAWSMSKIAM:
		sc.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		sc.Net.SASL.TokenProvider = cl.tokens
	}
	return sc
}

// scramClient adapts xdg-go/scram's client conversation to sarama.SCRAMClient (one per authentication). With a
// password file it reads the file at each authentication, so a rotated password reaches every new connection (and
// KIP-368 re-authentication) without a new Resolve; while the file cannot be read it uses the password sarama
// passes, the one read at Resolve.
type scramClient struct {
	hash scram.HashGeneratorFcn
	file string // kafka.sasl.password_file, or ""
	conv *scram.ClientConversation
}

func (s *scramClient) Begin(user, password, authzID string) error {
	if s.file != "" {
		if p, err := secret.ReadFile(s.file); err == nil {
			password = p.Reveal()
		}
	}
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }
func (s *scramClient) Done() bool                            { return s.conv.Done() }
