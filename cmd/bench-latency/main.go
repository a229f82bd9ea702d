// Command bench-latency runs the latency simulator over fixed named scenarios (package latency/sim) and over the same
// scenarios with clocks, drifts and delays drawn from a fresh seed, prints a table, and prints as its last line one
// JSON object with: corrected-stage error p99 for bracketed, synced and envelope-only hosts (over every stage that
// fed the live percentiles), negative stages, replay precision and recall, the throughput ratio of the full
// pipeline against a naive baseline measured in the same run, the corrected-stage error after a leader failover to
// a broker whose clock differs by seconds (failover_err_p99_ms), the share of live records kept out of the live
// percentiles in and after the warm-up, and how often each stage's stated interval [Lower, Upper] holds its true
// value (interval_coverage) and how wide it is, per kind of offset estimate. Field meanings are in docs/latency.md.
//
//	go run ./cmd/bench-latency [-seed N] [-strict]
//
// Each run draws its seed and prints it; -seed N replays a run. With -strict it exits 1 when a target is missed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tidemark/tidemark/latency"
	"github.com/tidemark/tidemark/latency/sim"
)

// profileTo, when set by -cpuprofile, receives a CPU profile of the throughput measurement.
var profileTo *os.File

// summary is the last line. Field meanings are in docs/latency.md.
type summary struct {
	BracketedErrP99Ms        float64 `json:"bracketed_err_p99_ms"`
	BracketedErrP99Norm      float64 `json:"bracketed_err_p99_norm"`
	SyncedErrP99Ms           float64 `json:"synced_err_p99_ms"`
	SyncedErrP99Norm         float64 `json:"synced_err_p99_norm"`
	EnvelopeErrP99MsMinusMin float64 `json:"envelope_err_p99_ms_minus_min_delay"`
	EnvelopeMinDelayMs       float64 `json:"envelope_min_delay_ms"`
	// EnvelopeErrSteady is EnvelopeErrP99MsMinusMin over records appended after the warm-up (sim.WarmUp): the
	// envelope's own accuracy once its window has data, beside the figure over every live stage.
	EnvelopeErrSteady float64 `json:"envelope_err_p99_ms_minus_min_delay_steady"`
	// Failover scenario: error p99 of every stage fed to the live sketches, of records appended from the failover
	// on and before it; target: after ≤ 2 ms, within the same bound as before.
	FailoverErrP99Ms        float64 `json:"failover_err_p99_ms"`
	FailoverErrP99Norm      float64 `json:"failover_err_p99_norm"`
	PreFailoverErrP99Ms     float64 `json:"pre_failover_err_p99_ms"`
	FailoverLiveExcludedAft float64 `json:"failover_live_excluded_ratio"`
	// The same failover with appends attributed to the leader a 30 s metadata cache sees at handling time: the
	// error of what is still trusted (target ≤ 2 ms: misattributed stamps must be flagged, not trusted) and the share
	// of live records kept out.
	StaleLeaderErrP99Ms     float64 `json:"failover_stale_leader_err_p99_ms"`
	StaleLeaderErrP99Norm   float64 `json:"failover_stale_leader_err_p99_norm"`
	StaleLeaderLiveExcluded float64 `json:"failover_stale_leader_live_excluded_ratio"`
	// Seed is the draw of this run's seeded scenarios (-seed replays it).
	Seed uint64 `json:"seed"`
	// Live records kept out of the live percentiles (an invalid stage), over records appended in each scenario's
	// warm-up (sim.WarmUp) and after it; targets ≤ 0.05 and ≤ 0.01.
	LiveExcludedWarmUp float64 `json:"live_excluded_ratio_warmup"`
	LiveExcludedSteady float64 `json:"live_excluded_ratio_steady"`
	// IntervalCoverage is the share of live stages whose stated interval holds the true value (target ≥ 0.999), over
	// every scenario; by kind of offset estimate (the weakest among the clocks a stage spans) beside it, with the
	// widths (ms) of the bounded intervals and the share of intervals open above (one-sided envelopes).
	IntervalCoverage       float64            `json:"interval_coverage"`
	IntervalCoverageByKind map[string]float64 `json:"interval_coverage_by_kind"`
	IntervalWidthP50Ms     map[string]float64 `json:"interval_width_p50_ms"`
	IntervalWidthP99Ms     map[string]float64 `json:"interval_width_p99_ms"`
	IntervalOpenRatio      map[string]float64 `json:"interval_open_ratio"`
	// OffsetIntervalCoverage is the share of per-second samples of every host's estimate whose [Lower, Upper]
	// holds the true offset (seconds just after a clock step excepted).
	OffsetIntervalCoverage float64 `json:"offset_interval_coverage"`
	NegativeStages         int     `json:"negative_stages"`
	SumMismatches          int     `json:"sum_mismatches"`
	ReplayPrecision        float64 `json:"replay_precision"`
	ReplayRecall           float64 `json:"replay_recall"`
	ClassAccuracy          float64 `json:"class_accuracy"`
	FlaggedFraction        float64 `json:"flagged_fraction"`
	LiveExcludedRatio      float64 `json:"live_excluded_ratio"`
	LiveStageExcludedRatio float64 `json:"live_stage_excluded_ratio"`
	// LiveExcludedByScenario is live_excluded_ratio per scenario.
	LiveExcludedByScenario map[string]float64 `json:"live_excluded_ratio_by_scenario"`
	Records                int                `json:"records"`
	// ThroughputRatio is the median over rounds of pipeline ÷ baseline stamps/s (the sides alternating on chunks of
	// records, see throughput); _min and _max the extreme rounds.
	ThroughputRatio      float64 `json:"throughput_ratio"`
	ThroughputRatioMin   float64 `json:"throughput_ratio_min"`
	ThroughputRatioMax   float64 `json:"throughput_ratio_max"`
	ThroughputRounds     int     `json:"throughput_rounds"`
	PipelineStampsPerSec float64 `json:"pipeline_stamps_per_sec"`
	BaselineStampsPerSec float64 `json:"baseline_stamps_per_sec"`
	// ThroughputRatioFloats is the same median against the baseline fed three precomputed ms floats per record
	// (the unit conversion and the record's width left out of it); reported, not a target.
	ThroughputRatioFloats      float64 `json:"throughput_ratio_floats"`
	BaselineFloatsStampsPerSec float64 `json:"baseline_floats_stamps_per_sec"`
	TargetsMet                 bool    `json:"targets_met"`
	ElapsedSeconds             float64 `json:"elapsed_seconds"`
}

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	seed := flag.Uint64("seed", 0, "replay the seeded scenarios of an earlier run (0: draw a fresh seed)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the throughput measurement to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-latency:", err)
			os.Exit(1)
		}
		profileTo = f
	}
	if *seed == 0 {
		*seed = rand.Uint64()>>11 | 1 // never 0, and below 2^53 so that every JSON reader keeps it exact
	}
	fmt.Printf("seed: %d (replay with -seed %d)\n", *seed, *seed)
	s, err := run(os.Stdout, *seed)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-latency:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
	if *strict && !s.TargetsMet {
		os.Exit(1)
	}
}

