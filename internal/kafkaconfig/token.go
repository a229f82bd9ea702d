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
	cc := &clientcredentials.Config{ClientID: o.ClientID, ClientSecret: sec.Reveal(), TokenURL: o.TokenURL,
		Scopes: o.Scopes, EndpointParams: params}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &oidcToken{cc: cc, url: o.TokenURL, ext: o.Extensions, now: now,
		httpc: &http.Client{Timeout: timeout}}, nil
}

// oidcToken is an OIDC client-credentials token source with refresh before expiry: a token is reused until
// RefreshFraction of its lifetime has passed, then a new one is fetched; if that fails while the old one is still
// valid, the old one is used (and the fetch retried at the next authentication).
type oidcToken struct {
	cc    *clientcredentials.Config
	url   string
	ext   map[string]string
	now   func() time.Time
	httpc *http.Client

	mu        sync.Mutex // guards tok, refreshAt; held across a fetch so concurrent connections share it
	tok       *oauth2.Token
	refreshAt time.Time
}

// Token implements sarama.AccessTokenProvider.
func (t *oidcToken) Token() (*sarama.AccessToken, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.tok != nil && now.Before(t.refreshAt) {
		return &sarama.AccessToken{Token: t.tok.AccessToken, Extensions: t.ext}, nil
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, t.httpc)
	tok, err := t.cc.Token(ctx)
	if err != nil {
		if t.tok != nil && (t.tok.Expiry.IsZero() || now.Before(t.tok.Expiry)) {
			return &sarama.AccessToken{Token: t.tok.AccessToken, Extensions: t.ext}, nil
		}
		return nil, fmt.Errorf("%w: token endpoint %s: %v", ErrToken, t.url, tokenErr(err))
	}
	t.tok = tok
	if tok.Expiry.IsZero() { // no expires_in: fetch again in a minute
		t.refreshAt = now.Add(time.Minute)
	} else {
		t.refreshAt = now.Add(time.Duration(RefreshFraction * float64(tok.Expiry.Sub(now))))
	}
	return &sarama.AccessToken{Token: tok.AccessToken, Extensions: t.ext}, nil
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
