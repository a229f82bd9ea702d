package kafkaconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/internal/tlsconf"
)

func TestValidate(t *testing.T) {
	base := func() Config { return Config{Brokers: []string{"k:9092"}} }
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string // "" valid; else every line expected, joined by newlines
	}{
		{name: "plaintext", mod: func(*Config) {}},
		{name: "no brokers", mod: func(c *Config) { c.Brokers = nil }, err: "kafka.brokers: at least one broker address (host:port) is required"},
		{name: "broker without port", mod: func(c *Config) { c.Brokers = []string{"k"} }, err: `kafka.brokers: "k" is not host:port`},
		{name: "scram", mod: func(c *Config) { c.SASL = SASL{Mechanism: "scram-sha-512", User: "u", PasswordFile: "/p"} }},
		{name: "unknown mechanism", mod: func(c *Config) { c.SASL.Mechanism = "GSSAPI" },
			err: `kafka.sasl.mechanism: "GSSAPI" is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM`},
		{name: "password without mechanism", mod: func(c *Config) { c.SASL.Password = "x" },
			err: "kafka.sasl.mechanism: credentials are set but no mechanism: want one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM"},
		{name: "scram without user or password", mod: func(c *Config) { c.SASL.Mechanism = "SCRAM-SHA-256" },
			err: "kafka.sasl.user: required with SCRAM-SHA-256\nkafka.sasl.password: set exactly one of password and password_file with SCRAM-SHA-256"},
		{name: "password and file", mod: func(c *Config) { c.SASL = SASL{Mechanism: "PLAIN", User: "u", Password: "p", PasswordFile: "/p"} },
			err: "kafka.sasl.password: set exactly one of password and password_file with PLAIN"},
		{name: "oauth client credentials", mod: func(c *Config) {
			c.SASL = SASL{Mechanism: "OAUTHBEARER", OAuth: OAuth{TokenURL: "https://idp/token", ClientID: "c", ClientSecretFile: "/s"}}
		}},
		{name: "oauth token file", mod: func(c *Config) { c.SASL = SASL{Mechanism: "OAUTHBEARER", OAuth: OAuth{TokenFile: "/t"}} }},
		{name: "oauth with nothing", mod: func(c *Config) { c.SASL.Mechanism = "OAUTHBEARER" },
			err: "kafka.sasl.oauth: OAUTHBEARER needs token_url (with client_id and client_secret) or token_file"},
		{name: "oauth both", mod: func(c *Config) {
			c.SASL = SASL{Mechanism: "OAUTHBEARER", OAuth: OAuth{TokenFile: "/t", TokenURL: "https://idp/token"}}
		}, err: "kafka.sasl.oauth: set token_url (client credentials) or token_file, not both"},
		{name: "oauth url without client", mod: func(c *Config) {
			c.SASL = SASL{Mechanism: "OAUTHBEARER", OAuth: OAuth{TokenURL: "idp/token"}}
		}, err: "kafka.sasl.oauth.token_url: \"idp/token\" is not an http(s) URL\nkafka.sasl.oauth.client_id: required with token_url\n" +
			"kafka.sasl.oauth.client_secret: set exactly one of client_secret and client_secret_file"},
		{name: "oauth settings with scram", mod: func(c *Config) {
			c.SASL = SASL{Mechanism: "SCRAM-SHA-512", User: "u", Password: "p", OAuth: OAuth{TokenFile: "/t"}}
		}, err: "kafka.sasl.oauth: is for OAUTHBEARER, not SCRAM-SHA-512"},
		{name: "msk iam", mod: func(c *Config) {
			c.TLS.Enabled = true
			c.SASL = SASL{Mechanism: "aws_msk_iam", AWS: AWS{Region: "eu-west-1", RoleARN: "arn:aws:iam::1:role/tm"}}
		}},
		{name: "msk iam without region or TLS", mod: func(c *Config) { c.SASL = SASL{Mechanism: "AWS_MSK_IAM", User: "u"} },
			err: "kafka.sasl.aws: AWS_MSK_IAM takes no user, password or oauth: credentials come from the AWS credential chain\n" +
				"kafka.sasl.aws.region: required with AWS_MSK_IAM\nkafka.tls.enabled: AWS_MSK_IAM needs TLS (MSK's IAM listener is SASL_SSL, port 9098)"},
		{name: "tls file without tls", mod: func(c *Config) { c.TLS.CAFile = "/ca" },
			err: "kafka.tls: files or options are set but kafka.tls.enabled is false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c)
			err := c.Validate()
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || err.Error() != tc.err) {
				t.Fatalf("got %v\nwant %s", err, tc.err)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{}, "PLAINTEXT"},
		{Config{TLS: tlsconf.Config{Enabled: true, CertFile: "c", KeyFile: "k"}}, "SSL, client certificate"},
		{Config{SASL: SASL{Mechanism: "SCRAM-SHA-512", User: "app"}}, "SASL_PLAINTEXT, SCRAM-SHA-512 as app"},
		{Config{TLS: tlsconf.Config{Enabled: true}, SASL: SASL{Mechanism: "OAUTHBEARER", OAuth: OAuth{TokenURL: "https://idp/t", ClientID: "c"}}},
			"SASL_SSL, OAUTHBEARER from https://idp/t as c"},
		{Config{TLS: tlsconf.Config{Enabled: true}, SASL: SASL{Mechanism: "AWS_MSK_IAM", AWS: AWS{Region: "us-east-1"}}},
			"SASL_SSL, AWS_MSK_IAM in us-east-1 as the AWS credential chain"},
	} {
		if got := tc.c.Describe(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestSecretsStayInside: a resolved client prints no secret through its config, description or errors.
func TestSecretsStayInside(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("file-secret-77"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Config{Brokers: []string{"127.0.0.1:1"}, SASL: SASL{Mechanism: "PLAIN", User: "u", PasswordFile: pw}}
	cl, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if sc := cl.Sarama(); sc.Net.SASL.Password != "file-secret-77" {
		t.Fatal("password file not read into the sarama config")
	}
	inline := Config{Brokers: []string{"127.0.0.1:1"}, SASL: SASL{Mechanism: "PLAIN", User: "u", Password: "inline-secret-88"}}
	out := fmt.Sprintf("%v %+v %#v %s %s", cl.Config(), inline, inline, cl.Describe(), inline.Describe())
	bad := inline
	bad.SASL.PasswordFile = pw // both set: an error that must not echo either
	_, err = bad.Resolve()
	out += err.Error()
	for _, s := range []string{"file-secret-77", "inline-secret-88"} {
		if strings.Contains(out, s) {
			t.Fatalf("secret %q printed: %s", s, out)
		}
	}
}
