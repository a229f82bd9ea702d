package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/IBM/sarama"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
	"github.com/tidemark/tidemark/latency/instrument"
)

// syncBuffer is a log sink safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secureDaemon is `tidemark run` in-process with a mechanism's config file as stack.sh wrote it, plus environment
// overrides for the test's own topics, groups and database (the way a deployment would override a shared file).
type secureDaemon struct {
	conn   driver.Conn // the test's database, for checking what the daemon wrote
	base   string      // http://addr
	logs   *syncBuffer // everything it logged
	stop   func() error
	topics struct{ orders, receipts, probe, dlq string }
}

func startSecureDaemon(t *testing.T, cfgPath string, extraEnv ...string) *secureDaemon {
	t.Helper()
	db, conn := testenv.ClickHouseDB(t)
	d := &secureDaemon{conn: conn, logs: &syncBuffer{}}
	d.topics.orders = testenv.CreateTopic(t, "orders", testenv.Topic{Partitions: 2})
	d.topics.receipts = testenv.CreateTopic(t, "rc", testenv.Topic{Partitions: 2}) // the app may write before the daemon connects
	d.topics.probe = testenv.Name(t, "probe")
	d.topics.dlq = testenv.Name(t, "dlq")
	httpAddr := testenv.FreeAddr(t)
	env := append([]string{
		"TIDEMARK_CLICKHOUSE__DATABASE=" + db,
		"TIDEMARK_CLICKHOUSE__WRITER__FLUSH_INTERVAL=100ms",
		"TIDEMARK_COLLECTOR__DEAD_LETTER_TOPIC=" + d.topics.dlq,
		"TIDEMARK_COLLECTOR__RECEIPTS__ENABLED=true", "TIDEMARK_COLLECTOR__RECEIPTS__TOPIC=" + d.topics.receipts,
		"TIDEMARK_COLLECTOR__RECEIPTS__GROUP=" + testenv.Name(t, "rg"), "TIDEMARK_COLLECTOR__RECEIPTS__PARTITIONS=2",
		"TIDEMARK_COLLECTOR__PROBE__ENABLED=true", "TIDEMARK_COLLECTOR__PROBE__TOPIC=" + d.topics.probe,
		"TIDEMARK_COLLECTOR__PROBE__GROUP=" + testenv.Name(t, "pg"), "TIDEMARK_COLLECTOR__PROBE__INTERVAL=200ms",
		"TIDEMARK_COLLECTOR__TAP__ENABLED=true", "TIDEMARK_COLLECTOR__TAP__TOPICS=" + d.topics.orders,
		"TIDEMARK_COLLECTOR__TAP__GROUP=" + testenv.Name(t, "tg"), "TIDEMARK_COLLECTOR__TAP__FROM_BEGINNING=true",
		"TIDEMARK_LAG__POLL_INTERVAL=1s",
		"TIDEMARK_HTTP__LISTEN=" + httpAddr,
	}, extraEnv...)
	cfg, err := loadConfig(cfgPath, nil, func() []string { return env })
	if err != nil {
		t.Fatal(err)
	}
	d.base = "http://" + httpAddr
	d.stop = runInTest(t, cfg, slog.New(slog.NewTextHandler(d.logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	return d
}

// app is an instrumented application that reaches the cluster through instrument's helper and the same config file:
// it produces n records into topic with the producer interceptor, consumes them and sends a receipt for each.
func runApp(t *testing.T, cfgPath, topic, receipts string, n int) {
	t.Helper()
	kc, err := instrument.LoadKafkaConfig(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := instrument.ResolveKafka(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	pc := cl.Sarama()
	pc.Producer.Return.Successes = true
	pc.Producer.Interceptors = []sarama.ProducerInterceptor{instrument.NewProducerInterceptor(instrument.ProducerConfig{Host: "app-host"})}
	prod, err := sarama.NewSyncProducer(kc.Brokers, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := 0; i < n; i++ {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	ec := cl.Sarama()
	ec.Producer.Return.Successes = true
	ap, err := sarama.NewAsyncProducer(kc.Brokers, ec)
	if err != nil {
		t.Fatal(err)
	}
	em := instrument.NewEmitter(ap, instrument.EmitterConfig{Topic: receipts, Linger: 20 * time.Millisecond})
	rc, err := instrument.NewConsumer(instrument.ConsumerConfig{Group: "secure-app", Host: "app-host"}, em)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := sarama.NewConsumer(kc.Brokers, cl.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := 0
	for _, p := range []int32{0, 1} {
		pcons, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		hw := pcons.HighWaterMarkOffset()
		for hw > 0 {
			select {
			case m := <-pcons.Messages():
				rc.Receive(m)
				rc.Done(m)
				got++
				if m.Offset+1 >= hw {
					hw = 0
				}
			case err := <-pcons.Errors():
				t.Fatal(err)
			case <-time.After(30 * time.Second):
				t.Fatalf("partition %d: no record within 30 s", p)
			}
		}
		_ = pcons.Close()
	}
	em.Close()
	if got != n || em.Stats().Dropped != 0 {
		t.Fatalf("consumed %d of %d, dropped %d receipts", got, n, em.Stats().Dropped)
	}
}

// TestSecureRun runs `tidemark run` with each mechanism's config file (SCRAM-SHA-512, OAUTHBEARER with client
// credentials, mTLS; ClickHouse over TLS with a client certificate and a password file): all three collector paths
// and the lag exporter (with its election's lease group) work, and an application instrumented through latency/instrument with the same file is
// measured end to end.
func TestSecureRun(t *testing.T) {
	s := testenv.SecureStack(t)
	for name, path := range map[string]string{"scram": s.SCRAMConfig, "oauth": s.OAuthConfig, "mtls": s.MTLSConfig} {
		t.Run(name, func(t *testing.T) {
			// The lag exporter's election on too: its lease group logs in through the same kafka: block.
			d := startSecureDaemon(t, path, "TIDEMARK_LAG__ELECTION__ENABLED=true", "TIDEMARK_LAG__ELECTION__GROUP="+testenv.Name(t, "elect"),
				"TIDEMARK_LAG__ELECTION__TOPIC="+testenv.Name(t, "lease"), "TIDEMARK_LAG__ELECTION__SESSION_TIMEOUT=6s")
			waitStatus(t, d.base+"/readyz", http.StatusOK, 90*time.Second)
			const n = 40
			runApp(t, path, d.topics.orders, d.topics.receipts, n)
			conn := d.conn
			if got := waitRows(t, conn, "SELECT count() FROM latency_events FINAL WHERE source = 'receipt'", n, 60*time.Second); got != n {
				t.Fatalf("receipts path stored %d rows, want %d", got, n)
			}
			if got := waitRows(t, conn, "SELECT count() FROM latency_events FINAL WHERE source = 'tap'", n, 60*time.Second); got != n {
				t.Fatalf("tap path stored %d rows, want %d", got, n)
			}
			if got := waitRows(t, conn, "SELECT count() FROM probe_events WHERE status = 'ok'", 3, 60*time.Second); got < 3 {
				t.Fatalf("probe path stored %d answered probes, want >= 3", got)
			}
			if got := waitRows(t, conn, "SELECT count() FROM lag_snapshots WHERE topic = '"+d.topics.orders+"'", 1, 60*time.Second); got < 1 {
				t.Fatalf("lag exporter wrote no snapshot of %s", d.topics.orders)
			}
			// Snapshots are written by the active replica only: the lease was taken over SASL/TLS.
			if v := scrape(strings.TrimPrefix(d.base, "http://"), "tidemark_lag_exporter_active{"); len(v) != 1 || v[0] != "1" {
				t.Fatalf("tidemark_lag_exporter_active = %v, want one series at 1", v)
			}
			if err := d.stop(); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			if !strings.Contains(d.logs.String(), "kafka_security=") {
				t.Fatalf("the start log does not say how Kafka is reached:\n%s", d.logs)
			}
			assertNoSecrets(t, d.logs.String())
		})
	}
}

// secrets are the values no log, error, /readyz answer or config dump may contain.
func secrets(t *testing.T) []string {
	return []string{testenv.SecureSCRAMPass, testenv.SecureOIDCSecret, "wrong-password-123"}
}

func assertNoSecrets(t *testing.T, texts ...string) {
	t.Helper()
	for _, txt := range texts {
		for _, s := range secrets(t) {
			if strings.Contains(txt, s) {
				t.Fatalf("secret %q leaked into:\n%s", s, txt)
			}
		}
		// A JWT (three base64url parts) is a bearer token: it must not be printed either.
		if jwt := regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.`); jwt.MatchString(txt) {
			t.Fatalf("a bearer token leaked into:\n%s", txt)
		}
	}
}

// TestSecureRunRefused: a wrong password, an expired token, an untrusted broker certificate, a password file not
// mounted yet and a plaintext client on the TLS port each keep `tidemark run` alive and not ready, with /readyz
// giving one reason naming the broker and the mechanism (the missing file: its key and path), and the connection
// retried with growing backoff. Where the fix is a file (the password, the token, the CA bundle), correcting it
// makes the same process ready without a restart, and the receipts written meanwhile are all stored: nothing was
// lost.
func TestSecureRunRefused(t *testing.T) {
	s := testenv.SecureStack(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	expired := mintToken(t, s, "tidemark-expired")
	cert, key := s.ClientCert()
	// kafkaFile writes a run config: the kafka: block given, ClickHouse over the plaintext port.
	kafkaFile := func(name, kafka string) string {
		return write(name, kafka+"clickhouse: {addr: ["+testenv.ClickHouseAddr(t)+"]}\n")
	}
	for _, tc := range []struct {
		name   string
		cfg    string
		reason string // /readyz must contain it
		fix    func()
		good   string // a config the application uses to write receipts meanwhile
	}{
		{name: "wrong password",
			cfg: kafkaFile("scram.yaml", fmt.Sprintf("kafka: {brokers: [%s], tls: {enabled: true, ca_file: %s}, "+
				"sasl: {mechanism: SCRAM-SHA-512, user: tidemark, password_file: %s}}\n", s.SASLBrokers[0], s.CA(), write("pw", "wrong-password-123\n"))),
			reason: "kafka broker " + s.SASLBrokers[0] + " (SASL_SSL, SCRAM-SHA-512 as tidemark): authentication failed",
			fix:    func() { write("pw", testenv.SecureSCRAMPass+"\n") }, good: s.SCRAMConfig},
		{name: "expired token",
			cfg: kafkaFile("oauth.yaml", fmt.Sprintf("kafka: {brokers: [%s], tls: {enabled: true, ca_file: %s}, "+
				"sasl: {mechanism: OAUTHBEARER, oauth: {token_file: %s}}}\n", s.OAuthBrokers[0], s.CA(), write("token", expired))),
			reason: "kafka broker " + s.OAuthBrokers[0] + " (SASL_SSL, OAUTHBEARER token from " + filepath.Join(dir, "token") + "): authentication failed",
			fix:    func() { write("token", mintToken(t, s, "tidemark")) }, good: s.OAuthConfig},
		{name: "untrusted broker certificate",
			cfg: kafkaFile("mtls.yaml", fmt.Sprintf("kafka: {brokers: [%s], tls: {enabled: true, ca_file: %s, cert_file: %s, key_file: %s}}\n",
				s.MTLSBrokers[0], write("ca.pem", string(tlstest.NewCA(t, "another CA").PEM)), cert, key)),
			reason: "kafka broker " + s.MTLSBrokers[0] + " (SSL, client certificate): broker certificate not trusted",
			fix:    func() { write("ca.pem", string(mustRead(t, s.CA()))) }, good: s.MTLSConfig},
		{name: "password file missing (Secret not mounted yet)",
			cfg: kafkaFile("scram-missing.yaml", fmt.Sprintf("kafka: {brokers: [%s], tls: {enabled: true, ca_file: %s}, "+
				"sasl: {mechanism: SCRAM-SHA-512, user: tidemark, password_file: %s}}\n", s.SASLBrokers[0], s.CA(), filepath.Join(dir, "mounted", "password"))),
			reason: "kafka.sasl.password_file: read secret file: open " + filepath.Join(dir, "mounted", "password") + ": no such file or directory",
			fix: func() {
				if err := os.MkdirAll(filepath.Join(dir, "mounted"), 0o700); err != nil {
					t.Fatal(err)
				}
				write(filepath.Join("mounted", "password"), testenv.SecureSCRAMPass+"\n")
			}, good: s.SCRAMConfig},
		{name: "plaintext client on the TLS port",
			cfg: kafkaFile("plain.yaml", fmt.Sprintf("kafka: {brokers: [%s], sasl: {mechanism: SCRAM-SHA-512, user: tidemark, password_file: %s}}\n",
				s.SASLBrokers[0], write("pw2", testenv.SecureSCRAMPass))),
			reason: "kafka broker " + s.SASLBrokers[0] + " (SASL_PLAINTEXT, SCRAM-SHA-512 as tidemark): security protocol mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := startSecureDaemon(t, tc.cfg)
			waitStatus(t, d.base+"/healthz", http.StatusOK, 10*time.Second)
			var body string
			deadline := time.Now().Add(30 * time.Second)
			for {
				code, b := get(d.base + "/readyz")
				if code == http.StatusOK {
					t.Fatalf("/readyz 200 with %s", tc.name)
				}
				if strings.Contains(b, tc.reason) {
					body = b
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz %d %q, want it to contain %q", code, b, tc.reason)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// Retried with growing backoff: three failed attempts in the log. The waits are jittered (±50% around
			// 0.5 s, 1 s, 2 s), so only the third is sure to exceed the first: at least 1 s against at most 0.75 s.
			waits := waitRetries(t, d.logs, 3, 30*time.Second)
			if waits[2] <= waits[0] {
				t.Fatalf("backoff does not grow: %v", waits)
			}
			if n := strings.Count(d.logs.String(), tc.reason); n < 3 {
				t.Fatalf("each attempt should log the one clear error; found it %d times:\n%s", n, d.logs)
			}
			_, metrics := get(d.base + "/metrics")
			assertNoSecrets(t, body, d.logs.String(), metrics)
			if tc.fix == nil {
				if err := d.stop(); err != nil {
					t.Fatalf("stop while refused: %v, want a clean stop", err)
				}
				return
			}
			// Receipts written while Tidemark is refused wait in Kafka; fixing the file needs no restart.
			const n = 25
			runApp(t, tc.good, d.topics.orders, d.topics.receipts, n)
			tc.fix()
			waitStatus(t, d.base+"/readyz", http.StatusOK, 90*time.Second)
			if got := waitRows(t, d.conn, "SELECT count() FROM latency_events FINAL WHERE source = 'receipt'", n, 60*time.Second); got != n {
				t.Fatalf("after the fix: %d receipts stored, want all %d", got, n)
			}
			if err := d.stop(); err != nil {
				t.Fatalf("graceful stop: %v", err)
			}
			assertNoSecrets(t, d.logs.String())
		})
	}
}

// retryIn matches the collector's start-up retry lines only: the lag exporter retries Kafka in its own loop with
// its own backoff, and the two loops' lines interleave, so waits from both would not form one growing sequence.
var retryIn = regexp.MustCompile(`collector cannot reach Kafka; retrying"[^\n]* in=([0-9.]+m?s)`)

// waitRetries waits until the log holds n retry lines and returns their waits.
func waitRetries(t *testing.T, logs *syncBuffer, n int, timeout time.Duration) []time.Duration {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ms := retryIn.FindAllStringSubmatch(logs.String(), -1)
		if len(ms) >= n {
			var out []time.Duration
			for _, m := range ms[:n] {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d retry lines after %v, want %d:\n%s", len(ms), timeout, n, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mintToken gets a token for client from the local issuer.
func mintToken(t *testing.T, s testenv.Secure, client string) string {
	t.Helper()
	cc := clientcredentials.Config{ClientID: client, ClientSecret: testenv.SecureOIDCSecret, TokenURL: s.OIDCURL + "/token"}
	tok, err := cc.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken
}

// TestLagWithSecureConfigs is the newcomer's one command: `tidemark lag --config FILE` with each file stack.sh
// wrote (SCRAM + TLS, OAUTHBEARER, mTLS), as it is, in a shell that also has the plaintext stack's environment;
// the README's SCRAM + TLS command from flags alone; `lag record` with the SCRAM file; and a wrong password.
func TestLagWithSecureConfigs(t *testing.T) {
	s := testenv.SecureStack(t)
	topic := testenv.CreateTopic(t, "lagsec", testenv.Topic{Partitions: 1})
	group := testenv.Name(t, "g")
	prod, err := sarama.NewSyncProducer(testenv.Kafka(t), testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatal(err)
		}
	}
	_ = prod.Close()
	r, err := lagread.NewClusterReader(testenv.Kafka(t), lagread.NewReaderConfig("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Metadata(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.CommitOffsets(context.Background(), group, map[string]map[int32]int64{topic: {0: 2}}); err != nil {
		t.Fatal(err)
	}
	// The plaintext stack's address, which the shell also has, must not be what answers: the commands below reach
	// the cluster only through the file or the flags.
	t.Setenv("TIDEMARK_KAFKA_BROKERS", "127.0.0.1:1")
	// group, type, topic, subtopology, partition 0: committed 2, end 5, lag 3
	wantRow := regexp.MustCompile(group + `\s+classic\s+` + topic + `\s+-\s+0\s+2\s+5\s+3\s`)
	for name, path := range map[string]string{"scram": s.SCRAMConfig, "oauth": s.OAuthConfig, "mtls": s.MTLSConfig} {
		t.Run(name, func(t *testing.T) {
			out, err := runLag(t, "--config", path, "--group", group)
			if err != nil {
				t.Fatal(err)
			}
			if !wantRow.MatchString(out) {
				t.Fatalf("lag output:\n%s", out)
			}
		})
	}
	// The README's one command: SCRAM over TLS from flags alone, no config file.
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte(testenv.SecureSCRAMPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runLag(t, "--brokers", strings.Join(s.SASLBrokers, ","), "--kafka.tls.enabled", "--kafka.tls.ca_file", s.CA(),
		"--kafka.sasl.mechanism", "SCRAM-SHA-512", "--kafka.sasl.user", testenv.SecureUser, "--kafka.sasl.password_file", pw,
		"--group", group)
	if err != nil {
		t.Fatalf("lag with SCRAM + TLS flags: %v", err)
	}
	if !wantRow.MatchString(out) {
		t.Fatalf("lag output with SCRAM + TLS flags:\n%s", out)
	}
	// `lag record` reaches the cluster through the same block: one poll recorded over SCRAM + TLS, replayed by
	// `lag eval`, gives the same row.
	timeline := filepath.Join(t.TempDir(), "secure.jsonl")
	if _, err := runLag(t, "record", "--config", s.SCRAMConfig, "--group", group, "--out", timeline, "--count", "1"); err != nil {
		t.Fatalf("lag record: %v", err)
	}
	out, err = runLag(t, "eval", timeline)
	if err != nil {
		t.Fatalf("lag eval of the recorded timeline: %v", err)
	}
	if !wantRow.MatchString(out) {
		t.Fatalf("lag eval of what lag record wrote over SCRAM:\n%s", out)
	}
	// A wrong password through the flag: one error naming the broker and the mechanism, and no password.
	wrong := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(wrong, []byte("wrong-password-123"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = runLag(t, "--config", s.SCRAMConfig, "--kafka.sasl.password_file", wrong)
	want := "kafka broker " + s.SASLBrokers[0] + " (SASL_SSL, SCRAM-SHA-512 as tidemark): authentication failed"
	if len(s.SASLBrokers) > 1 { // every bootstrap broker refuses the same way: one error naming them all
		want = "kafka brokers " + strings.Join(s.SASLBrokers, ", ") + " (SASL_SSL, SCRAM-SHA-512 as tidemark): authentication failed"
	}
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want %q...", err, want)
	}
	assertNoSecrets(t, err.Error())
}
