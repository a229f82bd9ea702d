// Package awsmsk signs Amazon MSK IAM tokens for kafkaconfig's AWS_MSK_IAM mechanism with AWS's own signer module
// (github.com/aws/aws-msk-iam-sasl-signer-go): a SigV4-presigned kafka-cluster:Connect request, valid 15 minutes,
// sent as an OAUTHBEARER token. It is a package of its own so that only programs using MSK IAM link the AWS SDK.
package awsmsk

import (
	"context"
	"time"

	"github.com/aws/aws-msk-iam-sasl-signer-go/signer"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
)

var _ kafkaconfig.AWSSigner = Sign

// Sign returns a token for a's region, with credentials from a's role (assumed through STS), a's profile, or the
// AWS SDK's default chain (environment, shared config, EKS web identity, ECS/EC2 roles), and its expiry.
func Sign(ctx context.Context, a kafkaconfig.AWS) (string, time.Time, error) {
	var (
		tok   string
		expMs int64
		err   error
	)
	switch {
	case a.RoleARN != "":
		name := a.SessionName
		if name == "" {
			name = "tidemark"
		}
		tok, expMs, err = signer.GenerateAuthTokenFromRole(ctx, a.Region, a.RoleARN, name)
	case a.Profile != "":
		tok, expMs, err = signer.GenerateAuthTokenFromProfile(ctx, a.Region, a.Profile)
	default:
		tok, expMs, err = signer.GenerateAuthToken(ctx, a.Region)
	}
	if err != nil {
		return "", time.Time{}, err
	}
	return tok, time.UnixMilli(expMs), nil
}

// Enable makes c's AWS_MSK_IAM mechanism sign with Sign.
func Enable(c *kafkaconfig.Config) { c.SASL.AWS.Sign = Sign }
