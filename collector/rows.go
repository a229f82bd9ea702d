package collector

import (
	"encoding/hex"
	"math"
	"math/bits"
	"strconv"
	"sync"
	"time"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/latency"
)

// hosts names host clocks by the engine's ids (the engine holds the only name table, bounded by latency.max_hosts
// and collector.idle_ttl) and feeds the clock offsets hosts report (time sync) to the engine when they change or at
// most every reportEvery, so the per-record path rarely takes an engine lock while the engine's window still gets
// samples spread over time (it needs them to fit drift and settle).
type hosts struct {
	engine *latency.Engine

	// mu guards reported: the last offset reported per host id and when. It holds at most twice the engine's
	// MaxHosts ids: past that, the ids of hosts the engine has forgotten are dropped (such an id resolves to no host
	// any more, see latency.Engine.Host).
	mu       sync.Mutex
	reported map[latency.HostID]lastReport
	maxIDs   int
}

type lastReport struct {
	offset, unc time.Duration
	at          time.Time
}

// reportEvery is how often an unchanged self-reported offset is fed to the engine again.
const reportEvery = 2 * time.Second

func newHosts(e *latency.Engine) *hosts {
	return &hosts{engine: e, reported: map[latency.HostID]lastReport{}, maxIDs: 2*e.Config().MaxHosts + 1}
}

// id returns the engine's id of the named host, marking it used (a lock-free lookup for a known host).
func (h *hosts) id(name string) latency.HostID { return h.engine.Host(name) }

// report feeds a host's self-reported (time-synced) offset when it differs from the last one reported or the last
// report is older than reportEvery.
func (h *hosts) report(id latency.HostID, offset, unc time.Duration, at time.Time) {
	h.mu.Lock()
	last, ok := h.reported[id]
	if ok && last.offset == offset && last.unc == unc && at.Sub(last.at) < reportEvery && !at.Before(last.at) {
		h.mu.Unlock()
		return
	}
	if !ok && len(h.reported) >= h.maxIDs {
		for k := range h.reported {
			if h.engine.HostName(k) == "" {
				delete(h.reported, k)
			}
		}
	}
	h.reported[id] = lastReport{offset, unc, at}
	h.mu.Unlock()
	_ = h.engine.ReportOffset(id, offset, unc, at)
}

// brokerHost is the host id of a broker's clock, as stored in broker_host and clock_offsets.host.
func brokerHost(id int32) string { return "broker-" + strconv.Itoa(int(id)) }

// rawStamps are a record's stamps in Unix ms on their own hosts' clocks, 0 when absent.
type rawStamps struct {
	event, append, receive, processed int64
}

func nsToMs(ns int64) int64 { return ns / 1e6 }

// latencyRow builds a latency_events row from a record's raw stamps and the engine's result.
func latencyRow(src store.Source, group, topic string, partition int32, raw rawStamps, res *latency.Result,
	producer, broker, consumer string, traceID []byte, spanID []byte) store.LatencyRow {
	var row store.LatencyRow
	latencyRowInto(&row, src, group, topic, partition, raw, res, e2eBounds{}, producer, broker, consumer)
	row.TraceID, row.SpanID = traceHex(traceID, spanID)
	return row
}

