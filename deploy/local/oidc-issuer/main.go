// Command oidc-issuer serves internal/testenv/oidcissuer for the local stack (deploy/local/stack.sh up --secure):
// Kafka's OAUTHBEARER listener reads its JWKS, Tidemark's clients get client-credentials tokens from it.
//
//	oidc-issuer -listen 127.0.0.1:19892 -key STATE/oidc/key.pem -clients STATE/oidc/clients.json -audience kafka
//
// The key file is created on first start and reused after, so a restarted issuer keeps the brokers' cached JWKS
// valid. clients.json is a list of {"id", "secret", "ttl" (nanoseconds), "scope"}.
package main

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tidemark/tidemark/internal/testenv/oidcissuer"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:19892", "address to serve on")
	keyPath := flag.String("key", "", "RSA private key (PEM, PKCS #8); created when missing")
	clientsPath := flag.String("clients", "", "JSON list of clients")
	audience := flag.String("audience", "kafka", "aud claim of every token")
	flag.Parse()
	if err := run(*listen, *keyPath, *clientsPath, *audience); err != nil {
		fmt.Fprintln(os.Stderr, "oidc-issuer:", err)
		os.Exit(1)
	}
}

func run(listen, keyPath, clientsPath, audience string) error {
	if keyPath == "" || clientsPath == "" {
		return errors.New("-key and -clients are required")
	}
	key, err := loadKey(keyPath)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(clientsPath)
	if err != nil {
		return err
	}
	var clients []oidcissuer.Client
	if err := json.Unmarshal(b, &clients); err != nil {
		return fmt.Errorf("%s: %w", clientsPath, err)
	}
	iss, err := oidcissuer.New("http://"+listen, audience, key, clients)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	log.Printf("OIDC issuer http://%s: %d clients, audience %s", listen, len(clients), audience)
	srv := &http.Server{Handler: iss.Handler(), ReadHeaderTimeout: 5 * time.Second}
	return srv.Serve(ln)
}

func loadKey(path string) (*rsa.PrivateKey, error) {
	if b, err := os.ReadFile(path); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s: no PEM block", path)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("%s: not an RSA key", path)
		}
		return rk, nil
	}
	k, err := oidcissuer.NewKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return k, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}
