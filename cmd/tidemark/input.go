package main

// Input size caps: a file given on the command line is read only up to its cap (confload.CappedReader), so a
// mistaken path (/dev/zero, a log, a disk image) fails at once with a clear error instead of reading gigabytes.
const (
	// maxConfigBytes caps --config: a Tidemark configuration is a few kilobytes.
	maxConfigBytes = 1 << 20
	// defaultMaxTimelineBytes is lag eval's default --max-size: a day of polls of a large cluster is far below it.
	defaultMaxTimelineBytes = 256 << 20
)
