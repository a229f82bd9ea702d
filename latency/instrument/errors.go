package instrument

import "errors"

// ErrMalformed is wrapped by every decoding error caused by bytes that do not follow the documented layout
// (truncated, trailing bytes, a length out of range, an unknown unit or timestamp type).
var ErrMalformed = errors.New("malformed tidemark encoding")

// ErrUnsupportedVersion is wrapped when the first byte names a format version this build does not know. Newer
// producers may write newer versions; the collector dead-letters such records rather than guessing.
var ErrUnsupportedVersion = errors.New("unsupported tidemark encoding version")
