package prometheus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter/lagapi"
)

// TestAlertsEndToEnd sends real alerts the whole way: real consumer groups on the local stack's Kafka, `tidemark
// run` polling them, Debian's Prometheus scraping it and evaluating the shipped rule file
// (deploy/prometheus/tidemark.rules.yml, unchanged; only the evaluation interval is the test's, 1 s), Debian's
// Alertmanager routing to a webhook receiver in this test.
//
//   - A group stops consuming (its consumer leaves while producers go on): TidemarkConsumerGroupStalled with
//     status STOP must arrive.
//   - A group falls behind on a topic with retention.ms 1 h 30 s, so that once its oldest unread record is 30 s
//     old retention may delete unread records within the hour: TidemarkConsumerGroupRetentionRisk must arrive.
//
// Each arrives with its labels and runbook link no later than its rule's `for` plus two evaluation intervals after
// Prometheus saw its condition (the alert's activeAt), and not before `for` had passed. When both groups recover
// (the first consumes again, the second catches up), both resolve. No other alert arrives: the other lag alerts
// these groups come near (no consumers, falling behind, time lag high) hold longer than the test runs.
func TestAlertsEndToEnd(t *testing.T) {
	brokers := testenv.Kafka(t)
	forOf := shippedAlertFor(t)
	const interval = time.Second // Prometheus's scrape and rule evaluation interval in this test
	stopTopic := testenv.CreateTopic(t, "alerts_stop", testenv.Topic{Partitions: 1, Configs: map[string]string{"retention.ms": "604800000"}})
	riskTopic := testenv.CreateTopic(t, "alerts_risk", testenv.Topic{Partitions: 1, Configs: map[string]string{"retention.ms": "3630000"}})
	stopGroup, riskGroup := testenv.Name(t, "stops"), testenv.Name(t, "lags")
	t.Cleanup(func() {
		adm := testenv.Admin(t)
		_ = adm.DeleteConsumerGroup(stopGroup)
		_ = adm.DeleteConsumerGroup(riskGroup)
	})

	hook := newAlertReceiver(t)
	am := testenv.PrivateAlertmanager(t, hook.url)
	httpAddr := testenv.FreeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "run.yaml")
	yamlText := fmt.Sprintf(`kafka: {brokers: [%s]}
lag:
  cluster: alerts
  poll_interval: 1s
  cycle_timeout: 2s
  group_allow: [%q, %q]
  topic_allow: [%q, %q]
  status: {stop_after: 10s}
http: {listen: %q}
`, strings.Join(brokers, ", "), stopGroup, riskGroup, stopTopic, riskTopic, httpAddr)
	if err := os.WriteFile(cfgPath, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	runTidemark(t, cfgPath, httpAddr)
	prom := testenv.PrivatePrometheus(t, httpAddr, interval.String(), am)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	produced := produceEvery(ctx, t, brokers, 100*time.Millisecond, stopTopic, riskTopic)
	var riskDelay atomic.Int64 // per-record processing time of the lagging group's consumer
	riskDelay.Store(int64(500 * time.Millisecond))
	stopConsumer := consumeGroup(ctx, t, brokers, stopGroup, stopTopic, nil)
	riskConsumer := consumeGroup(ctx, t, brokers, riskGroup, riskTopic, &riskDelay)
	// The first group stops once it has committed: from then on producers outrun it.
	waitGroup(t, httpAddr, stopGroup, func(g *lagapi.ClusterGroup) bool {
		p := g.Partition(stopTopic, 0)
		return p != nil && p.HasCommit && p.Committed > 0
	})
	stopConsumer()

	stalled := expectedAlert{name: "TidemarkConsumerGroupStalled",
		labels: map[string]string{"cluster": "alerts", "group": stopGroup, "status": "STOP", "severity": "page"}}
	risk := expectedAlert{name: "TidemarkConsumerGroupRetentionRisk",
		labels: map[string]string{"cluster": "alerts", "group": riskGroup, "topic": riskTopic, "severity": "page"}}
	for _, want := range []expectedAlert{stalled, risk} {
		hold := forOf[want.name]
		got := hook.wait(t, want, "firing", hold+3*time.Minute)
		activeAt := alertActiveAt(t, prom, want, got.received)
		if d := got.received.Sub(activeAt); d > hold+2*interval {
			t.Errorf("%s arrived %s after Prometheus saw its condition, more than for (%s) + 2 evaluation intervals", want.name, d, hold)
		}
		if d := got.StartsAt.Sub(activeAt); d < hold {
			t.Errorf("%s fired %s after its condition held, before its for (%s)", want.name, d, hold)
		}
		t.Logf("%s: condition at %s, received %s later (for %s)", want.name, activeAt.Format(time.TimeOnly),
			got.received.Sub(activeAt).Round(time.Millisecond), hold)
	}

	// Recovery: the first group consumes again, the second catches up.
	riskDelay.Store(0)
	consumeGroup(ctx, t, brokers, stopGroup, stopTopic, nil)
	for _, want := range []expectedAlert{stalled, risk} {
		hook.wait(t, want, "resolved", 3*time.Minute)
	}
	riskConsumer()
	cancel()
	if n := produced.Load(); n == 0 {
		t.Error("no record was produced")
	}

	// Exactly the two alerts arrived, each with a runbook link to its own section of docs/alerting.md.
	doc, err := os.ReadFile("../../docs/alerting.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hook.all() {
		if !stalled.matches(a) && !risk.matches(a) {
			t.Errorf("unexpected alert %s %v (%s)", a.Labels["alertname"], a.Labels, a.Status)
		}
		name := a.Labels["alertname"]
		if want := "docs/alerting.md#" + strings.ToLower(name); a.Annotations["runbook"] != want {
			t.Errorf("%s runbook %q, want %q", name, a.Annotations["runbook"], want)
		}
		if !strings.Contains(string(doc), "\n### "+name+"\n") {
			t.Errorf("%s's runbook section is missing from docs/alerting.md", name)
		}
		if a.Annotations["summary"] == "" || !strings.Contains(a.Annotations["summary"], a.Labels["group"]) {
			t.Errorf("%s summary %q does not name the group", name, a.Annotations["summary"])
		}
	}
}

