package collector

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/internal/testenv"
)

// TestBrokerRestartResumes (a broker restarted → the pipeline resumes by itself): the only broker of a
// private cluster stops for 10 s mid-run and starts again on its data. Without any restart of the collector, the
// receipts path stores every receipt produced before and after the outage exactly once by key, and the probe path
// records loss only for probes sent while the broker was away.
func TestBrokerRestartResumes(t *testing.T) {
	k := testenv.StartPrivateKafka(t)
	e := newEnvOn(t, k.Brokers)
	e.cfg.Probe.LossTimeout = 3 * time.Second
	r := e.start(nil, nil)
	t.Cleanup(func() {
		at := time.Now()
		r.stop(t)
		t.Logf("collector stopped in %v", time.Since(at).Round(time.Millisecond))
	})
	second := e.createTopic("src2", 3, map[string]string{"message.timestamp.type": "LogAppendTime"})
	const n1, n2 = 300, 300
	q := "SELECT count() FROM latency_events FINAL WHERE topic = ?"
	probes := func(status string, from, to time.Time) uint64 {
		return e.count("SELECT count() FROM probe_events FINAL WHERE topic = ? AND status = ? AND send_ts_ms >= ? AND send_ts_ms < ?",
			e.cfg.Probe.Topic, status, from.UnixMilli(), to.UnixMilli())
	}
	// ackedLost counts lost probes whose produce the broker acknowledged (ack_ts_ms is -1 when the send failed: the
	// sender sweeps only after its sends returned, so a lost row carries the send's outcome).
	ackedLost := func(from, to time.Time) uint64 {
		return e.count("SELECT count() FROM probe_events FINAL WHERE topic = ? AND status = 'lost' AND ack_ts_ms >= 0 AND send_ts_ms >= ? AND send_ts_ms < ?",
			e.cfg.Probe.Topic, from.UnixMilli(), to.UnixMilli())
	}
	start := time.Now()

	e.app(n1, 0, 0, 0)
	if got := e.waitCount(n1, 30*time.Second, q, e.source); got != n1 {
		t.Fatalf("before the outage: %d rows, want %d", got, n1)
	}
	if got := waitFor(1, 10*time.Second, func() int64 { return int64(probes("ok", start, time.Now())) }); got < 1 {
		t.Fatal("no probe came back before the outage")
	}

	t.Logf("before the outage: %d receipts stored after %v", n1, time.Since(start).Round(time.Millisecond))
	stopped := time.Now()
	k.Run("stop-node", "1") // TERM, then KILL after 20 s: a lone KRaft node's shutdown may take a while
	down := time.Now()
	time.Sleep(time.Until(stopped.Add(10 * time.Second)))
	k.Run("start-node", "1") // returns once the broker answers a real client call
	back := time.Now()
	t.Logf("broker stopping %v, away until %v after the stop began (ready again after %v)", down.Sub(stopped).Round(time.Millisecond),
		back.Sub(stopped).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond))

	e.appOn(second, n2, 0, 0, 0)
	if got := e.waitCount(n2, 45*time.Second, q, second); got != n2 {
		t.Fatalf("after the restart: %d rows of the second topic, want %d", got, n2)
	}
	t.Logf("after the restart: %d receipts stored %v after the broker was back", n2, time.Since(back).Round(time.Millisecond))
	select {
	case err := <-r.done:
		t.Fatalf("collector stopped by itself: %v", err)
	default:
	}
	// Exactly once by key: the count by key and the distinct keys are both the number of receipts produced.
	for _, c := range []struct {
		topic string
		n     uint64
	}{{e.source, n1}, {second, n2}} {
		if got := e.count(q, c.topic); got != c.n {
			t.Errorf("%s: %d rows by key, want %d", c.topic, got, c.n)
		}
		if got := e.count("SELECT uniqExact(partition, offset) FROM latency_events WHERE topic = ?", c.topic); got != c.n {
			t.Errorf("%s: %d distinct keys, want %d", c.topic, got, c.n)
		}
	}

	// The probe path resumed: probes sent after the broker was back come back.
	if got := waitFor(3, 20*time.Second, func() int64 { return int64(probes("ok", back, time.Now())) }); got < 3 {
		t.Fatalf("%d probes came back after the restart, want >= 3", got)
	}
	// "Back" is when the broker answers a client call; the collector's producer reconnects and refreshes metadata on
	// its own schedule after that, so the outage ends, for the probe path, at the first probe sent after the broker
	// was back that came back.
	var resumedMs int64
	if err := e.conn.QueryRow(context.Background(), "SELECT min(send_ts_ms) FROM probe_events FINAL WHERE topic = ? AND status = 'ok' AND send_ts_ms >= ?",
		e.cfg.Probe.Topic, back.UnixMilli()).Scan(&resumedMs); err != nil {
		t.Fatalf("first probe back after the restart: %v", err)
	}
	resumed := time.UnixMilli(resumedMs)
	t.Logf("probe path resumed %v after the broker was back", resumed.Sub(back).Round(time.Millisecond))
	// Loss is judged by the probe sender's sweep, once a probe is older than the loss timeout (wall time, by design):
	// let every probe up to a second past the resumption reach that age, then wait for a sweep made after that and
	// for the writer to store what it found. Then every probe sent before judged − LossTimeout has its final status.
	time.Sleep(time.Until(resumed.Add(e.cfg.Probe.LossTimeout + time.Second)))
	judged := time.Now()
	swept(t, r, len(e.brokers))
	slack := e.cfg.Probe.Interval + 500*time.Millisecond
	// No probe acknowledged before the stop (less one probe interval: a probe sent as the broker began its
	// shutdown) or sent from the resumption on may be lost. Before the stop only acknowledged probes count as sent:
	// on this loaded machine a produce can go unanswered for seconds, and one still unanswered when the broker
	// stopped failed; it is lost, rightly, whenever it was sent. An acknowledged probe is in the log, and the
	// consumer reading it before the stop is what the probe path promises: one counted lost is a bug.
	if got := ackedLost(start, stopped.Add(-slack)); got != 0 {
		t.Errorf("%d acknowledged probes sent before the outage counted lost", got)
	}
	if got := probes("lost", start, stopped.Add(-slack)); got != 0 {
		t.Logf("%d probes sent before the outage lost with their produce never acknowledged", got)
	}
	if got := probes("lost", resumed, judged.Add(-e.cfg.Probe.LossTimeout)); got != 0 {
		t.Errorf("%d probes sent after the probe path resumed (%v) counted lost", got, resumed)
	}
	// And the outage itself is seen: probes sent while the broker shut down (it takes over a second) never came back
	// within the loss timeout.
	lost, ok := probes("lost", stopped.Add(-slack), resumed), probes("ok", start, time.Now())
	if lost == 0 {
		t.Errorf("no probe counted lost for an outage of %v", back.Sub(stopped).Round(time.Second))
	}
	t.Logf("probes: %d lost in the outage window, %d ok over the run", lost, ok)
}

// swept returns once the probe sender has swept for lost probes after swept was called and the writer has stored
// the rows it found. A round sends one probe per probe partition (partitions of them), then sweeps and hands the
// lost ones to the writer before the next round: partitions+1 sends from now on include one from a later round
// than the first, so the sweep of the first one's round ran after now, and Flush then waits for its rows.
func swept(t *testing.T, r *running, partitions int) {
	t.Helper()
	sent := func() int64 {
		var n float64
		ch := make(chan prometheus.Metric, 16)
		go func() { r.metrics.ProbeSent.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if err := m.Write(&d); err != nil {
				t.Fatal(err)
			}
			n += d.GetCounter().GetValue()
		}
		return int64(n)
	}
	want := sent() + int64(partitions) + 1
	if got := waitFor(want, 60*time.Second, sent); got < want {
		t.Fatalf("probe sender stalled: %d probes sent, want %d", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.writer.Flush(ctx); err != nil {
		t.Fatalf("flush the probe rows: %v", err)
	}
}