// latencyRowInto is latencyRow without trace ids, written into *row, which must be zero: the receipts path builds
// its rows in place in the batch's slice (one copy of the row less, and no bulk write barrier while the GC
// marks) and makes their trace ids per record (traceHexes). e2e is res's end-to-end interval, if the caller has it.
func latencyRowInto(row *store.LatencyRow, src store.Source, group, topic string, partition int32, raw rawStamps,
	res *latency.Result, e2e e2eBounds, producer, broker, consumer string) {
	row.Group, row.Topic, row.Partition, row.Offset = group, topic, partition, res.Offset
	row.Source, row.Class = src, replayClass(res.Class)
	row.EventMs, row.AppendMs, row.ReceiveMs, row.ProcessedMs = raw.event, raw.append, raw.receive, raw.processed
	row.Flags = uint32(res.Flags)
	row.ProducerHost, row.BrokerHost, row.ConsumerHost = producer, broker, consumer
	naiveStages(row, raw)
	sr := stageRounder{row: row, res: res, e2eBounds: e2e}
	sr.stage(latency.StageIngest, store.ValidIngest, &row.IngestMs)
	sr.stage(latency.StageQueueWait, store.ValidQueue, &row.QueueMs)
	sr.stage(latency.StageProcessing, store.ValidProcess, &row.ProcessMs)
	sr.e2e()
	if !math.IsNaN(res.Uncertainty) {
		row.UncertaintyMs = res.Uncertainty
	}
	for _, m := range [...]latency.Moment{latency.Processed, latency.Receive, latency.Commit} {
		if v := res.Corrected[m]; v > 0 {
			row.ObservedMs = int64(v)
			break
		}
	}
}

// replayClass is the latency_events.replay_class of an engine class (store.ClassUnknown for none of them).
func replayClass(c latency.Class) store.ReplayClass {
	switch c {
	case latency.ClassLive:
		return store.ClassLive
	case latency.ClassReplay:
		return store.ClassReplay
	case latency.ClassRedelivery:
		return store.ClassRedelivery
	case latency.ClassBackfill:
		return store.ClassBackfill
	}
	return store.ClassUnknown
}

// naiveStages sets row's naive stages (later raw stamp − earlier, each on its own host's clock: what tools without
// clock correction show) and their Naive bits, for every stage whose two raw stamps are present.
func naiveStages(row *store.LatencyRow, raw rawStamps) {
	naive := func(from, to int64, bit store.StageBits, dst *int64) {
		if from > 0 && to > 0 {
			*dst = to - from
			row.Valid |= bit
		}
	}
	naive(raw.event, raw.append, store.NaiveIngest, &row.IngestNaiveMs)
	naive(raw.append, raw.receive, store.NaiveQueue, &row.QueueNaiveMs)
	naive(raw.receive, raw.processed, store.NaiveProcess, &row.ProcessNaiveMs)
	naive(raw.event, raw.processed, store.NaiveE2E, &row.E2ENaiveMs)
}

// stageRounder writes a result's corrected stages into a row, in causal order. Stages are rounded to whole ms by
// rounding their running sums, so the stored stages still add up to the stored end-to-end exactly (independent
// rounding could be off by one or two).
//
// A stage is valid for percentiles only when the engine trusts its own correction (latency.Result.Trusted): it is
// valid (its ends' clocks placed, no order violated beyond the uncertainty), however wide its interval. A record
// with an invalid cross-clock stage still contributes its other stages, e.g. its same-host processing stage, as the
// engine's own sketches do.
type stageRounder struct {
	row         *store.LatencyRow
	res         *latency.Result
	prev        float64 // running sum of the stages written, unrounded (ms)
	prevRounded int64   // the same sum, rounded
	e2eBounds   e2eBounds
}

// stage writes stage s into dst with its bit. On a mirrored topic the ingest column covers produce → local append:
// the mirror stage is added to it (the column alone when there is no ingest of its own), trusted only when both are.
func (r *stageRounder) stage(s latency.Stage, bit store.StageBits, dst *int64) {
	res := r.res
	v, ok := res.Stage(s)
	lo, hi, _ := res.StageBounds(s)
	if s == latency.StageIngest {
		if m, okm := res.Stage(latency.StageMirror); okm {
			mlo, mhi, _ := res.StageBounds(latency.StageMirror)
			if !ok { // no ingest of its own: the column is the mirror stage alone
				lo, hi = 0, 0
			}
			v, ok = v+m, true
			lo, hi = lo+mlo, hi+mhi // a sum of two stages lies between the sums of their ends
		}
	}
	if !ok {
		return
	}
	trusted := res.Trusted(s)
	if s == latency.StageIngest && res.Has&(1<<latency.StageMirror) != 0 {
		trusted = trusted && res.Trusted(latency.StageMirror) // the column is only as good as both parts
	}
	cum := r.prev + v
	rounded := int64(math.Round(cum))
	*dst = rounded - r.prevRounded
	r.prev, r.prevRounded = cum, rounded
	if trusted {
		r.row.Valid |= bit
	}
	setBound(r.row, bit, float64(*dst), lo, hi)
}

