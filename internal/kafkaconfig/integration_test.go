package kafkaconfig_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/tlsconf"
	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

// loadBlock reads the kafka: block of a Tidemark config file (the files stack.sh env names).
func loadBlock(t *testing.T, path string) kafkaconfig.Config {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Kafka kafkaconfig.Config `yaml:"kafka"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Kafka
}

// produceConsume proves a whole client works: create a topic, produce a record, read it back.
func produceConsume(t *testing.T, cfg kafkaconfig.Config) {
	t.Helper()
	cl, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Check(context.Background()); err != nil {
		t.Fatalf("check: %v", err)
	}
	adm, err := sarama.NewClusterAdmin(cfg.Brokers, cl.Sarama())
	if err != nil {
		t.Fatalf("admin: %v", err)
	}
	defer adm.Close()
	topic := testenv.Name(t, "sec")
	if err := adm.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	defer adm.DeleteTopic(topic)
	pc := cl.Sarama()
	pc.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer(cfg.Brokers, pc)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer p.Close()
	var part int32
	var off int64
	for i := 0; ; i++ { // a new topic's leader may take a moment to appear in metadata
		part, off, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("hello " + cfg.Describe())})
		if err == nil || i == 50 || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) && !errors.Is(err, sarama.ErrLeaderNotAvailable) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	c, err := sarama.NewConsumer(cfg.Brokers, cl.Sarama())
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer c.Close()
	pcons, err := c.ConsumePartition(topic, part, off)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	defer pcons.Close()
	select {
	case m := <-pcons.Messages():
		if string(m.Value) != "hello "+cfg.Describe() {
			t.Fatalf("read %q", m.Value)
		}
	case err := <-pcons.Errors():
		t.Fatalf("consume: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no record within 30 s")
	}
}

// TestMechanisms reaches the secure listeners with every mechanism, from the config files stack.sh wrote and
// variations of them.
func TestMechanisms(t *testing.T) {
	s := testenv.SecureStack(t)
	scram := loadBlock(t, s.SCRAMConfig)
	sha256 := scram
	sha256.SASL.Mechanism = kafkaconfig.MechanismSCRAMSHA256
	plain := scram
	plain.SASL.Mechanism = kafkaconfig.MechanismPlain
	oauth := loadBlock(t, s.OAuthConfig)
	mtls := loadBlock(t, s.MTLSConfig)
	for name, cfg := range map[string]kafkaconfig.Config{"SCRAM-SHA-512 (scram.yaml)": scram, "SCRAM-SHA-256": sha256,
		"PLAIN": plain, "OAUTHBEARER client credentials (oauth.yaml)": oauth, "mTLS (mtls.yaml)": mtls} {
		t.Run(name, func(t *testing.T) { produceConsume(t, cfg) })
	}
}

// brokersNamed is how an *Error names the brokers that failed alike.
func brokersNamed(brokers []string) string {
	if len(brokers) == 1 {
		return "kafka broker " + brokers[0]
	}
	return "kafka brokers " + strings.Join(brokers, ", ")
}

// check returns the error Check gives for cfg, which must be an *Error of kind.
func checkFails(t *testing.T, cfg kafkaconfig.Config, kind error) *kafkaconfig.Error {
	t.Helper()
	cl, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	err = cl.Check(context.Background())
	var ke *kafkaconfig.Error
	if !errors.As(err, &ke) || !errors.Is(err, kind) {
		t.Fatalf("got %v, want a kafkaconfig.Error of kind %v", err, kind)
	}
	t.Logf("%v", err)
	return ke
}

// TestNegative: each misconfiguration gives one error naming the broker, the protocol and mechanism, and the kind.
func TestNegative(t *testing.T) {
	s := testenv.SecureStack(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("wrong password", func(t *testing.T) {
		cfg := loadBlock(t, s.SCRAMConfig)
		cfg.SASL.PasswordFile = write("wrong", "not-the-password\n")
		e := checkFails(t, cfg, kafkaconfig.ErrAuthentication)
		// every bootstrap broker refuses the same way: one error naming them all
		want := brokersNamed(cfg.Brokers) + " (SASL_SSL, SCRAM-SHA-512 as tidemark): authentication failed"
		if !strings.HasPrefix(e.Error(), want) || strings.Contains(e.Error(), "not-the-password") {
			t.Fatalf("got %q, want prefix %q and no password", e, want)
		}
	})
	t.Run("expired token", func(t *testing.T) {
		tok := fetchToken(t, s.OIDCURL, "tidemark-expired")
		cfg := loadBlock(t, s.OAuthConfig)
		cfg.SASL.OAuth = kafkaconfig.OAuth{TokenFile: write("expired.jwt", tok)}
		e := checkFails(t, cfg, kafkaconfig.ErrAuthentication)
		if !strings.Contains(e.Error(), "(SASL_SSL, OAUTHBEARER token from ") || strings.Contains(e.Error(), tok) {
			t.Fatalf("got %q", e)
		}
	})
	t.Run("wrong client secret", func(t *testing.T) {
		cfg := loadBlock(t, s.OAuthConfig)
		cfg.SASL.OAuth.ClientSecretFile = write("wrong-secret", "nope")
		e := checkFails(t, cfg, kafkaconfig.ErrToken)
		if !strings.Contains(e.Error(), "HTTP 401 invalid_client") {
			t.Fatalf("got %q", e)
		}
	})
	t.Run("untrusted broker certificate", func(t *testing.T) {
		cfg := loadBlock(t, s.SCRAMConfig)
		cfg.TLS.CAFile = write("other-ca.pem", string(tlstest.NewCA(t, "other").PEM))
		checkFails(t, cfg, kafkaconfig.ErrUntrustedServer)
	})
	t.Run("untrusted client certificate", func(t *testing.T) {
		cfg := loadBlock(t, s.MTLSConfig)
		rogue := tlstest.NewCA(t, "rogue").Issue(t, "rogue-client", time.Hour)
		cfg.TLS.CertFile, cfg.TLS.KeyFile = write("rogue.pem", string(rogue.CertPEM)), write("rogue.key", string(rogue.KeyPEM))
		checkFails(t, cfg, kafkaconfig.ErrClientCertificate)
	})
	t.Run("plaintext client on the TLS port", func(t *testing.T) {
		cfg := loadBlock(t, s.SCRAMConfig)
		cfg.TLS = tlsconf.Config{}
		e := checkFails(t, cfg, kafkaconfig.ErrSecurityProtocol)
		if !strings.Contains(e.Error(), "(SASL_PLAINTEXT, SCRAM-SHA-512 as tidemark)") || !strings.Contains(e.Error(), "a TLS listener (kafka.tls.enabled is false)") {
			t.Fatalf("got %q", e)
		}
	})
	t.Run("TLS client on the plaintext port", func(t *testing.T) {
		cfg := loadBlock(t, s.MTLSConfig)
		cfg.Brokers = testenv.Kafka(t)
		checkFails(t, cfg, kafkaconfig.ErrSecurityProtocol)
	})
}

// TestRotationUnderRunningClient rotates the client certificate and the CA bundle under one resolved client, as
// cert-manager or a Kubernetes Secret update would under a running Tidemark: each new connection uses the files as
// they are now, with no new Resolve.
func TestRotationUnderRunningClient(t *testing.T) {
	s := testenv.SecureStack(t)
	dir := t.TempDir()
	cert, key := s.ClientCert()
	files := map[string]string{"ca.pem": s.CA(), "tls.crt": cert, "tls.key": key}
	install := func(name string, data []byte) { tlstest.WriteFile(t, filepath.Join(dir, name), data) }
	for name, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		install(name, b)
	}
	good := func(name string) []byte { b, _ := os.ReadFile(files[name]); return b }
	cfg := loadBlock(t, s.MTLSConfig)
	cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	cl, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.Check(ctx); err != nil {
		t.Fatalf("before rotation: %v", err)
	}

	rogue := tlstest.NewCA(t, "rogue").Issue(t, "rogue-client", time.Hour)
	install("tls.crt", rogue.CertPEM)
	install("tls.key", rogue.KeyPEM)
	if err := cl.Check(ctx); !errors.Is(err, kafkaconfig.ErrClientCertificate) {
		t.Fatalf("after rotating to an untrusted client certificate: %v, want ErrClientCertificate", err)
	}
	install("tls.crt", good("tls.crt"))
	install("tls.key", good("tls.key"))
	if err := cl.Check(ctx); err != nil {
		t.Fatalf("after rotating the client certificate back: %v", err)
	}

	install("ca.pem", tlstest.NewCA(t, "other").PEM)
	if err := cl.Check(ctx); !errors.Is(err, kafkaconfig.ErrUntrustedServer) {
		t.Fatalf("after rotating to another CA: %v, want ErrUntrustedServer", err)
	}
	install("ca.pem", good("ca.pem"))
	if err := cl.Check(ctx); err != nil {
		t.Fatalf("after rotating the CA back: %v", err)
	}
}

// TestTokenRefreshOnLiveConnection keeps one connection to the OAUTHBEARER listener busy past the expiry of the
// token it logged in with. The listener gives each session the token's remaining lifetime and closes a connection
// used past it (connections.max.reauth.ms, KIP-368), so the connection survives only if sarama re-authenticates
// in time and the token source then hands it a token fetched anew, before the old one expired. The local issuer's
// client tidemark-short gets 20 s tokens; the test counts the token requests through a proxy in front of it.
func TestTokenRefreshOnLiveConnection(t *testing.T) {
	s := testenv.SecureStack(t)
	t.Parallel() // it waits for a real token to expire (about 20 s): let the package's other tests run meanwhile
	issuer, err := url.Parse(s.OIDCURL)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex // guards expiries
		expiries []time.Time
	)
	proxy := httputil.NewSingleHostReverseProxy(issuer)
	proxy.ModifyResponse = func(r *http.Response) error { // note each token's exp claim (what the broker enforces)
		if r.Request.URL.Path != "/token" || r.StatusCode != http.StatusOK {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		exp, err := jwtExpiry(body)
		if err != nil {
			return err
		}
		mu.Lock()
		expiries = append(expiries, exp)
		mu.Unlock()
		return nil
	}
	srv := httptest.NewServer(proxy)
	defer srv.Close()
	tokens := func() []time.Time { mu.Lock(); defer mu.Unlock(); return slices.Clone(expiries) }

	cfg := loadBlock(t, s.OAuthConfig)
	cfg.SASL.OAuth.TokenURL, cfg.SASL.OAuth.ClientID = srv.URL+"/token", "tidemark-short"
	cl, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	sc := cl.Sarama()
	b := sarama.NewBroker(cfg.Brokers[0])
	if err := b.Open(sc); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	metadata := func() error {
		_, err := b.GetMetadata(sarama.NewMetadataRequest(sc.Version, []string{}))
		return err
	}
	if err := metadata(); err != nil {
		t.Fatalf("first request: %v", err)
	}
	first := tokens()
	if len(first) != 1 {
		t.Fatalf("%d token requests for one login, want 1", len(first))
	}
	if life := time.Until(first[0]); life <= 0 || life > time.Minute {
		t.Fatalf("the issuer's tidemark-short token lives %v: want a short positive lifetime (deploy/local/secure.sh)", life)
	}
	// A request a second, on the same connection, until it has been used past the first token's expiry. The pace
	// is the workload; the condition is the real clock passing a real token's expiry.
	requests := 0
	for time.Now().Before(first[0].Add(time.Second)) {
		time.Sleep(time.Second)
		requests++
		if err := metadata(); err != nil {
			t.Fatalf("request %d on the live connection, %v after the first token's expiry: %v (tokens fetched: %d)",
				requests, time.Since(first[0]).Round(time.Millisecond), err, len(tokens()))
		}
	}
	got := tokens()
	if len(got) < 2 {
		t.Fatalf("the connection outlived its token with %d token request(s): no refresh (is connections.max.reauth.ms set on the listener?)", len(got))
	}
	if !got[1].After(first[0]) {
		t.Fatalf("the refreshed token expires at %v, not after the first (%v)", got[1], first[0])
	}
	if ok, err := b.Connected(); !ok {
		t.Fatalf("the connection was closed: %v", err)
	}
}

// jwtExpiry returns the exp claim of the access token in a token endpoint's JSON answer.
func jwtExpiry(body []byte) (time.Time, error) {
	var resp struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return time.Time{}, err
	}
	parts := strings.Split(resp.AccessToken, ".")
	if len(parts) != 3 {
		return time.Time{}, fmt.Errorf("access token is not a JWT (%d parts)", len(parts))
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, err
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return time.Time{}, err
	}
	return time.Unix(claims.Exp, 0), nil
}

// TestPasswordRotationUnderRunningClient changes a SCRAM user's password in Kafka and then in the password file, as
// a rotation of a Kubernetes Secret or Strimzi KafkaUser would under a running Tidemark: the resolved client's
// next connection logs in with the new password, with no new Resolve.
func TestPasswordRotationUnderRunningClient(t *testing.T) {
	s := testenv.SecureStack(t)
	adm, err := sarama.NewClusterAdmin(testenv.Kafka(t), testenv.SaramaConfig(t)) // the PLAINTEXT listener
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	user := testenv.Name(t, "u")
	setPassword := func(pw string) {
		t.Helper()
		res, err := adm.UpsertUserScramCredentials([]sarama.AlterUserScramCredentialsUpsert{{Name: user,
			Mechanism: sarama.SCRAM_MECHANISM_SHA_512, Iterations: 4096, Salt: []byte(pw + "-salt"), Password: []byte(pw)}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.ErrorCode != sarama.ErrNoError {
				t.Fatalf("set the SCRAM password of %s: %v", user, r.ErrorCode)
			}
		}
	}
	defer adm.DeleteUserScramCredentials([]sarama.AlterUserScramCredentialsDelete{{Name: user, Mechanism: sarama.SCRAM_MECHANISM_SHA_512}})
	pwFile := filepath.Join(t.TempDir(), "password")
	writePassword := func(pw string) { tlstest.WriteFile(t, pwFile, []byte(pw+"\n")) }

	cfg := loadBlock(t, s.SCRAMConfig)
	cfg.SASL.User, cfg.SASL.PasswordFile = user, pwFile
	setPassword("first-password-1")
	writePassword("first-password-1")
	cl, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The new user reaches every broker through the metadata log: wait until a login succeeds.
	waitCheck(t, "the new user's first login", func() bool { return cl.Check(ctx) == nil })

	setPassword("second-password-2")
	// Every broker has the new credential once the old password fails everywhere (Check succeeds at any one).
	waitCheck(t, "the old password to be refused", func() bool { return errors.Is(cl.Check(ctx), kafkaconfig.ErrAuthentication) })
	writePassword("second-password-2")
	if err := cl.Check(ctx); err != nil {
		t.Fatalf("after rotating the password file: %v", err)
	}
}

// waitCheck polls cond (each call is a real login against the cluster) until it holds, failing after a minute.
func waitCheck(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, time.Minute, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}
