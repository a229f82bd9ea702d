package kafkaconfig

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/tidemark/tidemark/internal/secret"
)

// ErrToken marks a failure to obtain an OAUTHBEARER token (the token endpoint refused or was unreachable, the
// token file is missing or empty): the broker was never asked.
var ErrToken = errors.New("no OAuth token")

// RefreshFraction is how much of a token's lifetime passes before it is refreshed: 0.8, Kafka's own client default
// (sasl.login.refresh.window.factor), so a token is replaced well before it expires, and a token endpoint that
// fails meanwhile leaves a fifth of the lifetime to recover in.
const RefreshFraction = 0.8

func newTokenProvider(o OAuth, now func() time.Time) (sarama.AccessTokenProvider, error) {
	if o.TokenFile != "" {
		p := &fileToken{path: o.TokenFile, ext: o.Extensions}
		if _, err := p.Token(); err != nil {
			return nil, fmt.Errorf("kafka.sasl.oauth.token_file: %w", err)
		}
		return p, nil
	}
	sec, err := secret.Resolve("kafka.sasl.oauth.client_secret", o.ClientSecret, o.ClientSecretFile)
	if err != nil {
		return nil, err
	}
	params := map[string][]string{}
	for k, v := range o.Params {
		params[k] = []string{v}
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	httpc := &http.Client{Timeout: timeout}
	return &refreshingToken{ext: o.Extensions, now: now, fetch: func() (string, time.Time, error) {
		// The secret file is read at every token request, so a rotated client secret needs no restart; while it
		// cannot be read, the secret read at Resolve is used.
		if o.ClientSecretFile != "" {
			if s, err := secret.ReadFile(o.ClientSecretFile); err == nil {
				sec = s
			}
		}
		cc := &clientcredentials.Config{ClientID: o.ClientID, ClientSecret: sec.Reveal(), TokenURL: o.TokenURL,
			Scopes: o.Scopes, EndpointParams: params}
		tok, err := cc.Token(context.WithValue(context.Background(), oauth2.HTTPClient, httpc))
		if err != nil {
			return "", time.Time{}, fmt.Errorf("token endpoint %s: %s", o.TokenURL, tokenErr(err))
		}
		return tok.AccessToken, tok.Expiry, nil
	}}, nil
}

// ErrNoAWSSigner: AWS_MSK_IAM is configured but the program did not link a signer (AWS.Sign is nil).
var ErrNoAWSSigner = errors.New("AWS_MSK_IAM needs a signer: this program does not include one (tidemark does; an application sets kafka.sasl.aws.Sign, e.g. with latency/instrument/awsmsk)")

func newAWSTokenProvider(a AWS, now func() time.Time) (sarama.AccessTokenProvider, error) {
	if a.Sign == nil {
		return nil, fmt.Errorf("kafka.sasl.mechanism: %w", ErrNoAWSSigner)
	}
	return &refreshingToken{now: now, fetch: func() (string, time.Time, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		tok, exp, err := a.Sign(ctx, a)
		if err != nil {
			return "", time.Time{}, fmt.Errorf("AWS MSK IAM signer (region %s): %w", a.Region, err)
		}
		return tok, exp, nil
	}}, nil
}

// refreshingToken caches a token from fetch with refresh before expiry: a token is reused until RefreshFraction of
// its lifetime has passed, then a new one is fetched; if that fails while the old one is still valid, the old one is
// used (and the fetch retried at the next authentication). An OIDC client-credentials grant and the AWS MSK IAM
// signer are its two sources.
type refreshingToken struct {
	fetch func() (token string, expiry time.Time, err error) // zero expiry: unknown
	ext   map[string]string
	now   func() time.Time

	mu        sync.Mutex // guards tok, exp, refreshAt; held across a fetch so concurrent connections share it
	tok       string
	exp       time.Time
	refreshAt time.Time
}

// Token implements sarama.AccessTokenProvider.
func (t *refreshingToken) Token() (*sarama.AccessToken, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.tok != "" && now.Before(t.refreshAt) {
		return &sarama.AccessToken{Token: t.tok, Extensions: t.ext}, nil
	}
	tok, exp, err := t.fetch()
	if err != nil {
		if t.tok != "" && (t.exp.IsZero() || now.Before(t.exp)) {
			return &sarama.AccessToken{Token: t.tok, Extensions: t.ext}, nil
		}
		return nil, fmt.Errorf("%w: %v", ErrToken, err)
	}
	t.tok, t.exp = tok, exp
	if exp.IsZero() { // no lifetime given: fetch again in a minute
		t.refreshAt = now.Add(time.Minute)
	} else {
		t.refreshAt = now.Add(time.Duration(RefreshFraction * float64(exp.Sub(now))))
	}
	return &sarama.AccessToken{Token: tok, Extensions: t.ext}, nil
}

// tokenErr shortens oauth2's errors to the endpoint's answer (its error code and description), which is what a
// user can act on; the raw response body is not repeated.
func tokenErr(err error) string {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		msg := fmt.Sprintf("HTTP %d", re.Response.StatusCode)
		if re.ErrorCode != "" {
			msg += " " + re.ErrorCode
		}
		if re.ErrorDescription != "" {
			msg += ": " + re.ErrorDescription
		}
		return msg
	}
	return err.Error()
}

// fileToken reads a bearer token from a file at every authentication: whoever keeps the file fresh (a sidecar, a
// Kubernetes projected service-account token) rotates it without Tidemark noticing anything but the new content.
type fileToken struct {
	path string
	ext  map[string]string
}

// Token implements sarama.AccessTokenProvider.
func (f *fileToken) Token() (*sarama.AccessToken, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrToken, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return nil, fmt.Errorf("%w: token file %s is empty", ErrToken, f.path)
	}
	return &sarama.AccessToken{Token: tok, Extensions: f.ext}, nil
}
