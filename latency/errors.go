package latency

import "errors"

// ErrBadRoundTrip is returned for a bracket or sync exchange whose times are out of order (an acknowledgement
// before its send, or a reply processed longer than the round trip): it bounds nothing and is dropped.
var ErrBadRoundTrip = errors.New("round trip times out of order")

// ErrUnknownHost is returned when a HostID was not issued by this Engine.
var ErrUnknownHost = errors.New("unknown host id")

// ErrConfig wraps every configuration validation failure.
var ErrConfig = errors.New("invalid latency config")

// ErrImplausibleOffset is returned by Engine.ReportOffset for a claimed clock offset larger in magnitude than
// Config.Bounds.MaxSkew: no correction is applied from it (a forged or corrupt receipt must not move a host's clock).
var ErrImplausibleOffset = errors.New("reported clock offset beyond max skew")

// ErrBadCheckpoint is returned by ReplayCheckpoint.UnmarshalBinary for bytes it did not write (another length or
// version): the checkpoint is ignored, never half-restored.
var ErrBadCheckpoint = errors.New("malformed replay checkpoint")

// ErrAppendClockUnknown is returned by Engine.ObserveAck when the clock of the broker that stamped the append has no
// two-sided estimate at that stamp (no probe bracket yet, only a causal envelope, or a clock step's ambiguity): the
// append stamp cannot be placed on the reference clock within a bound, so the acknowledgement brackets nothing.
var ErrAppendClockUnknown = errors.New("append stamp's broker clock not bracketed")