// e2e writes the end-to-end stage, rounded on its own (the stages' running sum rounds to it). A commit-bounded
// end-to-end is an upper bound only: never valid for percentiles.
func (r *stageRounder) e2e() {
	res := r.res
	v, ok := res.Stage(latency.StageE2E)
	if !ok {
		return
	}
	r.row.E2EMs = int64(math.Round(v))
	lo, hi := r.e2eBounds.get(res)
	setBound(r.row, store.ValidE2E, float64(r.row.E2EMs), lo, hi)
	if res.Trusted(latency.StageE2E) && res.Flags&latency.FlagCommitBound == 0 {
		r.row.Valid |= store.ValidE2E
	}
}

// setBound stores a stage's interval (latency.Result.StageBounds), widened to hold the stored, rounded estimate est:
// a wider interval still holds the true value, and every band then contains its estimate.
func setBound(row *store.LatencyRow, bit store.StageBits, est, lo, hi float64) {
	i := bits.TrailingZeros8(uint8(bit))
	row.LowerMs[i], row.UpperMs[i] = math.Min(lo, est), math.Max(hi, est)
	row.Bounded |= bit
}

// traceHex returns the lowercase hex of a 16-byte trace id and an 8-byte span id ("" for any other length). Both
// come from one allocation when both are present (the span id a substring of it): the receipts path holds every
// row in flight until ClickHouse acknowledges it, and every object it holds is one more for the collector to mark.
func traceHex(traceID, spanID []byte) (tid, sid string) {
	if len(traceID) == 16 && len(spanID) == 8 {
		var buf [48]byte
		hex.Encode(buf[:32], traceID)
		hex.Encode(buf[32:], spanID)
		s := string(buf[:])
		return s[:32], s[32:]
	}
	if len(traceID) == 16 {
		tid = hex.EncodeToString(traceID)
	}
	if len(spanID) == 8 {
		sid = hex.EncodeToString(spanID)
	}
	return tid, sid
}

func durMs(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// boundMs is an interval end in ms, ±Inf for latency.Unbounded.
func boundMs(d time.Duration) float64 {
	switch d {
	case latency.Unbounded:
		return math.Inf(1)
	case -latency.Unbounded:
		return math.Inf(-1)
	}
	return durMs(d)
}

// clockRows converts the engine's current offsets to clock_offsets rows (the reference host and hosts without an
// estimate are left out).
func clockRows(offs []latency.Offset) []store.ClockOffsetRow {
	out := make([]store.ClockOffsetRow, 0, len(offs))
	for _, o := range offs {
		var k store.ClockKind
		switch o.Kind {
		case latency.KindBracketed:
			k = store.ClockBracketed
		case latency.KindSynced, latency.KindReported:
			k = store.ClockSynced
		case latency.KindEnvelope:
			k = store.ClockEnvelope
		default:
			continue
		}
		row := store.ClockOffsetRow{
			At: o.At, Host: o.Host, Kind: k,
			OffsetMs:      durMs(o.Offset),
			UncertaintyMs: durMs(o.Uncertainty),
			Samples:       uint32(max(0, o.Samples)),
			LowerMs:       boundMs(o.Lower), UpperMs: boundMs(o.Upper),
			MinDelayMs: durMs(o.MinDelay),
		}
		if o.OneSided() {
			row.UncertaintyMs = math.Inf(1) // no half-width: the envelope's own small uncertainty is not a precision
		}
		est, _ := o.Estimate()
		row.EstimateMs = durMs(est)
		out = append(out, row)
	}
	return out
}
