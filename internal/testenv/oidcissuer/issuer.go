// Package oidcissuer is a small OpenID Connect issuer for tests: the client-credentials grant (RFC 6749 §4.4) at
// /token, signed JWT access tokens (RS256), the key set at /jwks (RFC 7517) and discovery at
// /.well-known/openid-configuration. Kafka's OAUTHBEARER listener validates its tokens through the JWKS endpoint
// exactly as it would a production identity provider's (OAuthBearerValidatorCallbackHandler); Tidemark's
// OAUTHBEARER client fetches them with golang.org/x/oauth2/clientcredentials. deploy/local/oidc-issuer serves it.
package oidcissuer

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Client is a registered OAuth client.
type Client struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
	// TTL is the lifetime of the tokens it gets; negative issues tokens that have already expired (negative tests).
	TTL time.Duration `json:"ttl"`
	// Scope is the token's scope claim (space-separated).
	Scope string `json:"scope"`
}

// Issuer signs tokens for its clients.
type Issuer struct {
	url, audience string
	key           *rsa.PrivateKey
	kid           string
	signer        jose.Signer
	clients       map[string]Client
	now           func() time.Time
	issued        atomic.Int64
}

// New returns an issuer whose iss claim is url and aud claim audience, signing with key.
func New(url, audience string, key *rsa.PrivateKey, clients []Client) (*Issuer, error) {
	sum := sha256.Sum256(key.PublicKey.N.Bytes())
	kid := base64.RawURLEncoding.EncodeToString(sum[:8])
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("new signer: %w", err)
	}
	i := &Issuer{url: strings.TrimRight(url, "/"), audience: audience, key: key, kid: kid, signer: signer,
		clients: map[string]Client{}, now: time.Now}
	for _, c := range clients {
		i.clients[c.ID] = c
	}
	return i, nil
}

// NewKey returns a fresh 2048-bit RSA key.
func NewKey() (*rsa.PrivateKey, error) { return rsa.GenerateKey(rand.Reader, 2048) }

// Issued returns how many tokens the token endpoint has issued.
func (i *Issuer) Issued() int64 { return i.issued.Load() }

// Mint returns a signed access token for subject, valid for ttl from now (expired already when ttl < 0).
func (i *Issuer) Mint(subject, scope string, ttl time.Duration) (string, time.Time, error) {
	now := i.now()
	exp := now.Add(ttl)
	iat := now
	if ttl < 0 {
		iat = exp.Add(-time.Minute)
	}
	jti := make([]byte, 9)
	_, _ = rand.Read(jti)
	claims := jwt.Claims{Issuer: i.url, Subject: subject, Audience: jwt.Audience{i.audience},
		IssuedAt: jwt.NewNumericDate(iat), Expiry: jwt.NewNumericDate(exp), ID: base64.RawURLEncoding.EncodeToString(jti)}
	tok, err := jwt.Signed(i.signer).Claims(claims).Claims(map[string]any{"scope": scope}).Serialize()
	return tok, exp, err
}

// Handler serves discovery, the key set and the token endpoint.
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{
			"issuer": i.url, "token_endpoint": i.url + "/token", "jwks_uri": i.url + "/jwks",
			"grant_types_supported":                 []string{"client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post"},
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
			{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: string(jose.RS256), Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", i.token)
	return mux
}

// token is the client-credentials grant; client authentication by HTTP Basic or form fields (RFC 6749 §2.3.1).
func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, oauthError("invalid_request", err.Error()))
		return
	}
	if gt := r.PostForm.Get("grant_type"); gt != "client_credentials" {
		writeJSON(w, http.StatusBadRequest, oauthError("unsupported_grant_type", "only client_credentials: got "+gt))
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	c, known := i.clients[id]
	if !known || c.Secret != secret {
		w.Header().Set("WWW-Authenticate", `Basic realm="token"`)
		writeJSON(w, http.StatusUnauthorized, oauthError("invalid_client", "unknown client or wrong secret"))
		return
	}
	scope := c.Scope
	if s := r.PostForm.Get("scope"); s != "" {
		scope = s
	}
	tok, exp, err := i.Mint(c.ID, scope, c.TTL)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, oauthError("server_error", err.Error()))
		return
	}
	i.issued.Add(1)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "Bearer",
		"expires_in": int64(exp.Sub(i.now()).Round(time.Second) / time.Second), "scope": scope})
}

func oauthError(code, desc string) map[string]string {
	return map[string]string{"error": code, "error_description": desc}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
