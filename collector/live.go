package collector

import (
	"encoding/hex"
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
	vec     *prometheus.HistogramVec // StageLatency
	group   string
	topic   string
	// stages are created on a stage's first observation, so that a topic that is not mirrored has no mirror series.
	stages [len(liveStages)]atomic.Pointer[observer]
	// lastEx holds, per e2e bucket (the last is +Inf), the reference-clock Unix ns of its last exemplar.
	lastEx []atomic.Int64
}

// liveHistograms hands out the liveSeries of each (group, topic), created on first use.
// The zero value is ready to use.
type liveHistograms struct {
	series sync.Map // groupTopic → *liveSeries
}

type groupTopic struct{ group, topic string }

type observer struct{ prometheus.Observer }

func (h *liveHistograms) get(m *Metrics, group, topic string) *liveSeries {
	k := groupTopic{group, topic}
	if s, ok := h.series.Load(k); ok {
		return s.(*liveSeries)
	}
	s := &liveSeries{buckets: m.LatencyBuckets, e2e: m.E2ELatency.WithLabelValues(group, topic),
		lastEx: make([]atomic.Int64, len(m.LatencyBuckets)+1), vec: m.StageLatency, group: group, topic: topic}
	v, _ := h.series.LoadOrStore(k, s)
	return v.(*liveSeries)
}

// observe records a result in the live histograms by the engine's rule for its live sketches: a record of class
// live that is not commit-bounded feeds each stage the engine trusts (latency.Result.Trusted: resting on no
// skew-suspected or unsettled pair of stamps), so a record whose cross-clock stage is uncertain still feeds its
// same-host processing stage; anything else is left out, as the live percentiles leave it out. traceID (16 bytes, or nil) becomes the e2e observation's exemplar, at most one per bucket per exemplarEvery
// of the reference clock now.
func (s *liveSeries) observe(res *latency.Result, traceID []byte, now time.Time) {
	if res.Class != latency.ClassLive || res.Flags&latency.FlagCommitBound != 0 {
		return
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
