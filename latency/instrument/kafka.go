package instrument

import (
	"fmt"
	"io"
	"os"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

// KafkaConfig is Tidemark's `kafka:` block (brokers, client_id, tls, sasl), the same type `tidemark run` and
// `tidemark lag` read, so that an instrumented application reaches a secured cluster exactly as Tidemark does: TLS
// with certificate files re-read when they rotate, SASL PLAIN, SCRAM-SHA-256/512, or OAUTHBEARER (OIDC client
// credentials refreshed before expiry, or a token file). docs/collector.md documents every key.
type KafkaConfig = kafkaconfig.Config

// The blocks inside KafkaConfig, for applications that build one in code.
type (
	KafkaTLS   = tlsconf.Config
	KafkaSASL  = kafkaconfig.SASL
	KafkaOAuth = kafkaconfig.OAuth
)

// KafkaClient is a resolved KafkaConfig (its secret and certificate files read). Its Sarama method returns a fresh
// sarama configuration per call (Kafka 4 protocol, TLS, SASL; add interceptors and producer or consumer settings to
// it); Check connects to the bootstrap brokers; Explain turns a connection error into one naming the broker and
// mechanism (a *KafkaError).
type KafkaClient = kafkaconfig.Client

// KafkaError is a failed connection explained: brokers, security protocol and mechanism, kind (errors.Is with
// kafkaconfig's kinds, e.g. an authentication failure), what to check.
type KafkaError = kafkaconfig.Error

// ResolveKafka validates c and reads its files.
func ResolveKafka(c KafkaConfig) (*KafkaClient, error) { return c.Resolve() }

// LoadKafkaConfig reads the kafka: block of the YAML file at path: a `tidemark run` config (its other sections are
// not read) or a file holding only that block. It reads the block with the code `tidemark run` and `tidemark lag`
// use (kafkaconfig.LoadYAML), so a block loads, or fails with the same error, everywhere: an unknown key is an
// error naming it, `tls: true` is TLS with the system roots. Secrets belong in the block's _file keys
// (password_file, client_secret_file, token_file), not in the file itself. The file may be at most 1 MiB.
func LoadKafkaConfig(path string) (KafkaConfig, error) {
	var c KafkaConfig
	f, err := os.Open(path)
	if err != nil {
		return c, fmt.Errorf("read kafka config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKafkaConfigBytes+1))
	if err != nil {
		return c, fmt.Errorf("read kafka config: %w", err)
	}
	if len(b) > maxKafkaConfigBytes {
		return c, fmt.Errorf("kafka config %s: larger than %d bytes", path, maxKafkaConfigBytes)
	}
	if c, err = kafkaconfig.LoadYAML(b); err != nil {
		return c, fmt.Errorf("kafka config %s: %w", path, err)
	}
	return c, nil
}

// maxKafkaConfigBytes caps LoadKafkaConfig's file, as `tidemark run --config` is capped.
const maxKafkaConfigBytes = 1 << 20
