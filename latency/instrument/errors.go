package instrument

import "errors"

// ErrMalformed is wrapped by every decoding error caused by bytes that do not follow the documented layout
// (truncated, trailing bytes, a length out of range, an unknown unit or timestamp type).
var ErrMalformed = errors.New("malformed tidemark encoding")

// ErrUnsupportedVersion is wrapped when the first byte names a format version this build does not know. Newer
// producers may write newer versions; the collector dead-letters such records rather than guessing.
var ErrUnsupportedVersion = errors.New("unsupported tidemark encoding version")

// ErrNoTraceParent is returned by [TraceParent] when a record carries no traceparent (or an empty one): not an
// error for the caller, just nothing to read.
var ErrNoTraceParent = errors.New("no traceparent header")

// ErrMalformedTraceParent is wrapped by [TraceParent]'s error for a traceparent header that is present but invalid
// by W3C Trace Context. The record is still measured without trace context; callers count it (the consumer helper in
// ConsumerStats.BadTraceParent) so an application writing broken trace headers is visible.
var ErrMalformedTraceParent = errors.New("malformed traceparent header")
