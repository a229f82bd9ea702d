// Package kafkaconfig is the `kafka:` block: how every Kafka connection Tidemark makes reaches the cluster (the
// collector's consumers and producers, the lag exporter, `tidemark lag` and `lag record`) and how an instrumented
// application reaches it through latency/instrument. It turns the block into sarama configurations with TLS
// ([tlsconf]) and SASL: PLAIN, SCRAM-SHA-256/512 (RFC 5802, RFC 7677, via github.com/xdg-go/scram) and OAUTHBEARER
// (RFC 7628, KIP-255) with a token from an OIDC client-credentials grant or from a file.
//
// Config is plain data (YAML, environment, flags); [Config.Resolve] reads its secret and certificate files and
// returns a [Client], which makes any number of sarama configurations sharing one TLS dialer and one token source.
// [Client.Check] connects to the bootstrap brokers and [Client.Explain] turns a connection failure into one error
// naming the broker, the security protocol and the mechanism ([Error]).
//
// The package imports sarama and small libraries only, so that latency/instrument can offer it to applications.
package kafkaconfig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/secret"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

// SASL mechanisms.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
	// MechanismAWSMSKIAM is Amazon MSK's IAM access control: OAUTHBEARER on the wire, with a token that is a SigV4
	// presigned request for kafka-cluster:Connect made by AWS's signer module from the AWS credential chain
	// (environment, shared profile, EKS web identity, ECS or EC2 role).
	MechanismAWSMSKIAM = "AWS_MSK_IAM"
)

// Mechanisms lists the accepted values of sasl.mechanism ("" is no SASL).
var Mechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512, MechanismOAuthBearer, MechanismAWSMSKIAM}

// Config is the `kafka:` block. Every secret can be given inline (or through the environment: a key's dots are
// written as double underscores, TIDEMARK_KAFKA__SASL__PASSWORD) or as a file (the `_file` keys), never both.
type Config struct {
	// Brokers are bootstrap addresses (host:port).
	Brokers []string `yaml:"brokers"`
	// ClientID is sent to the brokers (default "tidemark").
	ClientID string `yaml:"client_id"`
	// TLS encrypts the connections (security protocol SSL, or SASL_SSL with SASL).
	TLS tlsconf.Config `yaml:"tls"`
	// SASL authenticates (SASL_PLAINTEXT, or SASL_SSL with TLS).
	SASL SASL `yaml:"sasl"`
}

// SASL is the `kafka.sasl:` block.
type SASL struct {
	// Mechanism is "" (none), PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (case-insensitive).
	Mechanism string `yaml:"mechanism"`
	// User and Password (or PasswordFile) authenticate PLAIN and SCRAM. With SCRAM the file is read at every
	// authentication, so a rotated password reaches the next connection; with PLAIN (sarama takes a fixed string)
	// it is read at Resolve, which `tidemark run` calls at every connect attempt.
	User         string        `yaml:"user"`
	Password     secret.String `yaml:"password"`
	PasswordFile string        `yaml:"password_file"`
	// OAuth configures OAUTHBEARER.
	OAuth OAuth `yaml:"oauth"`
	// AWS configures AWS_MSK_IAM.
	AWS AWS `yaml:"aws"`
}

// AWS is the `kafka.sasl.aws:` block (AWS_MSK_IAM). Credentials come from the AWS SDK's default chain unless
// Profile or RoleARN says otherwise.
type AWS struct {
	// Region of the MSK cluster (required), e.g. eu-west-1.
	Region string `yaml:"region"`
	// Profile is a shared-config profile (~/.aws/config); empty: the default chain.
	Profile string `yaml:"profile"`
	// RoleARN is a role to assume (STS AssumeRole) with the chain's credentials; SessionName names the session
	// (default "tidemark").
	RoleARN     string `yaml:"role_arn"`
	SessionName string `yaml:"session_name"`
	// Sign makes a token: set by the program (cmd/tidemark sets internal/kafkaconfig/awsmsk.Sign; an application
	// uses latency/instrument/awsmsk), not by the config file, so that only programs that use MSK IAM link the AWS
	// SDK.
	Sign AWSSigner `yaml:"-"`
}

// AWSSigner returns an MSK IAM token (a base64url presigned URL) and when it expires.
type AWSSigner func(ctx context.Context, a AWS) (token string, expiry time.Time, err error)

