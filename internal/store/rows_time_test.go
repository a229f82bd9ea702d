package store

import (
	"testing"
	"time"
)

// TestRecordTimeIgnoresImplausibleStamps: the partition anchor comes only from stamps that read as a plausible Unix
// millisecond time; a stamp in the wrong unit, a sentinel or an overflow never moves a row to 1970 or 2262 (where
// retention would drop an accepted row at once, or never).
func TestRecordTimeIgnoresImplausibleStamps(t *testing.T) {
	const ms2026 = 1_795_953_600_000 // 2026-11-29T12:00:00Z
	tests := []struct {
		name                string
		row                 LatencyRow
		wantRecord, wantObs int64
	}{
		{"append first", LatencyRow{AppendMs: ms2026, EventMs: ms2026 - 5, ObservedMs: ms2026 + 9}, ms2026, ms2026 + 9},
		// int64 max as append stamp (a tap record's garbage header): skipped, the event stamp anchors the row
		{"int64 max append", LatencyRow{AppendMs: 1<<63 - 1, EventMs: ms2026}, ms2026, ms2026},
		// a stamp sent in microseconds reads as year ~58,000 in ms; one in seconds as 1970-01-21
		{"microseconds", LatencyRow{AppendMs: ms2026 * 1000, ReceiveMs: ms2026}, ms2026, ms2026},
		{"seconds", LatencyRow{AppendMs: ms2026 / 1000, ProcessedMs: ms2026}, ms2026, ms2026},
		// -1 is Kafka's NO_TIMESTAMP
		{"no timestamp", LatencyRow{AppendMs: -1, EventMs: -1, ReceiveMs: ms2026}, ms2026, ms2026},
		// nothing plausible at all: the shared fallback partition, not 1970
		{"nothing plausible", LatencyRow{AppendMs: 1 << 62, EventMs: -1}, plausibleFromMs, plausibleFromMs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.row.RecordTime(); !got.Equal(time.UnixMilli(tt.wantRecord)) {
				t.Errorf("RecordTime = %v, want %v", got, time.UnixMilli(tt.wantRecord).UTC())
			}
			if got := tt.row.ObservedTime(); !got.Equal(time.UnixMilli(tt.wantObs)) {
				t.Errorf("ObservedTime = %v, want %v", got, time.UnixMilli(tt.wantObs).UTC())
			}
		})
	}
	if !FallbackTime().Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("FallbackTime = %v", FallbackTime())
	}
}
