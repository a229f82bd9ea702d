package latency

// Stage is one latency a record's corrected timeline yields. Ingest, Mirror, QueueWait and Processing partition
// end-to-end; Delivery is QueueWait+Processing (the cases' append->process).
type Stage uint8

// Stages, in causal order, then the composites.
const (
	StageIngest     Stage = iota // produce → first append (the source cluster's on a mirrored topic)
	StageMirror                  // source-cluster append → append (mirrored topics, C28)
	StageQueueWait               // append → receive
	StageProcessing              // receive → processed
	StageDelivery                // append → processed (append->process in the cases)
	StageE2E                     // produce → processed
	NumStages
)

var stageNames = [...]string{"ingest", "mirror", "queue_wait", "processing", "delivery", "e2e"}

// String returns the stage's snake_case name (a metric label value).
func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "invalid"
}

// Flags describe how far a [Result] can be trusted.
type Flags uint16

// Result flags.
const (
	FlagInvalidStamp   Flags = 1 << iota // a present stamp was rejected (see Result.Invalid); its stages are absent
	FlagSkewSuspected                    // an offset is unknown or ambiguous, or an order is violated beyond the uncertainty: the stages resting on that pair are kept out of live percentiles (Result.Untrusted)
	FlagOffsetUnknown                    // some host had no offset estimate; its stamps were used uncorrected
	FlagEnvelope                         // some offset is a causal envelope: stages into that host are biased by up to the minimum one-way delay
	FlagCommitBound                      // no processed stamp: delivery and e2e end at the group's commit and are upper bounds
	FlagRewindInferred                   // a replay whose rewind was not seen as a commit decrease; its since-rewind time starts at the first replayed record
	FlagUnsettled                        // a stage across two clocks rests on an offset with no drift fit yet (warm-up) and its uncertainty exceeds the accuracy target: reported, not a reason to leave it out (its interval says how wide it is)
	FlagProjected                        // the monotone projection moved an end point of a cross-clock stage beyond that end's own uncertainty: that stage is not trusted (Result.Untrusted)
	FlagUnitCorrected                    // a stamp declared in ms carried µs or ns (or one declared in µs carried ns) and Config.FixUnits converted it (Result.UnitFixed)
	FlagWide                             // a stage across two clocks has an uncertainty above max(UncertaintyFloor, UncertaintyRatio × stage): reported, not a reason to leave it out (its interval says how wide it is)
)

// UntrustFlags are the flags under which some stages of a record are not trusted: a live record carrying one feeds
// only the stages [Result.Trusted] accepts to the live percentiles. Only an invalid stage is left out: one whose
// end's clock is not placed at all (unknown or ambiguous offset), that spans an order violated beyond the
// uncertainty, or whose end the monotone projection moved beyond that end's own uncertainty. A wide interval
// (FlagWide, FlagUnsettled) is never a reason: every other stage feeds the percentiles with its [Lower, Upper].
const UntrustFlags = FlagSkewSuspected | FlagProjected

// Result is what the engine makes of one record.
type Result struct {
	Offset int64
	Class  Class
	Flags  Flags
	// Stages in ms on the reference clock, valid where Has has bit 1<<stage. After correction every stage is >= 0,
	// Ingest+Mirror+QueueWait+Processing (those present) equals E2E, and QueueWait+Processing equals Delivery.
	Stages [NumStages]float64
	Has    uint8
	// Uncertainty of E2E in ms (the sum of its two end hosts' offset uncertainties); NaN if E2E is absent.
	Uncertainty float64
	// MomentUnc is each corrected moment's offset uncertainty in ms (0 on the reference clock, +Inf where the
	// host's offset is unknown); 0 where the moment is absent. See [Result.StageUncertainty].
	MomentUnc [NumMoments]float64
	// bounds holds each stage's interval, read through [Result.StageBounds].
	bounds stageBounds
	// Corrected moments, ms since the epoch on the reference clock after the monotone projection; 0 where absent.
	// A millisecond stamp v is taken as v + 0.5 ms, the middle of the millisecond it truncates.
	Corrected [NumMoments]float64
	// Invalid gives the rejection reason of each present but rejected stamp (ReasonOK elsewhere).
	Invalid [NumMoments]Reason
	// UnitFixed gives, for each stamp Config.FixUnits converted to its real unit, the reason it would otherwise
	// have been rejected with (ReasonMicros or ReasonNanos; ReasonOK elsewhere). FlagUnitCorrected is set with it.
	UnitFixed [NumMoments]Reason
	// SkewHosts lists (deduplicated, NumSkewHosts of them) the hosts blamed for skew in this record.
	SkewHosts    [NumMoments]HostID
	NumSkewHosts int
	// SinceRewindMs is, for replays, processed − rewind time in ms (how long the replay took to reach this record);
	// NaN otherwise.
	SinceRewindMs float64
	// Live reports whether the record fed the live sketches with all its stages: class live, no flag of
	// UntrustFlags, not commit-bounded. A wide or unsettled record is live.
	Live bool
	// Untrusted has bit 1<<stage for each present stage that is invalid: an end's offset is unknown or ambiguous, it
	// spans a pair of stamps whose order is violated beyond their uncertainty (skew-suspected), or the monotone
	// projection moved one of its ends beyond that end's own uncertainty (FlagProjected); or, for a stage between
	// two stamps of one clock, the projection changed its value at all. The other stages of a flagged record are
	// still right: a stage between two stamps of one host (receive → processed) carries none of the offsets'
	// uncertainty, and a cross-clock stage whose ends are placed, whose own pairs passed and whose ends stayed put is
	// unaffected by a bad pair elsewhere (an end-to-end between two known clocks does not depend on the broker that
	// stamped the append). A live, flagged record feeds exactly those stages to the live sketches; use
	// [Result.Trusted] per stage. 0 when no flag of UntrustFlags is set.
	Untrusted uint8
}