// OAuth is the `kafka.sasl.oauth:` block: either TokenURL with a client id and secret (an OIDC client-credentials
// grant, RFC 6749 §4.4), or TokenFile (a token some other process keeps fresh).
type OAuth struct {
	// TokenURL is the identity provider's token endpoint.
	TokenURL string `yaml:"token_url"`
	// ClientID and ClientSecret (or ClientSecretFile) authenticate Tidemark to the token endpoint; the file is read
	// at every token request.
	ClientID         string        `yaml:"client_id"`
	ClientSecret     secret.String `yaml:"client_secret"`
	ClientSecretFile string        `yaml:"client_secret_file"`
	// Scopes are requested with the token.
	Scopes []string `yaml:"scopes"`
	// Params are extra form fields of the token request (e.g. audience, resource).
	Params map[string]string `yaml:"params"`
	// Extensions are SASL extensions sent with the token (KIP-342), e.g. Confluent Cloud's logicalCluster and
	// identityPoolId.
	Extensions map[string]string `yaml:"extensions"`
	// TokenFile holds a bearer token (a JWT) written by another process; it is read again at every authentication,
	// so a rotated token is used from the next connection on.
	TokenFile string `yaml:"token_file"`
	// Timeout bounds one token request (default 10 s).
	Timeout time.Duration `yaml:"timeout"`
}

// SetDefaults fills the client id and canonicalizes the mechanism.
func (c *Config) SetDefaults() {
	if c.ClientID == "" {
		c.ClientID = "tidemark"
	}
	c.SASL.Mechanism = strings.ToUpper(strings.TrimSpace(c.SASL.Mechanism))
	if c.SASL.OAuth.Timeout == 0 {
		c.SASL.OAuth.Timeout = 10 * time.Second
	}
}

// Validate is ValidateAt("kafka").
func (c *Config) Validate() error { return c.ValidateAt("kafka") }

// ValidateAt reports every invalid field, each named by its full key under prefix (e.g. "kafka", or
// "clusters[2].kafka" where several clusters are configured). It reads no file.
func (c *Config) ValidateAt(prefix string) error {
	p := &problems{prefix: prefix}
	if len(c.Brokers) == 0 {
		p.bad("brokers", "at least one broker address (host:port) is required")
	}
	for _, b := range c.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			p.bad("brokers", "%q is not host:port", b)
		} else if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			p.bad("brokers", "the port of %q must be a number in [1, 65535]", b)
		}
	}
	if err := c.TLS.Validate(prefix + ".tls"); err != nil {
		p.errs = append(p.errs, err)
	}
	c.SASL.validate(p, c.TLS.Enabled)
	return errors.Join(p.errs...)
}

// problems collects a block's invalid fields, each named by its full key under prefix.
type problems struct {
	prefix string
	errs   []error
}

// bad records that the key under the prefix is invalid, saying why (format and args as fmt.Sprintf).
func (p *problems) bad(key, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s.%s: %s", p.prefix, key, fmt.Sprintf(format, args...)))
}

// validate checks that the sasl: block's settings fit its mechanism: each mechanism's own credentials present and
// no other mechanism's set. tls is whether the connection uses TLS (AWS_MSK_IAM needs it).
func (s *SASL) validate(p *problems, tls bool) {
	mech := strings.ToUpper(s.Mechanism)
	switch mech {
	case "":
		if s.User != "" || s.Password != "" || s.PasswordFile != "" || s.OAuth.set() || s.AWS.Region != "" {
			p.bad("sasl.mechanism", "credentials are set but no mechanism: want one of %s", strings.Join(Mechanisms, ", "))
		}
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		s.validatePassword(p, mech)
	case MechanismAWSMSKIAM:
		s.validateAWS(p, tls)
	case MechanismOAuthBearer:
		if s.User != "" || s.Password != "" || s.PasswordFile != "" {
			p.bad("sasl.user", "OAUTHBEARER takes no user or password: set sasl.oauth")
		}
		s.OAuth.validate(p)
	default:
		p.bad("sasl.mechanism", "%q is not one of %s", s.Mechanism, strings.Join(Mechanisms, ", "))
	}
}

// validatePassword checks a user and password mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, named by mech): a
// user, exactly one of password and password_file, no aws or oauth block.
func (s *SASL) validatePassword(p *problems, mech string) {
	if s.AWS.Region != "" {
		p.bad("sasl.aws", "is for AWS_MSK_IAM, not %s", mech)
	}
	if s.User == "" {
		p.bad("sasl.user", "required with %s", mech)
	}
	if (s.Password == "") == (s.PasswordFile == "") {
		p.bad("sasl.password", "set exactly one of password and password_file with %s", mech)
	}
	if s.OAuth.set() {
		p.bad("sasl.oauth", "is for OAUTHBEARER, not %s", mech)
	}
}