// shippedAlertFor reads each alert's `for` from the shipped rule file.
func shippedAlertFor(t *testing.T) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, r := range readRules(t) {
		if r.Alert == "" {
			continue
		}
		var d time.Duration
		if r.For != "" {
			var err error
			if d, err = time.ParseDuration(r.For); err != nil {
				t.Fatalf("%s for %q: %v", r.Alert, r.For, err)
			}
		}
		out[r.Alert] = d
	}
	return out
}

// runTidemark builds cmd/tidemark and runs `tidemark run --config cfgPath` until the test ends (SIGTERM, then a
// bounded wait), and waits until its /readyz at httpAddr answers 200.
func runTidemark(t *testing.T, cfgPath, httpAddr string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tidemark")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/tidemark").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/tidemark: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--log.level", "error")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()} // only the config file configures it
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("tidemark run: %v", err)
			}
		case <-time.After(time.Minute): // a hang guard: shutdown is bounded by http.shutdown_timeout
			_ = cmd.Process.Kill()
			t.Error("tidemark run did not stop within a minute of SIGTERM")
		}
	})
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("tidemark run exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tidemark run not ready within 90s")
		}
	}
}

// expectedAlert is an alert by name and its complete label set (alertname aside).
type expectedAlert struct {
	name   string
	labels map[string]string
}

func (e expectedAlert) matches(a webhookAlert) bool {
	if a.Labels["alertname"] != e.name || len(a.Labels) != len(e.labels)+1 {
		return false
	}
	for k, v := range e.labels {
		if a.Labels[k] != v {
			return false
		}
	}
	return true
}

// webhookAlert is one alert of an Alertmanager webhook notification (version 4), with when the receiver got it.
type webhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	received    time.Time
}

// alertReceiver is the webhook receiver Alertmanager notifies: it keeps every alert of every notification.
type alertReceiver struct {
	url    string
	mu     sync.Mutex // guards alerts
	alerts []webhookAlert
	added  chan struct{} // signalled (non-blocking) after each notification
}

