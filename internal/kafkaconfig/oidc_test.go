package kafkaconfig_test

import (
	"context"
	"testing"

	"golang.org/x/oauth2/clientcredentials"

	"github.com/tidemark/tidemark/internal/testenv"
)

// fetchToken gets a token for client from the issuer at url (secret: the local stack's).
func fetchToken(t *testing.T, url, client string) string {
	t.Helper()
	cc := clientcredentials.Config{ClientID: client, ClientSecret: testenv.SecureOIDCSecret, TokenURL: url + "/token"}
	tok, err := cc.Token(context.Background())
	if err != nil {
		t.Fatalf("token for %s: %v", client, err)
	}
	return tok.AccessToken
}