// validateAWS checks AWS_MSK_IAM: a region, profile or role_arn (not both), no user, password or oauth block (the
// AWS credential chain signs), and TLS on (tls).
func (s *SASL) validateAWS(p *problems, tls bool) {
	if s.User != "" || s.Password != "" || s.PasswordFile != "" || s.OAuth.set() {
		p.bad("sasl.aws", "AWS_MSK_IAM takes no user, password or oauth: credentials come from the AWS credential chain")
	}
	if s.AWS.Region == "" {
		p.bad("sasl.aws.region", "required with AWS_MSK_IAM")
	}
	if s.AWS.Profile != "" && s.AWS.RoleARN != "" {
		p.bad("sasl.aws", "set profile or role_arn, not both")
	}
	if !tls {
		p.bad("tls.enabled", "AWS_MSK_IAM needs TLS (MSK's IAM listener is SASL_SSL, port 9098)")
	}
}

// set reports whether any oauth: setting is given.
func (o *OAuth) set() bool {
	return o.TokenURL != "" || o.ClientID != "" || o.ClientSecret != "" || o.ClientSecretFile != "" ||
		len(o.Scopes) > 0 || len(o.Params) > 0 || len(o.Extensions) > 0 || o.TokenFile != ""
}

// validate checks the oauth: block of OAUTHBEARER: either token_url (an http(s) URL) with client_id and exactly one
// of client_secret and client_secret_file, or token_file alone; a timeout not negative.
func (o *OAuth) validate(p *problems) {
	switch {
	case o.TokenFile != "" && o.TokenURL != "":
		p.bad("sasl.oauth", "set token_url (client credentials) or token_file, not both")
	case o.TokenFile != "":
		if o.ClientID != "" || o.ClientSecret != "" || o.ClientSecretFile != "" || len(o.Scopes) > 0 || len(o.Params) > 0 {
			p.bad("sasl.oauth", "client_id, client_secret, scopes and params go with token_url, not token_file")
		}
	case o.TokenURL != "":
		if !strings.HasPrefix(o.TokenURL, "https://") && !strings.HasPrefix(o.TokenURL, "http://") {
			p.bad("sasl.oauth.token_url", "%q is not an http(s) URL", o.TokenURL)
		}
		if o.ClientID == "" {
			p.bad("sasl.oauth.client_id", "required with token_url")
		}
		if (o.ClientSecret == "") == (o.ClientSecretFile == "") {
			p.bad("sasl.oauth.client_secret", "set exactly one of client_secret and client_secret_file")
		}
	default:
		p.bad("sasl.oauth", "OAUTHBEARER needs token_url (with client_id and client_secret) or token_file")
	}
	if o.Timeout < 0 {
		p.bad("sasl.oauth.timeout", "must not be negative, got %s", o.Timeout)
	}
}

// SecurityProtocol is Kafka's name for what the block configures: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
func (c *Config) SecurityProtocol() string {
	switch {
	case c.SASL.Mechanism != "" && c.TLS.Enabled:
		return "SASL_SSL"
	case c.SASL.Mechanism != "":
		return "SASL_PLAINTEXT"
	case c.TLS.Enabled:
		return "SSL"
	}
	return "PLAINTEXT"
}

// Describe says how the block authenticates, for logs and errors (never a secret): "SASL_SSL, SCRAM-SHA-512 as
// tidemark", "SSL, client certificate", "SASL_SSL, OAUTHBEARER from https://idp/token".
func (c *Config) Describe() string {
	parts := []string{c.SecurityProtocol()}
	switch m := strings.ToUpper(c.SASL.Mechanism); m {
	case "":
	case MechanismAWSMSKIAM:
		who := "the AWS credential chain"
		switch {
		case c.SASL.AWS.RoleARN != "":
			who = "role " + c.SASL.AWS.RoleARN
		case c.SASL.AWS.Profile != "":
			who = "profile " + c.SASL.AWS.Profile
		}
		parts = append(parts, m+" in "+c.SASL.AWS.Region+" as "+who)
	case MechanismOAuthBearer:
		if c.SASL.OAuth.TokenFile != "" {
			parts = append(parts, m+" token from "+c.SASL.OAuth.TokenFile)
		} else {
			parts = append(parts, m+" from "+c.SASL.OAuth.TokenURL+" as "+c.SASL.OAuth.ClientID)
		}
	default:
		parts = append(parts, m+" as "+c.SASL.User)
	}
	if c.TLS.CertFile != "" {
		parts = append(parts, "client certificate")
	}
	return strings.Join(parts, ", ")
}
