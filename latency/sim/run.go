package sim

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/tidemark/tidemark/latency"
)

// Errors collects |corrected − true| of one stage over live, unflagged records, in ms, and the same error
// normalised by the target max(2 ms, 2 % of the true stage).
type Errors struct {
	Abs  []float64
	Norm []float64
}

// Quantile returns the q-quantile of the absolute errors (nearest rank), NaN when empty.
func (e *Errors) Quantile(q float64) float64 { return quantile(e.Abs, q) }

// NormQuantile returns the q-quantile of the normalised errors; <= 1 meets the target.
func (e *Errors) NormQuantile(q float64) float64 { return quantile(e.Norm, q) }

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Report is a scenario's score.
type Report struct {
	Scenario string
	Records  int
	Live     int // records the engine put in live percentiles
	Flagged  int // records flagged skew-suspected
	// Unsettled counts records kept out of live percentiles while an offset had no drift fit yet (warm-up).
	Unsettled int
	// TrueLive counts records whose true class is live; LiveExcluded those of them the engine did not feed to the
	// live percentiles with all their stages (latency.Result.Live false: an invalid stage). LiveExcludedRatio is
	// their quotient. The Warm fields count the same over records appended in the scenario's first WarmUp.
	TrueLive, LiveExcluded         int
	TrueLiveWarm, LiveExcludedWarm int
	// TrueLiveStages counts the present stages of truly live records; LiveStagesExcluded those of them that did not
	// feed the live sketches (a flagged record still feeds its trusted stages, latency.Result.Trusted).
	TrueLiveStages, LiveStagesExcluded int
	// Stage errors of the stages that fed the live sketches (all stages of live records, the trusted stages of
	// flagged ones) of records whose true class is live: every valid stage, however wide its interval. Steady holds
	// the same for records appended after the warm-up (WarmUp), when every offset has its drift fit.
	Stage  [latency.NumStages]Errors
	Steady [latency.NumStages]Errors
	// NegativeStages counts corrected stages < 0 over all results; SumMismatch counts results whose partition stages
	// do not add up to e2e (tolerance 1e-6 ms).
	NegativeStages int
	SumMismatch    int
	// Confusion[truth][predicted] counts records by class.
	Confusion [latency.NumClasses][latency.NumClasses]int
	MinIngest float64
	// AcksUsed and AcksRefused count the producer acknowledgements the engine took as brackets and those it refused
	// (their broker not bracketed yet, a clock step): Scenario.ProducerAcks.
	AcksUsed, AcksRefused int
	// Elapsed is the wall time spent inside the engine (brackets, syncs, commits and records).
	Elapsed time.Duration
	Engine  *latency.Engine
	// OffsetErr samples |estimated − true offset| (ms) of every non-reference host once per simulated second, by the
	// kind of estimate, after a warm-up of the first 10 s. OffsetScored and OffsetCovered count those samples and
	// how many of them had the true offset within the estimate's stated [Lower, Upper].
	OffsetErr                   [latency.KindReference + 1]Errors
	OffsetScored, OffsetCovered int
	// OffsetMisses keeps the first few estimates whose interval missed the true offset (ms), for diagnosis.
	OffsetMisses []OffsetMiss
	// BeforeFailover and AfterFailover pool the stage errors (as Stage) of records appended after the warm-up and
	// before, and from the scenario's first failover on; both empty without one.
	BeforeFailover, AfterFailover Errors
	// Intervals scores latency.Result.StageBounds over the stages that fed the live sketches of truly live
	// records, by the weakest kind of offset estimate among the clocks the stage spans (StageKind).
	Intervals  [latency.KindReference + 1]IntervalScore
	failoverAt float64               // reference ms of the first failover, +Inf without one
	warmEnd    float64               // reference ms the warm-up ends
	kinds      [3]latency.OffsetKind // by Role: how the scenario's producers, brokers and consumers are placed
}

// WarmUp is the start of every scenario during which no offset has a drift fit yet: a quarter of the default
// two-minute window (latency.Config.Window), after which the engine calls an estimate settled.
const WarmUp = 30 * time.Second

// IntervalScore counts how often a stage's stated interval held its true value, and how wide it was.
type IntervalScore struct {
	Scored, Covered int
	// Widths holds Upper − Lower (ms) of every bounded interval; Open counts the intervals open above (+Inf: an
	// end's offset bounded on one side only, a one-sided causal envelope).
	Widths []float64
	Open   int
	// Misses keeps the first few intervals that missed, for diagnosis.
	Misses []Miss
}

