package kafkaconfig

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv/oidcissuer"
)

func newIssuer(t *testing.T) (*oidcissuer.Issuer, *httptest.Server) {
	t.Helper()
	key, err := oidcissuer.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	iss, err := oidcissuer.New("http://"+srv.Listener.Addr().String(), "kafka", key,
		[]oidcissuer.Client{{ID: "app", Secret: "s3cret", TTL: time.Hour, Scope: "kafka"}})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = iss.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return iss, srv
}

// TestOIDCRefresh: a token is reused until 80% of its lifetime has passed, then replaced; a token endpoint that
// fails meanwhile leaves the still-valid token in use, and only an expired one is an error.
func TestOIDCRefresh(t *testing.T) {
	iss, srv := newIssuer(t)
	clock := time.Now()
	now := func() time.Time { return clock }
	p, err := newTokenProvider(OAuth{TokenURL: srv.URL + "/token", ClientID: "app", ClientSecret: "s3cret",
		Extensions: map[string]string{"logicalCluster": "lkc-1"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Token()
	if err != nil {
		t.Fatal(err)
	}
	if first.Extensions["logicalCluster"] != "lkc-1" {
		t.Fatalf("extensions lost: %v", first.Extensions)
	}
	clock = clock.Add(47 * time.Minute) // < 0.8 h: reused
	if tok, _ := p.Token(); tok.Token != first.Token || iss.Issued() != 1 {
		t.Fatalf("token replaced before 80%% of its lifetime (issued %d)", iss.Issued())
	}
	clock = clock.Add(2 * time.Minute) // 49 min > 48 min: refreshed, before the 60 min expiry
	second, err := p.Token()
	if err != nil || second.Token == first.Token || iss.Issued() != 2 {
		t.Fatalf("token not refreshed at 49 of 60 minutes: err %v, issued %d", err, iss.Issued())
	}

	// The issuer's expiry is real time + 1 h, so the second token expires at about T+60 min on this clock and is
	// due for refresh at 49 + 0.8 × 11 = 57.8 min.
	srv.Close()                         // the identity provider goes away
	clock = clock.Add(10 * time.Minute) // T+59: due for refresh, still valid
	if tok, err := p.Token(); err != nil || tok.Token != second.Token {
		t.Fatalf("endpoint down, token still valid: want the old token, got err %v", err)
	}
	clock = clock.Add(2 * time.Minute) // T+61: past the second token's expiry
	if _, err := p.Token(); !errors.Is(err, ErrToken) {
		t.Fatalf("endpoint down, token expired: got %v, want ErrToken", err)
	}
}

// TestTokenFileReread: a static token is read again at every authentication, so a rotated file is used at once.
func TestTokenFileReread(t *testing.T) {
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte("token-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := newTokenProvider(OAuth{TokenFile: f}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := p.Token(); tok.Token != "token-one" {
		t.Fatalf("got %q", tok.Token)
	}
	if err := os.WriteFile(f, []byte("token-two"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, _ := p.Token(); tok.Token != "token-two" {
		t.Fatalf("rotated file not re-read: got %q", tok.Token)
	}
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Token(); !errors.Is(err, ErrToken) {
		t.Fatalf("empty token file: got %v, want ErrToken", err)
	}
	if _, err := newTokenProvider(OAuth{TokenFile: f + ".missing"}, time.Now); err == nil {
		t.Fatal("a missing token file must fail at resolve time")
	}
}

// TestClientSecretFileReread: the client secret file is read at every token request, so a corrected or rotated
// secret is used without a new Resolve.
func TestClientSecretFileReread(t *testing.T) {
	_, srv := newIssuer(t)
	f := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(f, []byte("not-the-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := newTokenProvider(OAuth{TokenURL: srv.URL + "/token", ClientID: "app", ClientSecretFile: f}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Token(); !errors.Is(err, ErrToken) {
		t.Fatalf("wrong secret: got %v, want ErrToken", err)
	}
	if err := os.WriteFile(f, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := p.Token(); err != nil || tok.Token == "" {
		t.Fatalf("after correcting the secret file: %v", err)
	}
}