// Stage returns a stage's value and whether it is present.
func (r *Result) Stage(s Stage) (float64, bool) {
	if r.Has&(1<<s) == 0 {
		return 0, false
	}
	return r.Stages[s], true
}

// StageUncertainty returns the uncertainty in ms of stage s (present, see Has) as the correction bounds it: the sum
// of its two end moments' offset uncertainties, each a hard bound, so the true stage lies within Stages[s] ± it
// (before the monotone projection, which only narrows a violation). +Inf when an end's offset is unknown. For a stage
// whose two ends one host stamped (processing) the offsets cancel and this overstates it.
func (r *Result) StageUncertainty(s Stage) float64 {
	first, end := Append, Processed
	if r.Corrected[SourceAppend] != 0 {
		first = SourceAppend
	}
	if r.Flags&FlagCommitBound != 0 {
		end = Commit
	}
	x, y := stageEnds(s, first, end)
	return r.MomentUnc[x] + r.MomentUnc[y]
}

// stageBounds is a result's stage intervals: computed (lower, upper) by the general path, or, for a record the
// straight-line path took, what StageBounds computes them from on demand (its timeline is monotone and
// unprojected, every offset two-sided: the corrected moments, their uncertainties, and these), which keeps the
// common record's cost to two bytes and a float.
type stageBounds struct {
	lower, upper [NumStages]float64
	lazy         bool
	ms           uint8   // lazy: bit m when moment m is a ms stamp (quantum ½ ms; else 1 µs)
	one          uint8   // lazy: bit s when stage s runs between two stamps of one clock
	driftMax     float64 // lazy: Config.MaxDriftPPM as a fraction
}

// StageBounds returns the interval [lo, hi] in ms, on the reference clock, that holds the true value of stage s:
// 0 ≤ lo ≤ Stages[s] ≤ hi. It propagates the offset intervals of exactly the clocks the stage spans, its ends'
// stamps' quantisation, and causal order (docs/latency.md, "Intervals"). hi is +Inf when an end's offset is unknown
// or bounded on one side only (a one-sided causal envelope); lo is then still a bound. ok is false when the stage is
// absent. Percentiles of the lower and of the upper ends bound the true percentile from both sides, since an order
// statistic is monotone in each sample. It allocates nothing.
func (r *Result) StageBounds(s Stage) (lo, hi float64, ok bool) {
	if r.Has&(1<<s) == 0 {
		return 0, 0, false
	}
	if r.bounds.lazy {
		return r.lazyBounds(s)
	}
	return r.bounds.lower[s], r.bounds.upper[s], true
}

// Width returns the width hi − lo of stage s's interval in ms (+Inf when one side is open), 0 for an absent stage.
func (r *Result) Width(s Stage) float64 {
	lo, hi, _ := r.StageBounds(s)
	return hi - lo
}

// lazyBounds computes a straight-line result's interval of stage s exactly as fillBounds would have.
func (r *Result) lazyBounds(s Stage) (lo, hi float64, ok bool) {
	var d, q [NumMoments]float64
	var chain uint8
	for _, m := range [...]Moment{Produce, Append, Receive, Processed} {
		if r.Corrected[m] == 0 {
			continue
		}
		chain |= 1 << m
		q[m] = quantum(Nanos)
		if r.bounds.ms&(1<<m) != 0 {
			q[m] = quantum(Millis)
		}
		d[m] = r.MomentUnc[m] + q[m]
	}
	var b stageBounds
	fillBounds(&b, 1<<s, &r.Stages, chain, Append, Processed, &r.Corrected, &d, &d, &q, r.bounds.one, r.bounds.driftMax)
	return b.lower[s], b.upper[s], true
}

// Trusted reports whether stage s is present and fit for live percentiles as far as clocks go: it rests on no
// skew-suspected or unsettled pair of stamps (the record's class and FlagCommitBound are separate questions).
func (r *Result) Trusted(s Stage) bool {
	return r.Has&(1<<s) != 0 && r.Untrusted&(1<<s) == 0
}

func (r *Result) blame(h HostID) {
	if h == UnknownHost {
		return // no clock to blame: the stamp's host could not be named (a record whose leader is not known)
	}
	for i := 0; i < r.NumSkewHosts; i++ {
		if r.SkewHosts[i] == h {
			return
		}
	}
	r.SkewHosts[r.NumSkewHosts] = h
	r.NumSkewHosts++
}
