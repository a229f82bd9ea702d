package collector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidemark/tidemark/internal/kafka"
	"github.com/tidemark/tidemark/lagexporter"
)

// recordReader is the part of internal/kafka/lagread's ClusterReader the spans path reads append times with: one
// bounded Fetch per leader and call, a few KiB from each requested offset.
type recordReader interface {
	Metadata(ctx context.Context) ([]lagexporter.TopicObservation, error)
	ReadRecords(ctx context.Context, reqs []lagexporter.RecordRequest) ([]lagexporter.RecordProbe, error)
}

// clusterAppends reads LogAppendTime stamps by offset through a recordReader, refreshing the partition leaders
// (at most once a second) when a partition has none.
type clusterAppends struct {
	r         recordReader
	mu        sync.Mutex // guards refreshed
	refreshed time.Time
}

// maxAppendReads bounds the ReadRecords calls one ReadAppends makes: each answers at least the lowest offset asked
// of every partition, and every other one its fetched bytes cover.
const maxAppendReads = 32

// ReadAppends implements appendReader. A key whose record keeps a CreateTime is answered with ms 0.
func (c *clusterAppends) ReadAppends(ctx context.Context, keys []recordKey) (map[recordKey]appendStamp, error) {
	out := make(map[recordKey]appendStamp, len(keys))
	reqs := make([]lagexporter.RecordRequest, len(keys))
	for i, k := range keys {
		reqs[i] = lagexporter.RecordRequest{Topic: k.topic, Partition: k.partition, Offset: k.offset, End: k.offset + 1}
	}
	c.mu.Lock()
	if c.refreshed.IsZero() {
		c.refreshLocked(ctx)
	}
	c.mu.Unlock()
	var lastErr string
	for round := 0; round < maxAppendReads && len(reqs) > 0; round++ {
		probes, _ := c.r.ReadRecords(ctx, reqs) // per-request errors are in the probes
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		rest := reqs[:0:0]
		noLeader := false
		for i, p := range probes {
			rq := reqs[i]
			switch {
			case p.Error == "" && p.TimestampOffset == rq.Offset:
				st := appendStamp{broker: -1}
				if p.AppendClock != nil {
					st = appendStamp{ms: p.Timestamp.UnixMilli(), broker: p.AppendClock.Broker}
				}
				out[recordKey{rq.Topic, rq.Partition, rq.Offset}] = st
			case p.Error == "":
				// No record with a timestamp at that offset (compacted away, or an offset the span made up): none.
				lastErr = fmt.Sprintf("%s/%d: no record at offset %d", rq.Topic, rq.Partition, rq.Offset)
			default:
				noLeader = noLeader || p.Error == "no leader"
				lastErr = fmt.Sprintf("%s/%d@%d: %s", rq.Topic, rq.Partition, rq.Offset, p.Error)
				rest = append(rest, rq)
			}
		}
		if len(rest) == len(reqs) && !noLeader {
			break // no progress
		}
		if noLeader {
			c.mu.Lock()
			if time.Since(c.refreshed) >= time.Second {
				c.refreshLocked(ctx)
			} else {
				rest = rest[:0] // refreshed a moment ago: those partitions have no leader now
			}
			c.mu.Unlock()
		}
		reqs = rest
	}
	if len(out) < len(keys) && lastErr != "" {
		return out, fmt.Errorf("read append times: %d of %d records not read, e.g. %s", len(keys)-len(out), len(keys), lastErr)
	}
	return out, nil
}

func (c *clusterAppends) refreshLocked(ctx context.Context) {
	c.refreshed = time.Now()
	_, _ = c.r.Metadata(ctx) // partial failure leaves those partitions without a leader: answered as such
}

// otlpHTTPMaxBody bounds one OTLP request (HTTP body or gRPC message; the OpenTelemetry exporters' batches are far
// smaller).
const otlpHTTPMaxBody = 8 << 20

// otlpReceiver serves OTLP/HTTP protobuf trace exports (POST /v1/traces) and writes each request into the spans
// topic, split by trace id and keyed by it. It answers 200 with an empty ExportTraceServiceResponse once Kafka
// acknowledged the records; 400 for a body that is not a protobuf ExportTraceServiceRequest, 415 for another
// content type (JSON is not served), 503 when Kafka did not take the records (the exporters retry).
type otlpReceiver struct {
	topic string
	send  func(ms []kafka.Message) error
	log   *slog.Logger
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an OTLP ExportTraceServiceRequest", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "only application/x-protobuf is served", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, otlpHTTPMaxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	req := ptraceotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		http.Error(w, "not an OTLP ExportTraceServiceRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := o.write(req); err != nil {
		if errors.Is(err, errSpansTopic) {
			http.Error(w, "spans topic unavailable", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// errSpansTopic marks an export the spans topic did not take: the exporter should retry.
var errSpansTopic = errors.New("spans topic unavailable")

// write splits req by trace id and writes it into the spans topic, waiting for Kafka's acknowledgement.
func (o *otlpReceiver) write(req ptraceotlp.ExportRequest) error {
	keys, parts := splitByTrace(req.Traces())
	ms := make([]kafka.Message, 0, len(parts))
	for i, td := range parts {
		b, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
		if err != nil {
			return fmt.Errorf("encode spans of one trace: %w", err)
		}
		ms = append(ms, kafka.Message{Topic: o.topic, Partition: -1, Key: keys[i], Value: b})
	}
	if len(ms) == 0 {
		return nil
	}
	if err := o.send(ms); err != nil {
		o.log.Warn("OTLP receiver: spans not written to the spans topic", "records", len(ms), "err", err)
		return fmt.Errorf("%w: %w", errSpansTopic, err)
	}
	return nil
}

// otlpGRPC is the OTLP/gRPC trace service over the same writes: Unavailable when the spans topic did not take the
// spans (the exporters retry).
type otlpGRPC struct {
	ptraceotlp.UnimplementedGRPCServer
	r *otlpReceiver
}

// Export implements ptraceotlp.GRPCServer.
func (g *otlpGRPC) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if err := g.r.write(req); err != nil {
		if errors.Is(err, errSpansTopic) {
			return ptraceotlp.NewExportResponse(), status.Error(codes.Unavailable, err.Error())
		}
		return ptraceotlp.NewExportResponse(), status.Error(codes.Internal, err.Error())
	}
	return ptraceotlp.NewExportResponse(), nil
}

// serveOTLPGRPC serves the OTLP/gRPC trace service on addr until ctx ends (then stops gracefully within 5 s).
func serveOTLPGRPC(ctx context.Context, addr string, r *otlpReceiver, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("collector.spans.otlp_grpc_listen: %w", err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(otlpHTTPMaxBody))
	ptraceotlp.RegisterGRPCServer(srv, &otlpGRPC{r: r})
	log.Info("serving OTLP/gRPC trace exports into the spans topic", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("OTLP/gRPC receiver: %w", err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	<-errc
	return nil
}

// serveOTLP serves the OTLP receiver on addr until ctx ends (then shuts down within 5 s).
func serveOTLP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("collector.spans.otlp_http_listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/traces", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving OTLP/HTTP trace exports into the spans topic", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("OTLP receiver: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