// Miss is one interval that did not hold its stage's true value.
type Miss struct {
	Stage               latency.Stage
	Lower, Value, Upper float64
	Truth               float64
	Flags               latency.Flags
	AppendMs            float64
}

// OffsetMiss is one offset estimate whose stated interval did not hold the true offset.
type OffsetMiss struct {
	Host   string
	Est    latency.Offset
	TrueMs float64
	AtMs   float64
}

// Coverage returns the share of scored intervals that held the truth (1 with none).
func (s *IntervalScore) Coverage() float64 {
	if s.Scored == 0 {
		return 1
	}
	return float64(s.Covered) / float64(s.Scored)
}

// kindOf is how a host of a given mode is placed: the kind of offset estimate it gets.
func kindOf(m Mode) latency.OffsetKind {
	switch m {
	case ModeReference:
		return latency.KindReference
	case ModeEnvelope:
		return latency.KindEnvelope
	case ModeReported:
		return latency.KindReported
	}
	return latency.KindSynced
}

// StageKind returns the weakest kind of offset estimate among the clocks stage s spans in this report's scenario
// (brokers are bracketed); a stage between two stamps of one host takes that host's kind.
func (rep *Report) StageKind(s latency.Stage) latency.OffsetKind {
	role := [latency.NumMoments]Role{latency.Produce: RoleProducer, latency.SourceAppend: RoleBroker,
		latency.Append: RoleBroker, latency.Receive: RoleConsumer, latency.Processed: RoleConsumer, latency.Commit: RoleConsumer}
	x, y := stageEnds(s)
	return min(rep.kinds[role[x]], rep.kinds[role[y]])
}

func stageEnds(s latency.Stage) (x, y latency.Moment) {
	switch s {
	case latency.StageIngest:
		return latency.Produce, latency.Append
	case latency.StageMirror:
		return latency.SourceAppend, latency.Append
	case latency.StageQueueWait:
		return latency.Append, latency.Receive
	case latency.StageProcessing:
		return latency.Receive, latency.Processed
	case latency.StageDelivery:
		return latency.Append, latency.Processed
	}
	return latency.Produce, latency.Processed
}

// Run feeds a flow's observations, in order, into a fresh engine built from cfg, and scores the results.
func Run(f *Flow, cfg latency.Config) (*Report, error) {
	ru, err := newRunner(f, cfg)
	if err != nil {
		return nil, fmt.Errorf("run scenario %q: %w", f.Scenario.Name, err)
	}
	rep := ru.rep
	t0 := time.Now()
	var sampled time.Duration // time spent sampling offsets, kept out of Elapsed
	nextSample := f.Obs[0].At + 10000
	for i := range f.Obs {
		o := &f.Obs[i]
		if o.At >= nextSample {
			s0 := time.Now()
			ru.sampleOffsets(o.At)
			nextSample += 1000
			sampled += time.Since(s0)
		}
		if err := ru.observe(o); err != nil {
			return nil, fmt.Errorf("run scenario %q: %w", f.Scenario.Name, err)
		}
	}
	rep.Elapsed = time.Since(t0) - sampled
	for i := range ru.results {
		rep.score(&ru.results[i], &f.Truths[ru.truthOf[i]])
	}
	return rep, nil
}

// runner is one Run: the flow, the engine it feeds, the engine's ids of the flow's hosts and its paths by partition,
// the report it fills, and the engine's results with the index of each one's truth in Flow.Truths.
type runner struct {
	f       *Flow
	e       *latency.Engine
	ids     []latency.HostID
	paths   []*latency.Path
	rep     *Report
	results []latency.Result
	truthOf []int
}

// newRunner builds the engine from cfg (its error is NewEngine's), registers the flow's hosts and partitions with it,
// and starts the report.
func newRunner(f *Flow, cfg latency.Config) (*runner, error) {
	e, err := latency.NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	ids := make([]latency.HostID, len(f.Hosts))
	for i, n := range f.Hosts {
		ids[i] = e.Host(n)
	}
	paths := make([]*latency.Path, f.Scenario.Partitions)
	for p := range paths {
		paths[p] = e.Path("sim", "t", int32(p))
	}
	rep := &Report{Scenario: f.Scenario.Name, MinIngest: f.MinIngest, Engine: e, failoverAt: math.Inf(1),
		warmEnd: msOf(f.Scenario.Start) + float64(WarmUp)/1e6,
		kinds:   [3]latency.OffsetKind{RoleProducer: kindOf(f.Scenario.Producer), RoleBroker: latency.KindBracketed, RoleConsumer: kindOf(f.Scenario.Consumer)}}
	for _, fo := range f.Scenario.Failovers {
		rep.failoverAt = math.Min(rep.failoverAt, msOf(f.Scenario.Start)+float64(fo.At)/1e6)
	}
	return &runner{f: f, e: e, ids: ids, paths: paths, rep: rep,
		results: make([]latency.Result, 0, len(f.Truths)), truthOf: make([]int, 0, len(f.Truths))}, nil
}

