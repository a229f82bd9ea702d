// Command bench-latency runs the latency simulator over fixed named scenarios (package latency/sim), prints a table,
// and prints as its last line one JSON object with these figures: corrected-stage error p99 for
// bracketed, synced and envelope-only hosts, negative stages, replay precision and recall, and the throughput ratio
// of the full pipeline against a naive baseline measured in the same run; and the corrected-stage error
// after a leader failover to a broker whose clock differs by seconds (failover_err_p99_ms).
//
//	go run ./cmd/bench-latency [-strict]
//
// With -strict it exits 1 when a target is missed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"slices"
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
	NegativeStages          int     `json:"negative_stages"`
	SumMismatches           int     `json:"sum_mismatches"`
	ReplayPrecision         float64 `json:"replay_precision"`
	ReplayRecall            float64 `json:"replay_recall"`
	ClassAccuracy           float64 `json:"class_accuracy"`
	FlaggedFraction         float64 `json:"flagged_fraction"`
	LiveExcludedRatio       float64 `json:"live_excluded_ratio"`
	LiveStageExcludedRatio  float64 `json:"live_stage_excluded_ratio"`
	// LiveExcludedByScenario is live_excluded_ratio per scenario.
	LiveExcludedByScenario map[string]float64 `json:"live_excluded_ratio_by_scenario"`
	Records                int                `json:"records"`
	ThroughputRatio        float64            `json:"throughput_ratio"`
	PipelineStampsPerSec   float64            `json:"pipeline_stamps_per_sec"`
	BaselineStampsPerSec   float64            `json:"baseline_stamps_per_sec"`
	TargetsMet             bool               `json:"targets_met"`
	ElapsedSeconds         float64            `json:"elapsed_seconds"`
}

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
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
	s, err := run(os.Stdout)
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

func run(out *os.File) (summary, error) {
	began := time.Now()
	var s summary
	var bracketed, synced, envelope, syncedNorm, bracketedNorm []float64
	var confusion [latency.NumClasses][latency.NumClasses]int
	flagged, trueLive, liveExcluded, liveStages, stagesExcluded, counted := 0, 0, 0, 0, 0, 0
	s.LiveExcludedByScenario = map[string]float64{}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trecords\tlive\tflagged\twarm-up\tlive excl\tstage excl\treplay\tredeliv\tbackfill\tingest p99\tdelivery p99\te2e p99\tworst norm p99\tneg\tsum≠\tengine\t")
	for _, sc := range sim.Scenarios() {
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
		switch sc.Name {
		case "failover":
			s.FailoverErrP99Ms, s.FailoverErrP99Norm = p99(rep.AfterFailover.Abs), p99(rep.AfterFailover.Norm)
			s.PreFailoverErrP99Ms = p99(rep.BeforeFailover.Abs)
			s.FailoverLiveExcludedAft = math.Round(rep.LiveExcludedRatio()*1e5) / 1e5
			synced, syncedNorm = append(synced, pooled...), append(syncedNorm, pooledNorm...)
		case "failover-stale-leader":
			s.StaleLeaderErrP99Ms, s.StaleLeaderErrP99Norm = p99(rep.AfterFailover.Abs), p99(rep.AfterFailover.Norm)
			s.StaleLeaderLiveExcluded = math.Round(rep.LiveExcludedRatio()*1e5) / 1e5
		case "bracketed":
			bracketed, bracketedNorm = append(bracketed, pooled...), append(bracketedNorm, pooledNorm...)
		case "envelope":
			// The envelope-only hosts are the producers: their stage is ingest.
			for _, e := range rep.Stage[latency.StageIngest].Abs {
				envelope = append(envelope, e-rep.MinIngest)
			}
			s.EnvelopeMinDelayMs = rep.MinIngest
		default:
			synced, syncedNorm = append(synced, pooled...), append(syncedNorm, pooledNorm...)
		}
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
	fmt.Fprintln(out, "errors are |corrected − true| in ms over the stages that fed the live sketches (every stage of unflagged live records, the trusted stages of flagged ones); norm = error / max(2 ms, 2 % of the true stage)")

	s.BracketedErrP99Ms, s.BracketedErrP99Norm = p99(bracketed), p99(bracketedNorm)
	s.SyncedErrP99Ms, s.SyncedErrP99Norm = p99(synced), p99(syncedNorm)
	s.EnvelopeErrP99MsMinusMin = p99(envelope)
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
	s.ThroughputRatio = tp.pipeline / tp.baseline
	fmt.Fprintf(out, "throughput: pipeline %.0f stamps/s, naive baseline %.0f stamps/s (%d records, 3 stamps each, best of %d)\n",
		tp.pipeline, tp.baseline, tp.records, tp.rounds)

	s.TargetsMet = s.BracketedErrP99Norm <= 1 && s.SyncedErrP99Norm <= 1 && s.EnvelopeErrP99MsMinusMin <= 2 &&
		s.FailoverErrP99Norm <= 1 && s.StaleLeaderErrP99Norm <= 1 &&
		s.NegativeStages == 0 && s.ReplayPrecision >= 0.999 && s.ReplayRecall >= 0.999 && s.ThroughputRatio >= 0.5
	s.ElapsedSeconds = math.Round(time.Since(began).Seconds()*100) / 100
	return s, nil
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
