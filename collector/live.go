package collector

import (
	"encoding/hex"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/latency"
)

// exemplarEvery is the least time between two exemplars of one bucket of one series. Prometheus keeps only the
// last exemplar per bucket and scrapes every 15-60 s, so one a second loses nothing a user can see, while building
// an exemplar (labels, timestamp) for every one of 100k+ receipts a second would cost more than the observation.
const exemplarEvery = time.Second

// liveStages are the stages observed in tidemark_stage_latency_seconds: the ones that partition end-to-end
// (delivery = queue_wait + processing and e2e itself are not repeated).
var liveStages = [...]latency.Stage{latency.StageIngest, latency.StageMirror, latency.StageQueueWait, latency.StageProcessing}

// liveSeries are one (group, topic)'s live latency histograms. Safe for concurrent use: the receipts of one
// (group, topic) may arrive on several receipts partitions at once.
type liveSeries struct {
	buckets []float64
	e2e     prometheus.Observer
	// lower, upper and unbounded are the e2e samples' interval ends (E2EBound) and unbounded count (E2EUnbounded).
	lower, upper prometheus.Observer
	unbounded    prometheus.Counter
	vec          *prometheus.HistogramVec // StageLatency
	group        string
	topic        string
	// stages are created on a stage's first observation, so that a topic that is not mirrored has no mirror series.
	stages [len(liveStages)]atomic.Pointer[observer]
	// lastEx holds, per e2e bucket (the last is +Inf), the reference-clock Unix ns of its last exemplar.
	lastEx []atomic.Int64
	// used is the reference-clock Unix second of the last observation (or of creation): sweep deletes the series
	// once it is older than the idle TTL.
	used atomic.Int64
}

// liveHistograms hands out the liveSeries of each (group, topic), created on first use, at most max of them (0: no
// bound), and deletes those idle longer than a TTL (sweep). The zero value is ready to use, unbounded.
type liveHistograms struct {
	max int

	mu     sync.Mutex // guards series
	series map[groupTopic]*liveSeries
}

type groupTopic struct{ group, topic string }

type observer struct{ prometheus.Observer }

// get returns (group, topic)'s series, or nil when max pairs have series already: the caller counts what it does
// not observe (Metrics.LiveOverflow).
func (h *liveHistograms) get(m *Metrics, group, topic string, now time.Time) *liveSeries {
	k := groupTopic{group, topic}
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.series[k]; ok {
		s.used.Store(now.Unix()) // handed out: not swept from under the batch that holds it
		return s
	}
	if h.max > 0 && len(h.series) >= h.max {
		return nil
	}
	if h.series == nil {
		h.series = map[groupTopic]*liveSeries{}
	}
	s := &liveSeries{buckets: m.LatencyBuckets, e2e: m.E2ELatency.WithLabelValues(group, topic),
		lastEx: make([]atomic.Int64, len(m.LatencyBuckets)+1), vec: m.StageLatency, group: group, topic: topic,
		lower: m.E2EBound.WithLabelValues("lower", group, topic), upper: m.E2EBound.WithLabelValues("upper", group, topic),
		unbounded: m.E2EUnbounded.WithLabelValues(group, topic)}
	s.used.Store(now.Unix())
	h.series[k] = s
	m.LiveLabelSets.Set(float64(len(h.series)))
	return s
}

// sweep deletes the series of every pair not observed for idle or longer, from the registry too (their histograms
// disappear from /metrics), and returns how many pairs it deleted. A batch still holding a deleted pair's
// liveSeries observes into the deleted children (lost), at most until its end; the next batch makes new ones.
func (h *liveHistograms) sweep(m *Metrics, now time.Time, idle time.Duration) int {
	cut := now.Add(-idle).Unix()
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k, s := range h.series {
		if s.used.Load() >= cut {
			continue
		}
		m.E2ELatency.DeleteLabelValues(k.group, k.topic)
		m.E2EBound.DeleteLabelValues("lower", k.group, k.topic)
		m.E2EBound.DeleteLabelValues("upper", k.group, k.topic)
		m.E2EUnbounded.DeleteLabelValues(k.group, k.topic)
		for i, st := range liveStages {
			if s.stages[i].Load() != nil {
				m.StageLatency.DeleteLabelValues(st.String(), k.group, k.topic)
			}
		}
		delete(h.series, k)
		n++
	}
	m.LiveLabelSets.Set(float64(len(h.series)))
	return n
}

// observe records a result in the live histograms by the engine's rule for its live sketches: a record of class
// live that is not commit-bounded feeds each stage the engine trusts (latency.Result.Trusted: valid, however wide
// its interval), so a record with an invalid cross-clock stage still feeds its other stages (an end-to-end between
// two known clocks whatever the broker between them, a same-host processing stage); anything else is left out, as
// the live percentiles leave it out. traceID (16 bytes, or nil) becomes the e2e observation's exemplar, at most one per bucket per exemplarEvery
// of the reference clock now.
func (s *liveSeries) observe(res *latency.Result, traceID []byte, now time.Time) {
	s.observeWith(res, e2eBounds{}, traceID, now)
}

// e2eBounds is a result's end-to-end interval (latency.Result.StageBounds) when its caller has it already (ok), so
// that the live histograms and the row compute it once.
type e2eBounds struct {
	lo, hi float64
	ok     bool
}

// get returns the interval, computing it from res unless b holds it.
func (b e2eBounds) get(res *latency.Result) (lo, hi float64) {
	if b.ok {
		return b.lo, b.hi
	}
	lo, hi, _ = res.StageBounds(latency.StageE2E)
	return lo, hi
}

// observeWith is observe with the result's e2e interval, if its caller has it.
func (s *liveSeries) observeWith(res *latency.Result, e2e e2eBounds, traceID []byte, now time.Time) {
	if res.Class != latency.ClassLive || res.Flags&latency.FlagCommitBound != 0 {
		return
	}
	if t := now.Unix(); s.used.Load() != t {
		s.used.Store(t)
	}
	if ms := res.Stages[latency.StageE2E]; res.Trusted(latency.StageE2E) {
		v := ms / 1e3
		i := sort.SearchFloat64s(s.buckets, v) // the bucket v falls in: the first bound >= v, len for +Inf
		ex := s.lastEx[i].Load()
		if at := now.UnixNano(); len(traceID) == 16 && at-ex >= int64(exemplarEvery) && s.lastEx[i].CompareAndSwap(ex, at) {
			s.e2e.(prometheus.ExemplarObserver).ObserveWithExemplar(v, prometheus.Labels{"trace_id": hex.EncodeToString(traceID)})
		} else {
			s.e2e.Observe(v)
		}
		lo, hi := e2e.get(res)
		lo, hi = math.Min(lo, ms), math.Max(hi, ms) // the band holds its estimate
		s.lower.Observe(lo / 1e3)
		s.upper.Observe(hi / 1e3)
		if math.IsInf(hi, 1) {
			s.unbounded.Inc()
		}
	}
	for i, st := range liveStages {
		if ms := res.Stages[st]; res.Trusted(st) {
			o := s.stages[i].Load()
			if o == nil { // WithLabelValues returns the same child to racing callers
				o = &observer{s.vec.WithLabelValues(st.String(), s.group, s.topic)}
				s.stages[i].Store(o)
			}
			o.Observe(ms / 1e3)
		}
	}
}
