package collector

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/latency/instrument"
)

// hostileTopics is how many receipt records naming made-up topics TestReceiptsNamingUnknownTopicsDoNotFreeze puts
// ahead of the application's receipts; `-args -hostile-topics 10000` replays the attack at full size.
var hostileTopics = flag.Int("hostile-topics", 300, "receipt records naming made-up topics in TestReceiptsNamingUnknownTopicsDoNotFreeze")

// TestReceiptsNamingUnknownTopicsDoNotFreeze, on the real servers: a writer of receipts naming
// 300 topics that do not exist (each receipt's append stamp needs its topic's leader) sits in front of an
// application's real receipts on every receipts partition. A synchronous metadata refresh per unknown topic, about
// a second each, would keep the real receipts waiting minutes behind them (10,000 would freeze the path outright, and
// a stop would wait too); lookups run in the background, in batches, answered
// from a negative cache: the real receipts are stored at once; the first max_unknown_topics (100) unknown names are
// tracked and their receipts stored without a leader's stamp, counted; receipts naming further unknown names are
// dead-lettered with reason unknown_topic; and the collector stops promptly.
func TestReceiptsNamingUnknownTopicsDoNotFreeze(t *testing.T) {
	e := newEnv(t)
	e.cfg.Probe.Enabled = false
	e.cfg.Metadata = MetadataConfig{MaxUnknownTopics: 100, MissingTTL: 10 * time.Minute}
	r := e.start(nil, nil)
	const perRecord, tracked = 4, 100
	garbage := *hostileTopics
	if garbage <= tracked {
		t.Fatalf("-hostile-topics %d: want more than the %d names tracked", garbage, tracked)
	}
	now := time.Now()
	var values [][]byte
	for i := range garbage {
		topic := testenv.Name(t, fmt.Sprintf("nosuch%d", i))
		rs := make([]instrument.Receipt, perRecord)
		for j := range rs {
			rs[j] = instrument.Receipt{Group: "hostile", Topic: topic, Partition: 0, Offset: int64(j),
				TimestampType: instrument.TimestampLogAppend, RecordTimestampMs: now.UnixMilli(), HasRecordTimestamp: true,
				ProcessedNs: now.Add(time.Millisecond).UnixNano(), Host: "h1"}
		}
		v, err := instrument.AppendReceiptBatch(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	}
	attack := time.Now()
	e.produceRaw(e.cfg.Receipts.Topic, values...)
	const n = 300
	e.app(n, 0, 0, 0) // the application's receipts land behind the garbage on every receipts partition
	appDone := time.Since(attack)

	q := "SELECT count() FROM latency_events FINAL WHERE topic = ? AND source = 'receipt'"
	if got := e.waitCount(n, 60*time.Second, q, e.source); got != n {
		t.Logf("records %v rows %v acked %v parked %v dlq %v nometa %v unknown %v", testutil.ToFloat64(r.metrics.Records.WithLabelValues(PathReceipts)),
			testutil.ToFloat64(r.metrics.Rows.WithLabelValues(PathReceipts)), testutil.ToFloat64(r.metrics.RowsAcked.WithLabelValues(PathReceipts)),
			testutil.ToFloat64(r.metrics.Parked), testutil.ToFloat64(r.metrics.DeadLetters.WithLabelValues(PathReceipts, "unknown_topic")),
			testutil.ToFloat64(r.metrics.WithoutMetadata.WithLabelValues("missing")), testutil.ToFloat64(r.metrics.UnknownTopics))
		t.Fatalf("%d of the application's %d receipts stored in 60 s behind receipts naming unknown topics", got, n)
	}
	t.Logf("the application's %d receipts, behind %d records naming unknown topics: sent by %v, all stored by %v after the first of those was produced",
		n, garbage, appDone.Round(time.Millisecond), time.Since(attack).Round(time.Millisecond))
	hostile := "SELECT count() FROM latency_events FINAL WHERE consumer_group = 'hostile'"
	if got := e.waitCount(tracked*perRecord, 30*time.Second, hostile); got != tracked*perRecord {
		t.Fatalf("%d receipts of unknown topics stored, want %d (the %d tracked names)", got, tracked*perRecord, tracked)
	}
	if got := e.count(hostile + " AND broker_host != ''"); got != 0 {
		t.Fatalf("%d receipts of unknown topics attributed to a broker", got)
	}
	if got := waitFor(int64(garbage-tracked), 30*time.Second, func() int64 { return e.topicEnd(e.cfg.DeadLetterTopic) }); got != int64(garbage-tracked) {
		t.Fatalf("dead-letter topic holds %d records, want %d (the names past the bound)", got, garbage-tracked)
	}
	if v := testutil.ToFloat64(r.metrics.DeadLetters.WithLabelValues(PathReceipts, "unknown_topic")); v != float64(garbage-tracked) {
		t.Fatalf("dead letters {unknown_topic} %v, want %d", v, garbage-tracked)
	}
	if v := testutil.ToFloat64(r.metrics.WithoutMetadata.WithLabelValues("missing")); v != tracked*perRecord {
		t.Fatalf("receipts without metadata {missing} %v, want %d", v, tracked*perRecord)
	}
	if v := testutil.ToFloat64(r.metrics.Parked); v != 0 {
		t.Fatalf("%v receipts still parked", v)
	}
	start := time.Now()
	r.stop(t)
	t.Logf("stopped in %v (drain_timeout %v)", time.Since(start).Round(time.Millisecond), e.cfg.DrainTimeout)
}
