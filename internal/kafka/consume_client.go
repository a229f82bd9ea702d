package kafka

import "github.com/tidemark/tidemark/internal/kafkaconfig"

// ClientConfig is how Tidemark's consumers, producers and cluster reader reach the cluster: the `kafka:` block
// (brokers, TLS, SASL), defined in internal/kafkaconfig so that latency/instrument can offer the same block to
// applications without importing this package.
type ClientConfig = kafkaconfig.Config
