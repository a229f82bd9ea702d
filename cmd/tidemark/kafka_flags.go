package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/confload"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
)

// registerKafkaFlags adds the kafka: block's settings as flags named by their keys (--kafka.sasl.mechanism, ...),
// for `tidemark run` and the one-shot lag commands alike. Secrets have no inline flag (a command line is visible to
// every user of the machine): give them as files (--kafka.sasl.password_file) or through the environment
// (TIDEMARK_KAFKA__SASL__PASSWORD, TIDEMARK_KAFKA__SASL__OAUTH__CLIENT_SECRET).
func registerKafkaFlags(f *pflag.FlagSet) {
	f.String("kafka.client_id", "", "client id sent to the brokers")
	f.Bool("kafka.tls.enabled", false, "connect with TLS")
	f.String("kafka.tls.ca_file", "", "PEM bundle of the CA that signed the brokers' certificates (default: system roots)")
	f.String("kafka.tls.cert_file", "", "client certificate (PEM) for mutual TLS")
	f.String("kafka.tls.key_file", "", "client certificate's private key (PEM)")
	f.String("kafka.tls.server_name", "", "name the brokers' certificates must carry, when not the dialled host")
	f.String("kafka.tls.min_version", "", "oldest TLS version accepted: 1.2 (default) or 1.3")
	f.Bool("kafka.tls.insecure_skip_verify", false, "do not verify the brokers' certificates (tests only)")
	f.String("kafka.sasl.mechanism", "", "SASL mechanism: "+strings.Join(kafkaconfig.Mechanisms, ", "))
	f.String("kafka.sasl.user", "", "SASL user (PLAIN, SCRAM)")
	f.String("kafka.sasl.password_file", "", "file holding the SASL password (or env TIDEMARK_KAFKA__SASL__PASSWORD)")
	f.String("kafka.sasl.oauth.token_url", "", "OAUTHBEARER: the identity provider's token endpoint (client credentials)")
	f.String("kafka.sasl.oauth.client_id", "", "OAUTHBEARER: client id at the token endpoint")
	f.String("kafka.sasl.oauth.client_secret_file", "", "OAUTHBEARER: file holding the client secret (or env TIDEMARK_KAFKA__SASL__OAUTH__CLIENT_SECRET)")
	f.StringSlice("kafka.sasl.oauth.scopes", nil, "OAUTHBEARER: scopes to request")
	f.String("kafka.sasl.oauth.token_file", "", "OAUTHBEARER: file holding a token another process keeps fresh (read at every login)")
	f.String("kafka.sasl.aws.region", "", "AWS_MSK_IAM: the cluster's AWS region")
	f.String("kafka.sasl.aws.profile", "", "AWS_MSK_IAM: shared-config profile (default: the AWS credential chain)")
	f.String("kafka.sasl.aws.role_arn", "", "AWS_MSK_IAM: role to assume")
}

// loadKafkaConfig returns the kafka: block for the one-shot commands: the kafka: block of the file at path (a
// `tidemark run` config; its other sections are not read), then the environment (TIDEMARK_KAFKA_BROKERS,
// TIDEMARK_KAFKA__*), then the changed --kafka.* flags and --brokers. Without any broker it is 127.0.0.1:9092; the
// client id defaults to clientID.
func loadKafkaConfig(path string, fs *pflag.FlagSet, environ func() []string, clientID string) (kafkaconfig.Config, error) {
	c, _, err := loadClusterKafkaConfig(path, fs, environ, clientID, "", false)
	return c, err
}

// loadClusterKafkaConfig is loadKafkaConfig for a config that may list clusters: (the --cluster flag of the lag
// commands). With a clusters: list the kafka: block of the entry named cluster is used (when named is false and
// the list has one entry, that one), then the changed --kafka.* flags and --brokers over it; the name returned is
// the entry's. Without one the top-level kafka: block is used and the name is cluster as given.
func loadClusterKafkaConfig(path string, fs *pflag.FlagSet, environ func() []string, clientID, cluster string, named bool) (kafkaconfig.Config, string, error) {
	var c kafkaconfig.Config
	key := func(name string) string {
		switch {
		case name == "brokers":
			return "kafka.brokers"
		case strings.HasPrefix(name, "kafka."):
			return name
		}
		return "" // the command's own flags are not configuration keys
	}
	k, err := sources.Load(path, fs, environ, key)
	if err != nil {
		return c, cluster, err
	}
	if k.Exists("clusters") {
		var cls []clusterConfig
		if err := confload.Decode(k, "clusters", &cls); err != nil {
			return c, cluster, err
		}
		var names []string
		var pick *clusterConfig
		for i := range cls {
			names = append(names, cls[i].Name)
			if (named && cls[i].Name == cluster) || (!named && len(cls) == 1) {
				pick = &cls[i]
			}
		}
		if pick == nil {
			if named {
				return c, cluster, fmt.Errorf("--cluster %q: %s lists no such cluster (it has %s)", cluster, path, strings.Join(names, ", "))
			}
			return c, cluster, fmt.Errorf("%s lists clusters %s: choose one with --cluster", path, strings.Join(names, ", "))
		}
		c, cluster = pick.Kafka, pick.Name
		// the flags still win: decoded over the entry's block, only the keys they set
		kf, err := sources.Load("", fs, func() []string { return nil }, key)
		if err != nil {
			return c, cluster, err
		}
		if kf.Exists("kafka") {
			if err := confload.Decode(kf, "kafka", &c); err != nil {
				return c, cluster, err
			}
		}
	} else if err := confload.Decode(k, "kafka", &c); err != nil {
		return c, cluster, err
	}
	if len(c.Brokers) == 0 {
		c.Brokers = []string{"127.0.0.1:9092"}
	}
	if c.ClientID == "" {
		c.ClientID = clientID
	}
	c.SetDefaults()
	return c, cluster, c.Validate()
}