// sampleOffsets scores the engine's offset estimate of every host it has one for at reference time at (ms) against
// the true offset: the error by kind, and whether the stated interval held the truth (Report.OffsetErr,
// OffsetScored, OffsetCovered, OffsetMisses).
func (ru *runner) sampleOffsets(at float64) {
	rep := ru.rep
	for h, id := range ru.ids {
		est, _ := ru.e.Offset(id, timeOf(at))
		if est.Kind == latency.KindUnknown {
			continue
		}
		tru := ru.f.TrueOffset(h, at)
		d := math.Abs(float64(est.Offset)/1e6 - tru)
		rep.OffsetErr[est.Kind].Abs = append(rep.OffsetErr[est.Kind].Abs, d)
		if ru.f.stepping(h, at) {
			continue // a clock stepped moments ago: no estimator can know before the first bound after it
		}
		rep.OffsetScored++
		// 1e-3 ms: the rounding of a time.Duration of ns against the float truth
		if (est.Lower == -latency.Unbounded || float64(est.Lower)/1e6 <= tru+1e-3) &&
			(est.Upper == latency.Unbounded || float64(est.Upper)/1e6 >= tru-1e-3) {
			rep.OffsetCovered++
		} else if len(rep.OffsetMisses) < 8 {
			rep.OffsetMisses = append(rep.OffsetMisses, OffsetMiss{ru.f.Hosts[h], est, tru, at})
		}
	}
}

// observe feeds one observation to the engine as the collector would, and returns the engine's error.
func (ru *runner) observe(o *Observation) error {
	e, ids := ru.e, ru.ids
	switch o.Kind {
	case ObsBracket:
		return e.ObserveBracket(latency.Bracket{Host: ids[o.Host], Send: timeOf(o.Send), RemoteMs: o.Remote, Ack: timeOf(o.Ack)})
	case ObsSync:
		return e.ObserveSync(latency.SyncExchange{Host: ids[o.Host], T1: timeOf(o.T1), T2: timeOf(o.T2), T3: timeOf(o.T3), T4: timeOf(o.T4)})
	case ObsAck:
		// As the collector does: an ack that brackets nothing (its broker not bracketed yet, a clock step) is
		// counted and dropped.
		if aerr := e.ObserveAck(latency.ProducerAck{Host: ids[o.Host], Broker: ids[o.Broker], Send: timeOf(o.T1),
			Ack: timeOf(o.T4), AppendMs: o.Remote}); aerr != nil {
			ru.rep.AcksRefused++
		} else {
			ru.rep.AcksUsed++
		}
	case ObsCommit:
		ru.paths[o.Partition].ObserveCommit(o.Offset, timeOf(o.At))
	case ObsRecord:
		return ru.observeRecord(o)
	}
	return nil
}

// observeRecord feeds a receipt: first the clock offsets it reports, at its arrival, as the collector does; then
// its record, whose result it keeps for scoring.
func (ru *runner) observeRecord(o *Observation) error {
	e, ids := ru.e, ru.ids
	at := timeOf(o.At)
	if rp := o.ProducerReport; rp.Valid {
		if err := e.ReportOffset(ids[o.Stamps[latency.Produce].Host], msDur(rp.Offset), msDur(rp.Unc), at); err != nil {
			return err
		}
	}
	if rp := o.ConsumerReport; rp.Valid {
		if err := e.ReportOffset(ids[o.Stamps[latency.Processed].Host], msDur(rp.Offset), msDur(rp.Unc), at); err != nil {
			return err
		}
	}
	var rec latency.Record
	rec.Offset = o.Offset
	for m := range rec.Stamps {
		rec.Stamps[m] = ru.stamp(o.Stamps[m])
	}
	ru.results = append(ru.results, ru.paths[o.Partition].Observe(rec))
	ru.truthOf = append(ru.truthOf, o.Truth)
	return nil
}