// scenarios returns the fixed named scenarios, then each again with its clocks, drifts, delays and arrivals drawn
// from seed (named "<name>@seed").
func scenarios(seed uint64) []sim.Scenario {
	fixed := sim.Scenarios()
	out := append([]sim.Scenario(nil), fixed...)
	for i, sc := range fixed {
		sc.Name += "@seed"
		sc.Seed = seed*0x9e3779b97f4a7c15 + uint64(i) + 1 // distinct per scenario, never a fixed scenario's by chance alone
		out = append(out, sc)
	}
	return out
}

func run(out *os.File, seed uint64) (summary, error) {
	began := time.Now()
	s := summary{Seed: seed, IntervalCoverageByKind: map[string]float64{}, IntervalWidthP50Ms: map[string]float64{},
		IntervalWidthP99Ms: map[string]float64{}, IntervalOpenRatio: map[string]float64{}}
	var intervals [latency.KindReference + 1]sim.IntervalScore
	trueWarm, exclWarm, offScored, offCovered := 0, 0, 0, 0
	// The failover scenarios, fixed and seeded, pooled: stage errors after and before the failover, live records.
	var foAfter, foAfterNorm, foBefore, slAfter, slAfterNorm []float64
	var foLive, foExcl, slLive, slExcl int
	var bracketed, synced, envelope, envelopeSteady, syncedNorm, bracketedNorm []float64
	var confusion [latency.NumClasses][latency.NumClasses]int
	flagged, trueLive, liveExcluded, liveStages, stagesExcluded, counted := 0, 0, 0, 0, 0, 0
	s.LiveExcludedByScenario = map[string]float64{}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trecords\tlive\tflagged\twarm-up\tlive excl\tstage excl\treplay\tredeliv\tbackfill\tingest p99\tdelivery p99\te2e p99\tworst norm p99\tneg\tsum≠\tengine\t")
	for _, sc := range scenarios(seed) {
		f, err := sim.Generate(sc)
		if err != nil {
			return s, err
		}
		rep, err := sim.Run(f, latency.Config{})
		if err != nil {
			return s, err
		}
		var pooled, pooledNorm []float64
		worst := 0.0
		for st := latency.Stage(0); st < latency.NumStages; st++ {
			pooled = append(pooled, rep.Stage[st].Abs...)
			pooledNorm = append(pooledNorm, rep.Stage[st].Norm...)
			if q := rep.Stage[st].NormQuantile(0.99); q > worst {
				worst = q
			}
		}
		switch strings.TrimSuffix(sc.Name, "@seed") {
		case "failover":
			foAfter, foAfterNorm = append(foAfter, rep.AfterFailover.Abs...), append(foAfterNorm, rep.AfterFailover.Norm...)
			foBefore = append(foBefore, rep.BeforeFailover.Abs...)
			foLive, foExcl = foLive+rep.TrueLive, foExcl+rep.LiveExcluded
			synced, syncedNorm = append(synced, pooled...), append(syncedNorm, pooledNorm...)
		case "failover-stale-leader":
			slAfter, slAfterNorm = append(slAfter, rep.AfterFailover.Abs...), append(slAfterNorm, rep.AfterFailover.Norm...)
			slLive, slExcl = slLive+rep.TrueLive, slExcl+rep.LiveExcluded
		case "bracketed":
			bracketed, bracketedNorm = append(bracketed, pooled...), append(bracketedNorm, pooledNorm...)
		case "envelope":
			// The envelope-only hosts are the producers: their stage is ingest.
			for _, e := range rep.Stage[latency.StageIngest].Abs {
				envelope = append(envelope, e-rep.MinIngest)
			}
			for _, e := range rep.Steady[latency.StageIngest].Abs {
				envelopeSteady = append(envelopeSteady, e-rep.MinIngest)
			}
			s.EnvelopeMinDelayMs = rep.MinIngest
		default:
			synced, syncedNorm = append(synced, pooled...), append(syncedNorm, pooledNorm...)
		}
		for k := range rep.Intervals {
			is, r := &intervals[k], &rep.Intervals[k]
			is.Scored, is.Covered, is.Open = is.Scored+r.Scored, is.Covered+r.Covered, is.Open+r.Open
			is.Widths = append(is.Widths, r.Widths...)
			if len(is.Misses) < 8 {
				is.Misses = append(is.Misses, r.Misses...)
			}
		}
		offScored, offCovered = offScored+rep.OffsetScored, offCovered+rep.OffsetCovered
		for t := range confusion {
			for p := range confusion[t] {
				confusion[t][p] += rep.Confusion[t][p]
			}
		}
		s.LiveExcludedByScenario[sc.Name] = math.Round(rep.LiveExcludedRatio()*1e5) / 1e5
		if sc.LeaderCacheTTL == 0 { // the stale-leader demonstration is not a deployment to count exclusions over
			flagged += rep.Flagged
			trueLive, liveExcluded = trueLive+rep.TrueLive, liveExcluded+rep.LiveExcluded
			liveStages, stagesExcluded = liveStages+rep.TrueLiveStages, stagesExcluded+rep.LiveStagesExcluded
			trueWarm, exclWarm = trueWarm+rep.TrueLiveWarm, exclWarm+rep.LiveExcludedWarm
		}
		s.Records += rep.Records
		if sc.LeaderCacheTTL == 0 {
			counted += rep.Records
		}
		s.NegativeStages += rep.NegativeStages
		s.SumMismatches += rep.SumMismatch
		pred := func(c latency.Class) int {
			n := 0
			for t := range rep.Confusion {
				n += rep.Confusion[t][c]
			}
			return n
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.4f\t%.4f\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%d\t%v\t\n", sc.Name, rep.Records, rep.Live,
			rep.Flagged, rep.Unsettled, rep.LiveExcludedRatio(), rep.LiveStageExcludedRatio(), pred(latency.ClassReplay), pred(latency.ClassRedelivery), pred(latency.ClassBackfill),
			rep.Stage[latency.StageIngest].Quantile(0.99), rep.Stage[latency.StageDelivery].Quantile(0.99),
			rep.Stage[latency.StageE2E].Quantile(0.99), worst, rep.NegativeStages, rep.SumMismatch,
			rep.Elapsed.Round(time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return s, err
	}
	fmt.Fprintln(out, "errors are |corrected − true| in ms over every stage that fed the live sketches: all valid stages of truly live records, however wide their intervals (only invalid ones are kept out, counted in live excl); norm = error / max(2 ms, 2 % of the true stage)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offset kind	stages	coverage	width p50	width p99	open above	")
	var scored, covered int
	for k := range intervals {
		is := &intervals[k]
		if is.Scored == 0 {
			continue
		}
		name := latency.OffsetKind(k).String()
		scored, covered = scored+is.Scored, covered+is.Covered
		s.IntervalCoverageByKind[name] = is.Coverage()
		s.IntervalOpenRatio[name] = round5(float64(is.Open) / float64(is.Scored))
		p50, p99 := "-", "-"
		if len(is.Widths) > 0 {
			s.IntervalWidthP50Ms[name], s.IntervalWidthP99Ms[name] = quantile(is.Widths, 0.5), quantile(is.Widths, 0.99)
			p50, p99 = fmt.Sprintf("%.3f", s.IntervalWidthP50Ms[name]), fmt.Sprintf("%.3f", s.IntervalWidthP99Ms[name])
		}
		fmt.Fprintf(tw, "%s\t%d\t%.6f\t%s\t%s\t%.4f\t\n", name, is.Scored, is.Coverage(), p50, p99, s.IntervalOpenRatio[name])
		for _, m := range is.Misses {
			fmt.Fprintf(out, "interval miss (%s): %+v\n", name, m)
		}
	}
	if err := tw.Flush(); err != nil {
		return s, err
	}
	fmt.Fprintln(out, "interval: the stage's [Lower, Upper] on the reference clock; coverage: share holding the true stage; kind: the weakest offset estimate among the clocks the stage spans; open above: one-sided (causal envelope), not in the widths")
	s.IntervalCoverage = float64(covered) / float64(max(scored, 1))
	s.OffsetIntervalCoverage = float64(offCovered) / float64(max(offScored, 1))
	s.LiveExcludedWarmUp = float64(exclWarm) / float64(max(trueWarm, 1))
	s.LiveExcludedSteady = float64(liveExcluded-exclWarm) / float64(max(trueLive-trueWarm, 1))

	s.FailoverErrP99Ms, s.FailoverErrP99Norm = p99(foAfter), p99(foAfterNorm)
	s.PreFailoverErrP99Ms = p99(foBefore)
	s.FailoverLiveExcludedAft = round5(float64(foExcl) / float64(max(foLive, 1)))
	s.StaleLeaderErrP99Ms, s.StaleLeaderErrP99Norm = p99(slAfter), p99(slAfterNorm)
	s.StaleLeaderLiveExcluded = round5(float64(slExcl) / float64(max(slLive, 1)))
	s.BracketedErrP99Ms, s.BracketedErrP99Norm = p99(bracketed), p99(bracketedNorm)
	s.SyncedErrP99Ms, s.SyncedErrP99Norm = p99(synced), p99(syncedNorm)
	s.EnvelopeErrP99MsMinusMin, s.EnvelopeErrSteady = p99(envelope), p99(envelopeSteady)
	s.ReplayPrecision, s.ReplayRecall = precisionRecall(confusion)
	s.ClassAccuracy = accuracy(confusion)
	s.FlaggedFraction = float64(flagged) / float64(max(counted, 1))
	s.LiveExcludedRatio = float64(liveExcluded) / float64(max(trueLive, 1))
	s.LiveStageExcludedRatio = float64(stagesExcluded) / float64(max(liveStages, 1))

	if profileTo != nil {
		if err := pprof.StartCPUProfile(profileTo); err != nil {
			return s, err
		}
	}
	tp, err := throughput()
	if profileTo != nil {
		pprof.StopCPUProfile()
		profileTo.Close()
	}
	if err != nil {
		return s, err
	}
	s.PipelineStampsPerSec, s.BaselineStampsPerSec = tp.pipeline, tp.baseline
	s.ThroughputRatio, s.ThroughputRatioMin, s.ThroughputRatioMax = median(tp.ratios), slices.Min(tp.ratios), slices.Max(tp.ratios)
	s.ThroughputRounds = tp.rounds
	s.BaselineFloatsStampsPerSec, s.ThroughputRatioFloats = tp.baselineFloats, median(tp.floatRatios)
	fmt.Fprintf(out, "throughput: pipeline %.0f stamps/s; naive baseline from the same records %.0f stamps/s, ratio %.3f "+
		"(rounds %.3f–%.3f); from precomputed floats %.0f stamps/s, ratio %.3f (%d records, 3 stamps each, %d rounds "+
		"alternating on %d chunks)\n", tp.pipeline, tp.baseline, s.ThroughputRatio, s.ThroughputRatioMin,
		s.ThroughputRatioMax, tp.baselineFloats, s.ThroughputRatioFloats, tp.records, tp.rounds, tp.chunks)

	s.TargetsMet = s.BracketedErrP99Norm <= 1 && s.SyncedErrP99Norm <= 1 && s.EnvelopeErrP99MsMinusMin <= 2 &&
		s.FailoverErrP99Norm <= 1 && s.StaleLeaderErrP99Norm <= 1 &&
		s.NegativeStages == 0 && s.ReplayPrecision >= 0.999 && s.ReplayRecall >= 0.999 && s.ThroughputRatio >= 0.5 &&
		s.LiveExcludedWarmUp <= 0.05 && s.LiveExcludedSteady <= 0.01 && s.IntervalCoverage >= 0.999
	s.ElapsedSeconds = math.Round(time.Since(began).Seconds()*100) / 100
	return s, nil
}

func round5(v float64) float64 { return math.Round(v*1e5) / 1e5 }

// quantile returns the q-quantile of v (nearest rank), rounded to µs.
func quantile(v []float64, q float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return math.Round(v[max(0, int(math.Ceil(q*float64(len(v))))-1)]*1000) / 1000
}

// median returns the median of v (the mean of the middle two for an even count); NaN for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
}

func p99(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	v = slices.Clone(v)
	slices.Sort(v)
	return math.Round(v[int(math.Ceil(0.99*float64(len(v))))-1]*1000) / 1000
}

// precisionRecall scores "reprocessed (replay or redelivery): keep out of live latency" over all scenarios.
func precisionRecall(c [latency.NumClasses][latency.NumClasses]int) (float64, float64) {
	dup := func(k int) bool {
		return latency.Class(k) == latency.ClassReplay || latency.Class(k) == latency.ClassRedelivery
	}
	var tp, fp, fn int
	for t := range c {
		for p, n := range c[t] {
			switch {
			case dup(t) && dup(p):
				tp += n
			case dup(p):
				fp += n
			case dup(t):
				fn += n
			}
		}
	}
	prec, rec := 1.0, 1.0
	if tp+fp > 0 {
		prec = float64(tp) / float64(tp+fp)
	}
	if tp+fn > 0 {
		rec = float64(tp) / float64(tp+fn)
	}
	return prec, rec
}

func accuracy(c [latency.NumClasses][latency.NumClasses]int) float64 {
	var ok, all int
	for t := range c {
		for p, n := range c[t] {
			all += n
			if t == p {
				ok += n
			}
		}
	}
	return float64(ok) / float64(max(all, 1))
}
