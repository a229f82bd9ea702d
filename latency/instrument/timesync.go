package instrument

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// TimeSyncPath is where the collector serves [TimeSyncHandler].
const TimeSyncPath = "/v1/timesync"

const timeSyncVersion = 1

// TimeSyncHandler serves the round-trip time-sync exchange on the reference clock (the collector's).
//
// Exchange v1 (HTTP POST, binary, big-endian): the request body is 9 bytes, version = 1 and t0 (int64 ns, client
// clock, when the request was sent); the response body is 25 bytes, version = 1, t0 echoed, t1 (server clock when the
// request arrived) and t2 (server clock when the response was written). Any other body is answered 400.
func TimeSyncHandler(clock Clock) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t1 := clock.now().UnixNano()
		if req.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 64))
		if err != nil || len(body) != 9 || body[0] != timeSyncVersion {
			http.Error(w, "want 9 bytes: version 1, int64 t0", http.StatusBadRequest)
			return
		}
		out := make([]byte, 0, 25)
		out = append(out, timeSyncVersion)
		out = append(out, body[1:9]...)
		out = binary.BigEndian.AppendUint64(out, uint64(t1))
		out = binary.BigEndian.AppendUint64(out, uint64(clock.now().UnixNano()))
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(out)
	})
}

// Bracket computes a clock offset from one exchange: t0 and t3 on the client clock (send, receive), t1 and t2 on the
// reference clock (arrival, reply). The request cannot arrive before it was sent and the reply cannot be received
// before it was written, so host − reference lies in [t0 − t1, t3 − t2]; the estimate is the midpoint and the
// uncertainty half the width, which equals half the round trip excluding server time (NTP, RFC 5905 §8).
func Bracket(t0, t1, t2, t3 int64) ClockOffset {
	lo, hi := t0-t1, t3-t2
	if hi < lo { // the server's own clock stepped backwards mid-exchange; keep a valid bracket
		lo, hi = hi, lo
	}
	return ClockOffset{Offset: time.Duration(lo + (hi-lo)/2), Uncertainty: time.Duration((hi - lo + 1) / 2), Valid: true}
}

// TimeSync measures this host's clock offset against the collector's time-sync endpoint. Each sync makes Samples
// exchanges and keeps the one with the smallest uncertainty (the least-delayed round trip bounds the offset best).
// It implements [OffsetSource].
type TimeSync struct {
	url     string
	client  *http.Client
	clock   Clock
	samples int

	// mu guards last.
	mu   sync.Mutex
	last ClockOffset
}

// NewTimeSync returns a time-sync client for the endpoint url (e.g. http://collector:9300/v1/timesync) on this host's
// clock. client nil means a client with a 2 s timeout; samples ≤ 0 means 8.
func NewTimeSync(url string, clock Clock, client *http.Client, samples int) *TimeSync {
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second}
	}
	if samples <= 0 {
		samples = 8
	}
	return &TimeSync{url: url, client: client, clock: clock, samples: samples}
}

// ClockOffset returns the latest measured offset, invalid before the first successful Sync.
func (s *TimeSync) ClockOffset() ClockOffset {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Sync runs one round of exchanges and stores the best. It fails only when every exchange failed.
func (s *TimeSync) Sync(ctx context.Context) (ClockOffset, error) {
	var best ClockOffset
	var lastErr error
	for i := 0; i < s.samples; i++ {
		o, err := s.exchange(ctx)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if !best.Valid || o.Uncertainty < best.Uncertainty {
			best = o
		}
	}
	if !best.Valid {
		return best, fmt.Errorf("time sync with %s: %w", s.url, lastErr)
	}
	s.mu.Lock()
	s.last = best
	s.mu.Unlock()
	return best, nil
}

// Run syncs every interval until ctx is done. Failed rounds keep the previous estimate.
func (s *TimeSync) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_, _ = s.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *TimeSync) exchange(ctx context.Context) (ClockOffset, error) {
	body := make([]byte, 0, 9)
	body = append(body, timeSyncVersion)
	t0 := s.clock.now().UnixNano()
	body = binary.BigEndian.AppendUint64(body, uint64(t0))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return ClockOffset{}, fmt.Errorf("build time-sync request: %w", err)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return ClockOffset{}, fmt.Errorf("time-sync exchange: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	t3 := s.clock.now().UnixNano()
	if err != nil {
		return ClockOffset{}, fmt.Errorf("read time-sync reply: %w", err)
	}
	if resp.StatusCode != http.StatusOK || len(out) != 25 || out[0] != timeSyncVersion {
		return ClockOffset{}, fmt.Errorf("time-sync reply: status %d, %d bytes: %w", resp.StatusCode, len(out), ErrMalformed)
	}
	if echo := int64(binary.BigEndian.Uint64(out[1:9])); echo != t0 {
		return ClockOffset{}, fmt.Errorf("time-sync reply echoes t0 %d, sent %d: %w", echo, t0, ErrMalformed)
	}
	t1 := int64(binary.BigEndian.Uint64(out[9:17]))
	t2 := int64(binary.BigEndian.Uint64(out[17:25]))
	return Bracket(t0, t1, t2, t3), nil
}