// stamp converts a simulated stamp to the engine's: host -1 is the reference clock, a zero value no stamp.
func (ru *runner) stamp(s Stamp) latency.Stamp {
	if s.Value == 0 {
		return latency.Stamp{}
	}
	h := latency.RefHost
	if s.Host >= 0 {
		h = ru.ids[s.Host]
	}
	return latency.Stamp{Value: s.Value, Host: h, Unit: s.Unit}
}

func msDur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// score adds one result, against its record's truth, to the report: counts by class and flag, the consistency
// checks, and for a truly live record how much of it fed the live sketches and how far each fed stage is off.
func (rep *Report) score(res *latency.Result, tr *Truth) {
	rep.Records++
	rep.Confusion[tr.Class][res.Class]++
	if res.Flags&latency.FlagSkewSuspected != 0 {
		rep.Flagged++
	}
	if res.Flags&latency.FlagUnsettled != 0 {
		rep.Unsettled++
	}
	rep.checkConsistency(res)
	fed := fedStages(res)
	if res.Live {
		rep.Live++
	}
	if tr.Class != latency.ClassLive {
		return
	}
	warm := rep.countLive(res, tr, fed)
	truth := [latency.NumStages]float64{latency.StageIngest: tr.Ingest, latency.StageQueueWait: tr.QueueWait,
		latency.StageProcessing: tr.Processing, latency.StageDelivery: tr.Delivery, latency.StageE2E: tr.E2E}
	for s := latency.Stage(0); s < latency.NumStages; s++ {
		v, ok := res.Stage(s)
		if !ok || fed&(1<<s) == 0 || s == latency.StageMirror {
			continue
		}
		rep.scoreInterval(res, tr, s, v, truth[s])
		rep.addError(s, v, truth[s], tr.AppendMs, warm)
	}
}

// checkConsistency counts a result's negative stages (Report.NegativeStages) and whether its partition stages fail
// to add up to e2e within 1e-6 ms (Report.SumMismatch); delivery stands in for queue wait and processing when the
// record has no receive stamp.
func (rep *Report) checkConsistency(res *latency.Result) {
	var sum float64
	for s := latency.Stage(0); s < latency.NumStages; s++ {
		if v, ok := res.Stage(s); ok && v < 0 {
			rep.NegativeStages++
		}
	}
	for _, s := range []latency.Stage{latency.StageIngest, latency.StageMirror, latency.StageQueueWait, latency.StageProcessing} {
		if v, ok := res.Stage(s); ok {
			sum += v
		}
	}
	if _, hasQ := res.Stage(latency.StageQueueWait); !hasQ {
		if v, ok := res.Stage(latency.StageDelivery); ok {
			sum += v
		}
	}
	if e2e, ok := res.Stage(latency.StageE2E); ok && math.Abs(sum-e2e) > 1e-6 {
		rep.SumMismatch++
	}
}

// fedStages returns the stages of a result that reached the live sketches, as stats.go accounts them: all of a live
// record's, the trusted ones of a live-class record kept out only for untrusted stages, none otherwise.
func fedStages(res *latency.Result) (fed uint8) {
	switch {
	case res.Live:
		fed = res.Has
	case res.Class == latency.ClassLive && res.Flags&latency.FlagCommitBound == 0 &&
		res.Flags&latency.UntrustFlags != 0:
		fed = res.Has &^ res.Untrusted
	}
	return fed
}

// countLive counts a truly live record and its stages, and those the engine kept out of the live sketches, overall
// and for the warm-up; it reports whether the record was appended in the warm-up.
func (rep *Report) countLive(res *latency.Result, tr *Truth, fed uint8) (warm bool) {
	rep.TrueLive++
	warm = tr.AppendMs < rep.warmEnd
	if warm {
		rep.TrueLiveWarm++
	}
	if !res.Live {
		rep.LiveExcluded++
		if warm {
			rep.LiveExcludedWarm++
		}
	}
	rep.TrueLiveStages += bits.OnesCount8(res.Has)
	rep.LiveStagesExcluded += bits.OnesCount8(res.Has &^ fed)
	return warm
}