func newAlertReceiver(t *testing.T) *alertReceiver {
	r := &alertReceiver{added: make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		now := time.Now()
		var n struct {
			Version string         `json:"version"`
			Alerts  []webhookAlert `json:"alerts"`
		}
		if err := json.NewDecoder(req.Body).Decode(&n); err != nil || n.Version != "4" {
			t.Errorf("webhook: version %q, %v", n.Version, err)
			http.Error(w, "bad notification", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, a := range n.Alerts {
			a.received = now
			r.alerts = append(r.alerts, a)
		}
		r.mu.Unlock()
		select {
		case r.added <- struct{}{}:
		default:
		}
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL + "/alerts"
	return r
}

func (r *alertReceiver) all() []webhookAlert {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.alerts)
}

// wait returns the first alert matching want with status ("firing" or "resolved"), failing the test when none
// arrives within limit.
func (r *alertReceiver) wait(t *testing.T, want expectedAlert, status string, limit time.Duration) webhookAlert {
	t.Helper()
	timeout := time.After(limit)
	for {
		for _, a := range r.all() {
			if a.Status == status && want.matches(a) {
				return a
			}
		}
		select {
		case <-r.added:
		case <-timeout:
			t.Fatalf("no %s notification of %s %v within %s; received: %+v", status, want.name, want.labels, limit, r.all())
		}
	}
}

// alertActiveAt asks Prometheus when the alert's condition started to hold (its activeAt: the value of the
// ALERTS_FOR_STATE series Prometheus writes while the alert is pending or firing), as of time at.
func alertActiveAt(t *testing.T, prom string, a expectedAlert, at time.Time) time.Time {
	t.Helper()
	sel := []string{fmt.Sprintf("alertname=%q", a.name)}
	for k, v := range a.labels {
		if k != "severity" { // a rule label, not on ALERTS_FOR_STATE
			sel = append(sel, fmt.Sprintf("%s=%q", k, v))
		}
	}
	q := url.Values{"query": {"ALERTS_FOR_STATE{" + strings.Join(sel, ",") + "}"},
		"time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	resp, err := http.Get("http://" + prom + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if len(body.Data.Result) != 1 {
		t.Fatalf("ALERTS_FOR_STATE of %s at %s: %d series, want 1", a.name, at, len(body.Data.Result))
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	secs, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("ALERTS_FOR_STATE value %q: %v", s, err)
	}
	return time.UnixMilli(int64(secs * 1000))
}

// produceEvery writes one record to each topic every period until ctx ends; it returns the count written.
func produceEvery(ctx context.Context, t *testing.T, brokers []string, period time.Duration, topics ...string) *atomic.Int64 {
	t.Helper()
	p, err := sarama.NewSyncProducer(brokers, testenv.SaramaConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			for _, topic := range topics {
				if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); err != nil {
					if ctx.Err() == nil {
						t.Errorf("produce to %s: %v", topic, err)
					}
					return
				}
				n.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { <-done; _ = p.Close() })
	return &n
}

// consumeGroup runs a real consumer of group on topic until the returned stop is called or ctx ends: it processes
// each record in *delay (nil: at once), marks it and commits every 200 ms; stop leaves the group after a final
// commit.
func consumeGroup(ctx context.Context, t *testing.T, brokers []string, group, topic string, delay *atomic.Int64) (stop func()) {
	t.Helper()
	cfg := testenv.SaramaConfig(t)
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	cg, err := sarama.NewConsumerGroup(brokers, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		h := delayHandler{delay: delay}
		for cctx.Err() == nil {
			if err := cg.Consume(cctx, []string{topic}, h); err != nil && cctx.Err() == nil {
				t.Errorf("consume %s as %s: %v", topic, group, err)
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := cg.Close(); err != nil {
				t.Errorf("close consumer group %s: %v", group, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

type delayHandler struct{ delay *atomic.Int64 }

func (delayHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (delayHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h delayHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		if h.delay != nil {
			select {
			case <-time.After(time.Duration(h.delay.Load())): // the time this consumer takes per record
			case <-s.Context().Done():
				return nil
			}
		}
		s.MarkMessage(m, "")
	}
	return nil
}

// waitGroup polls /api/v1/lag until the group satisfies ok.
func waitGroup(t *testing.T, httpAddr, group string, ok func(*lagapi.ClusterGroup) bool) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, func() error {
		var r lagapi.LagResponse
		resp, err := http.Get("http://" + httpAddr + "/api/v1/lag?group=" + url.QueryEscape(group))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil && len(r.Groups) == 1 && ok(&r.Groups[0]) {
			return nil
		}
		return fmt.Errorf("group %s not in the expected state: %d %+v", group, resp.StatusCode, r.Groups)
	})
}
