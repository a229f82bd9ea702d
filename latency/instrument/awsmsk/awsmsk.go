// Package awsmsk lets an instrumented application use Amazon MSK IAM authentication (kafka.sasl.mechanism:
// AWS_MSK_IAM) through latency/instrument's KafkaConfig. It links the AWS SDK, which latency/instrument itself does
// not:
//
//	kc, _ := instrument.LoadKafkaConfig("tidemark.yaml")
//	awsmsk.Enable(&kc)
//	client, _ := instrument.ResolveKafka(kc)
package awsmsk

import (
	"github.com/tidemark/tidemark/internal/kafkaconfig/awsmsk"
	"github.com/tidemark/tidemark/latency/instrument"
)

// Enable makes c's AWS_MSK_IAM mechanism sign tokens with AWS's signer (credentials from the AWS default chain, a
// profile or a role, as c's sasl.aws block says).
func Enable(c *instrument.KafkaConfig) { awsmsk.Enable(c) }
