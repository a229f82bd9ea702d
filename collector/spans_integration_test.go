package collector

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency"
)

// agentTruth is what the plain Kafka application printed about one record, on its own clock (ms).
type agentTruth struct {
	send, ack, recv, done int64
	hasSend, hasDone      bool
}

// TestJavaAgentSpans runs a plain kafka-clients application (deploy/local/otel-app: no Tidemark code) under the
// OpenTelemetry Java agent against the real brokers; the spans path turns its spans into rows. Every record gets a
// row; no stage is negative; each trusted stage is within its stated uncertainty of the truth; the application's
// host is bracketed by its producer spans around its true offset: 0, and +2 s under libfaketime (its producer and
// consumer spans then disagree with the brokers' LogAppendTime by 2 s, which naive stages show as a 2 s ingest and a
// negative queue wait). The first run exports OTLP/HTTP to the collector's own receiver, which writes the spans into
// the spans topic; the second exports to a real OpenTelemetry Collector (testenv.OTelCollector) whose Kafka exporter
// writes them there, and which also forwards them to the stack's Jaeger: the records' traces in Jaeger hold the
// agent's producer and process spans.
func TestJavaAgentSpans(t *testing.T) {
	t.Run("same clock, own OTLP receiver", func(t *testing.T) { runJavaAgentApp(t, 0, false) })
	t.Run("clock 2s ahead, OpenTelemetry Collector", func(t *testing.T) { runJavaAgentApp(t, 2*time.Second, true) })
}

// fakeTimeLib is Debian's libfaketime (package faketime).
const fakeTimeLib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

func runJavaAgentApp(t *testing.T, skew time.Duration, viaOTelCol bool) {
	cp, agent := testenv.OTelApp(t)
	var jaeger testenv.JaegerAddrs
	if viaOTelCol {
		jaeger = testenv.Jaeger(t)
	}
	e, r, port := startSpansCollector(t, nil)
	defer r.stop(t)
	endpoint := fmt.Sprintf("http://127.0.0.1:%d/v1/traces", port)
	if viaOTelCol {
		endpoint = testenv.OTelCollector(t, e.brokers, e.cfg.Spans.Topic, jaeger.OTLPGRPC)
	}

	const n, procMs, host = 30, 5, "java-otel-app"
	group := testenv.Name(t, "javaapp")
	env := fakeTimeEnv(t, skew, false)
	app := testenv.StartJavaWith(t, env, []string{
		"-javaagent:" + agent,
		"-Dotel.service.name=otel-app",
		"-Dotel.resource.attributes=host.name=" + host,
		"-Dotel.traces.exporter=otlp", "-Dotel.metrics.exporter=none", "-Dotel.logs.exporter=none",
		"-Dotel.exporter.otlp.protocol=http/protobuf",
		"-Dotel.exporter.otlp.traces.endpoint=" + endpoint,
		"-Dotel.bsp.schedule.delay=200",
		"-Dotel.javaagent.logging=none",
	}, cp, "dev.tidemark.otelapp.SpansApp", strings.Join(e.brokers, ","), e.source, group, fmt.Sprint(n), fmt.Sprint(procMs))
	app.WaitLine("FINISHED", 3*time.Minute)
	app.Wait(time.Minute) // exits once the agent flushed its spans
	checkSpansApp(t, e, r, app.Output(), group, host, n, skew)
	if viaOTelCol {
		checkAgentTraceInJaeger(t, e, jaeger.Query, group)
	}
}