// scoreInterval scores stage s's stated interval (Result.StageBounds) against its true value truth (ms), under the
// weakest kind of offset estimate the stage spans: whether it held the truth, and its width or that it is open.
func (rep *Report) scoreInterval(res *latency.Result, tr *Truth, s latency.Stage, v, truth float64) {
	is := &rep.Intervals[rep.StageKind(s)]
	is.Scored++
	// 1e-9 ms: the float rounding of stamps near 1.8e12 ms, far below any stamp's quantum
	lo, hi, _ := res.StageBounds(s)
	if truth >= lo-1e-9 && truth <= hi+1e-9 {
		is.Covered++
	} else if len(is.Misses) < 8 {
		is.Misses = append(is.Misses, Miss{Stage: s, Lower: lo, Value: v, Upper: hi, Truth: truth, Flags: res.Flags, AppendMs: tr.AppendMs})
	}
	if w := hi - lo; math.IsInf(w, 1) {
		is.Open++
	} else {
		is.Widths = append(is.Widths, w)
	}
}

// addError adds the error of stage s's corrected value v against its true value truth (ms) of a record appended at
// appendMs (reference ms), absolute and normalised by max(2 ms, 2 %), to Stage, to Steady after the warm-up, and
// after the warm-up to the side of the first failover it was appended on.
func (rep *Report) addError(s latency.Stage, v, truth, appendMs float64, warm bool) {
	d := math.Abs(v - truth)
	norm := d / math.Max(2, 0.02*truth)
	rep.Stage[s].Abs = append(rep.Stage[s].Abs, d)
	rep.Stage[s].Norm = append(rep.Stage[s].Norm, norm)
	if !warm {
		rep.Steady[s].Abs = append(rep.Steady[s].Abs, d)
		rep.Steady[s].Norm = append(rep.Steady[s].Norm, norm)
	}
	if !math.IsInf(rep.failoverAt, 1) && !warm {
		side := &rep.BeforeFailover
		if appendMs >= rep.failoverAt {
			side = &rep.AfterFailover
		}
		side.Abs, side.Norm = append(side.Abs, d), append(side.Norm, norm)
	}
}

// LiveExcludedRatio is the fraction of truly live records kept out of live percentiles (0 with none).
func (rep *Report) LiveExcludedRatio() float64 {
	if rep.TrueLive == 0 {
		return 0
	}
	return float64(rep.LiveExcluded) / float64(rep.TrueLive)
}

// LiveExcludedWarmRatio is LiveExcludedRatio over the records appended in the warm-up (0 with none).
func (rep *Report) LiveExcludedWarmRatio() float64 {
	if rep.TrueLiveWarm == 0 {
		return 0
	}
	return float64(rep.LiveExcludedWarm) / float64(rep.TrueLiveWarm)
}

// LiveExcludedSteadyRatio is LiveExcludedRatio over the records appended after the warm-up (0 with none).
func (rep *Report) LiveExcludedSteadyRatio() float64 {
	if n := rep.TrueLive - rep.TrueLiveWarm; n > 0 {
		return float64(rep.LiveExcluded-rep.LiveExcludedWarm) / float64(n)
	}
	return 0
}

// LiveStageExcludedRatio is the fraction of truly live records' stages kept out of live percentiles (0 with none).
func (rep *Report) LiveStageExcludedRatio() float64 {
	if rep.TrueLiveStages == 0 {
		return 0
	}
	return float64(rep.LiveStagesExcluded) / float64(rep.TrueLiveStages)
}

// NonLivePrecisionRecall scores the decision "this record is a reprocessing (replay or redelivery), keep it out of
// live latency" against the truth.
func (rep *Report) NonLivePrecisionRecall() (precision, recall float64) {
	var tp, fp, fn int
	dup := func(c latency.Class) bool { return c == latency.ClassReplay || c == latency.ClassRedelivery }
	for t := range rep.Confusion {
		for p := range rep.Confusion[t] {
			n := rep.Confusion[t][p]
			switch {
			case dup(latency.Class(t)) && dup(latency.Class(p)):
				tp += n
			case dup(latency.Class(p)):
				fp += n
			case dup(latency.Class(t)):
				fn += n
			}
		}
	}
	precision, recall = 1, 1
	if tp+fp > 0 {
		precision = float64(tp) / float64(tp+fp)
	}
	if tp+fn > 0 {
		recall = float64(tp) / float64(tp+fn)
	}
	return precision, recall
}

// ClassAccuracy returns the fraction of records whose predicted class equals the true class.
func (rep *Report) ClassAccuracy() float64 {
	var ok, all int
	for t := range rep.Confusion {
		for p, n := range rep.Confusion[t] {
			all += n
			if t == p {
				ok += n
			}
		}
	}
	if all == 0 {
		return 1
	}
	return float64(ok) / float64(all)
}
