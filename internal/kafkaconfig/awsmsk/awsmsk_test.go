package awsmsk

import (
	"context"
	"encoding/base64"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/tlsconf"
)

// offlineAWS points the AWS SDK at static test credentials only (no shared files, no instance metadata).
func offlineAWS(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
}

// decode checks the token's shape: base64url of a SigV4-presigned kafka-cluster:Connect URL for region.
func decode(t *testing.T, tok, region, keyID string) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatalf("token is not base64url: %v", err)
	}
	u, err := url.Parse(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Host != "kafka."+region+".amazonaws.com" || q.Get("Action") != "kafka-cluster:Connect" ||
		q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" || q.Get("X-Amz-Expires") != "900" ||
		!strings.HasPrefix(q.Get("X-Amz-Credential"), keyID+"/") || !strings.HasSuffix(q.Get("X-Amz-Credential"), "/"+region+"/kafka-cluster/aws4_request") ||
		!regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(q.Get("X-Amz-Signature")) {
		t.Fatalf("not an MSK IAM presigned URL: %s", raw)
	}
}

func TestSignDefaultChainAndProfile(t *testing.T) {
	offlineAWS(t)
	tok, exp, err := Sign(context.Background(), kafkaconfig.AWS{Region: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	decode(t, tok, "eu-west-1", "AKIDEXAMPLE")
	if d := time.Until(exp); d < 14*time.Minute || d > 16*time.Minute {
		t.Fatalf("expiry in %v, want about 15 min", d)
	}
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[msk]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = c2VjcmV0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	tok, _, err = Sign(context.Background(), kafkaconfig.AWS{Region: "us-east-2", Profile: "msk"})
	if err != nil {
		t.Fatal(err)
	}
	decode(t, tok, "us-east-2", "AKIDPROFILE")
}

// TestMSKTokenOverOAUTHBEARER: the MSK token travels as an OAUTHBEARER token (what MSK's IAM listener expects). The
// local broker validates JWTs, so it refuses this one, with the one clear error: proof the wire path works.
func TestMSKTokenOverOAUTHBEARER(t *testing.T) {
	offlineAWS(t)
	s := testenv.SecureStack(t)
	c := kafkaconfig.Config{Brokers: s.OAuthBrokers[:1], TLS: tlsconf.Config{Enabled: true, CAFile: s.CA()},
		SASL: kafkaconfig.SASL{Mechanism: kafkaconfig.MechanismAWSMSKIAM, AWS: kafkaconfig.AWS{Region: "eu-west-1"}}}
	if _, err := c.Resolve(); !errors.Is(err, kafkaconfig.ErrNoAWSSigner) {
		t.Fatalf("without a signer: %v, want ErrNoAWSSigner", err)
	}
	Enable(&c)
	cl, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	first, err := cl.Sarama().Net.SASL.TokenProvider.Token()
	if err != nil {
		t.Fatal(err)
	}
	decode(t, first.Token, "eu-west-1", "AKIDEXAMPLE")
	if again, _ := cl.Sarama().Net.SASL.TokenProvider.Token(); again.Token != first.Token {
		t.Fatal("the token is signed again at every connection instead of being reused until 80% of its lifetime")
	}
	err = cl.Check(context.Background())
	want := "kafka broker " + s.OAuthBrokers[0] + " (SASL_SSL, AWS_MSK_IAM in eu-west-1 as the AWS credential chain): authentication failed"
	if !errors.Is(err, kafkaconfig.ErrAuthentication) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q...", err, want)
	}
}