// checkAgentTraceInJaeger checks that the OpenTelemetry Collector forwarded the agent's spans to Jaeger as well: the
// trace of one of group's records holds the agent's producer and consumer spans.
func checkAgentTraceInJaeger(t *testing.T, e *env, query, group string) {
	t.Helper()
	var tid string
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.conn.QueryRow(ctx, "SELECT any(trace_id) FROM latency_events WHERE topic = ? AND consumer_group = ?",
		e.source, group).Scan(&tid); err != nil || tid == "" {
		t.Fatalf("a trace id of the application's rows: %q, %v", tid, err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tr, found, err := testenv.FetchTrace(ctx, query, tid)
		if err != nil || !found {
			return fmt.Errorf("trace %s in Jaeger: found %v, %v", tid, found, err)
		}
		kinds := map[any]int{}
		for _, s := range tr.Spans {
			if tr.Processes[s.ProcessID].ServiceName == "otel-app" {
				kinds[s.Tag("span.kind")]++
			}
		}
		if kinds["producer"] == 0 || kinds["consumer"] == 0 {
			return fmt.Errorf("trace %s in Jaeger has the agent's spans by kind %v, want producer and consumer", tid, kinds)
		}
		return nil
	})
}

// startSpansCollector starts the collector with the spans path and its OTLP/HTTP receiver on a free port, and waits
// until the probes bracket every broker: the producer spans bracket an application's clock against the appending
// broker's. groups is spans.consumer_groups.
func startSpansCollector(t *testing.T, groups map[string]string) (*env, *running, int) {
	e := newEnv(t)
	port := testenv.FreePort(t)
	e.cfg.Spans = SpansConfig{Enabled: true, Topic: testenv.Name(t, "sp"), Group: testenv.Name(t, "spg"), Partitions: 3,
		JoinWait: 10 * time.Second, OTLPHTTPListen: fmt.Sprintf("127.0.0.1:%d", port), ConsumerGroups: groups}
	r := e.start(nil, nil)
	e.waitTopicReady(e.cfg.Spans.Topic, e.cfg.Spans.Partitions)
	// The producer spans bracket the application's clock against the appending broker's: wait until the probes
	// bracket every broker.
	brokers := e.brokerCount()
	if got := waitFor(int64(brokers), time.Minute, func() int64 {
		n := int64(0)
		for _, o := range r.engine.Offsets(time.Now()) {
			if strings.HasPrefix(o.Host, "broker-") && o.Kind == latency.KindBracketed && !o.Suspect {
				n++
			}
		}
		return n
	}); got < int64(brokers) {
		r.stop(t)
		t.Fatalf("%d of %d brokers bracketed by the probes after a minute", got, brokers)
	}
	return e, r, port
}

// fakeTimeEnv is the environment that runs a program's wall clock skew ahead under libfaketime (none for 0). With
// monotonic unset the monotonic clocks stay real, as the JVM's timed waits need (see deploy/local/kafka.sh); CPython
// needs them shifted with the wall clock, since libfaketime 0.9.10 fails its time.sleep (clock_nanosleep on
// CLOCK_MONOTONIC with an absolute deadline) with EINVAL when they are not.
func fakeTimeEnv(t *testing.T, skew time.Duration, monotonic bool) []string {
	var env []string
	if skew != 0 {
		if _, err := os.Stat(fakeTimeLib); err != nil {
			if testenv.InCI() {
				t.Fatalf("libfaketime missing (%v): deploy/local/stack.sh installs Debian's faketime", err)
			}
			t.Skipf("libfaketime missing (%v): apt-get install faketime", err)
		}
		env = []string{"LD_PRELOAD=" + fakeTimeLib, fmt.Sprintf("FAKETIME=%+.3fs", skew.Seconds()),
			"FAKETIME_DONT_FAKE_MONOTONIC=1", "FAKETIME_FORCE_MONOTONIC_FIX=0"}
		if monotonic {
			env[2], env[3] = "FAKETIME_DONT_FAKE_MONOTONIC=0", "FAKETIME_FORCE_MONOTONIC_FIX=1"
		}
	}
	return env
}

