package collector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/lagexporter"
)

// TestOTLPReceiver: a protobuf export of two traces becomes two spans-topic records, each keyed by its trace id and
// holding that trace's spans only; a body that is not OTLP is refused (400), JSON is not served (415), and when
// Kafka does not take the records the exporter is told to retry (503).
func TestOTLPReceiver(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := javaProducer("p", "orders", 0, 1, t0, t0.Add(time.Millisecond))
	b := javaProcess("c", "g", "orders", 0, 1, t0, t0.Add(time.Millisecond))
	c := javaProcess("c", "g", "orders", 0, 2, t0, t0.Add(time.Millisecond))
	a.trace, b.trace, c.trace = 7, 7, 9
	body := otlpRequest(t, a, b, c)

	var sent []kafka.Message
	var sendErr error
	rcv := &otlpReceiver{topic: "spans", send: func(ms []kafka.Message) error {
		if sendErr != nil {
			return sendErr
		}
		sent = append(sent, ms...)
		return nil
	}, log: slog.New(slog.DiscardHandler)}
	post := func(ct string, b []byte) int {
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(b))
		req.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		rcv.ServeHTTP(w, req)
		return w.Code
	}
	if code := post("application/x-protobuf", body); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	if len(sent) != 2 || sent[0].Topic != "spans" || sent[0].Key[0] != 7 || sent[1].Key[0] != 9 {
		t.Fatalf("sent %d records, want 2 keyed by their trace ids", len(sent))
	}
	for i, want := range []int{2, 1} {
		d, err := decodeSpans(sent[i].Value, maxSpansPerRequest, nil)
		if err != nil || len(d.spans) != want || d.spans[0].traceID[0] != sent[i].Key[0] {
			t.Fatalf("record %d holds %d spans (err %v), want %d of its trace", i, len(d.spans), err, want)
		}
	}
	if code := post("application/x-protobuf", []byte{0xff, 0xff}); code != http.StatusBadRequest {
		t.Fatalf("garbage: status %d", code)
	}
	if code := post("application/json", []byte("{}")); code != http.StatusUnsupportedMediaType {
		t.Fatalf("json: status %d", code)
	}
	sendErr = errors.New("no brokers")
	if code := post("application/x-protobuf", body); code != http.StatusServiceUnavailable {
		t.Fatalf("kafka down: status %d", code)
	}
	// The response is an ExportTraceServiceResponse the exporters can decode.
	sendErr = nil
	req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	w := httptest.NewRecorder()
	rcv.ServeHTTP(w, req)
	if err := ptraceotlp.NewExportResponse().UnmarshalProto(w.Body.Bytes()); err != nil {
		t.Fatalf("response: %v", err)
	}
}

// fakeRecordReader answers record reads from a map of (topic, partition, offset) → probe; partitions in noLeader
// answer "no leader" until the metadata is refreshed.
type fakeRecordReader struct {
	probes    map[recordKey]lagexporter.RecordProbe
	noLeader  map[int32]bool
	refreshes int
}

func (f *fakeRecordReader) Metadata(context.Context) ([]lagexporter.TopicObservation, error) {
	f.refreshes++
	f.noLeader = nil
	return nil, nil
}

func (f *fakeRecordReader) ReadRecords(_ context.Context, reqs []lagexporter.RecordRequest) ([]lagexporter.RecordProbe, error) {
	out := make([]lagexporter.RecordProbe, len(reqs))
	for i, r := range reqs {
		switch p, ok := f.probes[recordKey{r.Topic, r.Partition, r.Offset}]; {
		case f.noLeader[r.Partition]:
			out[i] = lagexporter.RecordProbe{Offset: r.Offset, TimestampOffset: -1, Error: "no leader"}
		case ok:
			out[i] = p
		default: // nothing there: the next record's timestamp is found instead
			out[i] = lagexporter.RecordProbe{Offset: r.Offset, TimestampOffset: r.Offset + 1, Timestamp: time.UnixMilli(1)}
		}
	}
	return out, nil
}

// TestClusterAppends: a LogAppendTime record gives its stamp and appending broker, a CreateTime record none, an
// offset whose record is gone (a timestamp found only further on) none; a partition without a leader is read again
// after one metadata refresh (the leaders were last read over a second ago).
func TestClusterAppends(t *testing.T) {
	ts := time.UnixMilli(1_764_000_000_000)
	f := &fakeRecordReader{noLeader: map[int32]bool{2: true}, probes: map[recordKey]lagexporter.RecordProbe{
		{"t", 0, 5}: {Offset: 5, TimestampOffset: 5, Timestamp: ts, AppendClock: &lagexporter.AppendClock{Broker: 3}},
		{"t", 1, 5}: {Offset: 5, TimestampOffset: 5, Timestamp: ts}, // CreateTime
		{"t", 2, 5}: {Offset: 5, TimestampOffset: 5, Timestamp: ts, AppendClock: &lagexporter.AppendClock{Broker: 1}},
	}}
	c := &clusterAppends{r: f, refreshed: time.Now().Add(-2 * time.Second)}
	got, err := c.ReadAppends(context.Background(), []recordKey{{"t", 0, 5}, {"t", 1, 5}, {"t", 2, 5}, {"t", 0, 9}})
	if err == nil {
		t.Fatal("no error for the record that is gone")
	}
	want := map[recordKey]appendStamp{
		{"t", 0, 5}: {ms: ts.UnixMilli(), broker: 3},
		{"t", 1, 5}: {broker: -1},
		{"t", 2, 5}: {ms: ts.UnixMilli(), broker: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("%v: got %+v, want %+v", k, got[k], w)
		}
	}
	if f.refreshes != 1 {
		t.Fatalf("%d metadata refreshes, want 1", f.refreshes)
	}
}

// TestOTLPGRPCReceiver: the OTLP/gRPC trace service writes an export like the HTTP receiver (one record per trace,
// keyed by it), answers Unavailable when Kafka does not take it, and stops when its context ends.
func TestOTLPGRPCReceiver(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	a := javaProducer("p", "orders", 0, 1, t0, t0.Add(time.Millisecond))
	b := javaProcess("c", "g", "orders", 0, 1, t0, t0.Add(time.Millisecond))
	b.trace = 9
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(otlpRequest(t, a, b)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sent []kafka.Message
	var sendErr error
	rcv := &otlpReceiver{topic: "spans", log: slog.New(slog.DiscardHandler), send: func(ms []kafka.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if sendErr != nil {
			return sendErr
		}
		sent = append(sent, ms...)
		return nil
	}}
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveOTLPGRPC(ctx, addr, rcv, slog.New(slog.DiscardHandler)) }()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := ptraceotlp.NewGRPCClient(cc)
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	// WaitForReady: the first call waits for the server to listen instead of failing at once.
	if _, err := client.Export(rctx, req, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(sent) != 2 || sent[0].Key[0] != 0 || sent[1].Key[0] != 9 {
		t.Fatalf("sent %d records, want 2 keyed by their trace ids", len(sent))
	}
	sendErr = errors.New("no brokers")
	mu.Unlock()
	if _, err := client.Export(rctx, req); status.Code(err) != codes.Unavailable {
		t.Fatalf("kafka down: %v, want Unavailable", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