// checkSpansApp checks the rows of an application that printed output (SENT and DONE lines on its own clock, which
// runs skew ahead) for its n records consumed as group on host: a row for every record, no negative stage, each
// trusted stage within its stated uncertainty of the truth, and the host bracketed around skew.
func checkSpansApp(t *testing.T, e *env, r *running, output []string, group, host string, n int, skew time.Duration) {
	t.Helper()
	truth := map[[2]int64]*agentTruth{}
	at := func(p, o int64) *agentTruth {
		k := [2]int64{p, o}
		if truth[k] == nil {
			truth[k] = &agentTruth{}
		}
		return truth[k]
	}
	for _, line := range output {
		var p, o, a, b int64
		if _, err := fmt.Sscanf(line, "SENT %d %d %d %d", &p, &o, &a, &b); err == nil {
			tr := at(p, o)
			tr.send, tr.ack, tr.hasSend = a, b, true
		} else if _, err := fmt.Sscanf(line, "DONE %d %d %d %d", &p, &o, &a, &b); err == nil {
			tr := at(p, o)
			tr.recv, tr.done, tr.hasDone = a, b, true
		}
	}
	if len(truth) != n {
		t.Fatalf("the application reported %d records, want %d", len(truth), n)
	}

	q := "SELECT count() FROM latency_events WHERE topic = ? AND consumer_group = ?"
	if got := e.waitCount(uint64(n), 90*time.Second, q, e.source, group); got != uint64(n) {
		t.Fatalf("%d rows for the application's %d records", got, n)
	}
	// Each record was processed once, in order; its spans reach the collector out of order (batches, split by trace
	// id over the spans topic's partitions), which must not make a first processing read as a redelivery.
	live := "SELECT count() FROM latency_events FINAL WHERE topic = ? AND consumer_group = ? AND replay_class = 'live'"
	if got := e.count(live, e.source, group); got != uint64(n) {
		t.Errorf("%d of the application's %d records classed live", got, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := e.conn.Query(ctx, `SELECT partition, offset, append_ts_ms, ingest_ms, queue_ms, process_ms, e2e_ms,
		ingest_naive_ms, queue_naive_ms, process_naive_ms, e2e_naive_ms,
		uncertainty_ms, valid, flags, producer_host, consumer_host, broker_host, trace_id
		FROM latency_events WHERE topic = ? AND consumer_group = ? ORDER BY partition, offset`, e.source, group)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var worst, maxErr float64
	seen, trusted, untrusted := 0, 0, 0
	for rows.Next() {
		var (
			part                                  int32
			off, app, ingest, queue, process, e2e int64
			nIngest, nQueue, nProcess, nE2E       int64
			unc                                   float64
			valid                                 uint8
			flags                                 uint32
			producer, consumer, broker, trace     string
		)
		if err := rows.Scan(&part, &off, &app, &ingest, &queue, &process, &e2e, &nIngest, &nQueue, &nProcess, &nE2E,
			&unc, &valid, &flags, &producer, &consumer, &broker, &trace); err != nil {
			t.Fatal(err)
		}
		seen++
		tr := truth[[2]int64{int64(part), off}]
		if tr == nil || !tr.hasSend || !tr.hasDone {
			t.Fatalf("row for %d/%d, which the application did not both send and process", part, off)
		}
		if producer != host || consumer != host || broker == "" || trace == "" || app == 0 {
			t.Errorf("%d/%d: producer %q consumer %q broker %q trace %q append %d", part, off, producer, consumer, broker, trace, app)
		}
		// The brokers and the collector share this machine's clock; the application's runs skew ahead. The spans'
		// raw stamps with the skew taken off the application's are the truth of what the spans measure; the
		// application's own readings bound them from outside (its send time is read before send() begins, its
		// processed time before the next record is asked for, where the agent's process span ends).
		sk := skew.Milliseconds()
		tIngest, tQueue, tProcess, tE2E := nIngest+sk, nQueue-sk, nProcess, nE2E
		if tIngest > app-(tr.send-sk)+1 || tProcess < tr.done-tr.recv-1 {
			t.Errorf("%d/%d: the spans' ingest %d ms / processing %d ms lie outside the application's own %d / %d ms",
				part, off, tIngest, tProcess, app-(tr.send-sk), tr.done-tr.recv)
		}
		for _, st := range []struct {
			name      string
			bit       uint8
			got, want int64
		}{
			{"ingest", 1, ingest, tIngest}, {"queue", 2, queue, tQueue}, {"process", 4, process, tProcess}, {"e2e", 8, e2e, tE2E},
		} {
			if st.got < 0 {
				t.Errorf("%d/%d: %s stage %d ms is negative", part, off, st.name, st.got)
			}
			if valid&st.bit == 0 {
				untrusted++ // flagged (e.g. unsettled: the clock estimate is still warming up): not in percentiles
				continue
			}
			trusted++
			// +1: stages are stored in whole ms.
			d := math.Abs(float64(st.got - st.want))
			worst, maxErr = math.Max(worst, d-unc), math.Max(maxErr, d)
			if d > unc+1 {
				t.Errorf("%d/%d: %s stage %d ms, truth %d ms, stated uncertainty %.1f ms (flags %b)", part, off, st.name, st.got, st.want, unc, flags)
			}
		}
	}
	if seen != n {
		t.Fatalf("read %d rows, want %d", seen, n)
	}
	o, err := r.engine.Offset(r.col.deps.hosts.id(host), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != latency.KindBracketed {
		t.Fatalf("application host %s: %v ± %v (%v), want bracketed by its producer spans", host, o.Offset, o.Uncertainty, o.Kind)
	}
	// The true offset is the skew, to within the few ms libfaketime's shift takes to apply (none without it).
	if o.Lower > skew+time.Millisecond || o.Upper < skew-time.Millisecond {
		t.Fatalf("application host bounds [%v, %v] exclude its true offset %v", o.Lower, o.Upper, skew)
	}
	if trusted == 0 {
		t.Fatal("no stage of any row is trusted")
	}
	t.Logf("%d records; %d stages trusted, %d flagged; application host offset %v ± %v, bracketed in [%v, %v] around its true %v; largest trusted stage error %.0f ms, beyond its stated uncertainty %.1f ms",
		n, trusted, untrusted, o.Offset, o.Uncertainty, o.Lower, o.Upper, skew, maxErr, worst)
}

// TestPythonInstrumentationSpans runs a plain confluent-kafka application (deploy/local/otel-py: no Tidemark code)
// instrumented by OpenTelemetry's opentelemetry-instrumentation-confluent-kafka, exporting OTLP/HTTP to the
// collector's own receiver, with its wall clock 1.5 s behind under libfaketime. Its process spans name no consumer
// group (spans.consumer_groups gives it by service.name), its producer spans no offset (each is joined through the
// process span's link) and end when produce() returns, so its host is bracketed from the send to the receipt on the
// same host. The checks are TestJavaAgentSpans's.
func TestPythonInstrumentationSpans(t *testing.T) {
	python, script := testenv.OTelPy(t)
	const skew = -1500 * time.Millisecond
	env := fakeTimeEnv(t, skew, true)
	const n, procMs, host = 30, 5, "python-otel-app"
	group := testenv.Name(t, "pyapp")
	e, r, port := startSpansCollector(t, map[string]string{"otel-py-app": group})
	defer r.stop(t)
	app := testenv.StartProcess(t, "spans_app.py", append(env,
		fmt.Sprintf("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:%d/v1/traces", port),
		"OTEL_SERVICE_NAME=otel-py-app", "HOST_NAME="+host, "PYTHONUNBUFFERED=1"),
		python, script, strings.Join(e.brokers, ","), e.source, group, fmt.Sprint(n), fmt.Sprint(procMs))
	app.WaitLine("FINISHED", 3*time.Minute)
	app.Wait(time.Minute) // exits once the tracer provider flushed its spans
	checkSpansApp(t, e, r, app.Output(), group, host, n, skew)
}
