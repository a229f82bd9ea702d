package main

import (
	"os"
	"testing"
)

// TestPeakRSSIsMeasuredOrAnError: the peak RSS comes from the process's VmHWM; an unreadable status file or one
// without a usable VmHWM is an error, never 0 MB "under the limit".
func TestPeakRSSIsMeasuredOrAnError(t *testing.T) {
	if _, err := peakRSSMB(-1); err == nil {
		t.Error("peak RSS of a process with no /proc entry: no error")
	}
	mb, err := peakRSSMB(os.Getpid())
	if err != nil || mb <= 0 {
		t.Errorf("peak RSS of this process: %v MB, %v; want a positive figure", mb, err)
	}
	for _, tc := range []struct {
		name, status string
		want         float64 // MB; 0: an error
	}{
		{"VmHWM in kB", "Name:\ttidemark\nVmPeak:\t  999 kB\nVmHWM:\t  262144 kB\nVmRSS:\t 1 kB\n", 256},
		{"no VmHWM line (a kernel thread)", "Name:\tkthreadd\nState:\tS\n", 0},
		{"zero", "VmHWM:\t       0 kB\n", 0},
		{"not a number", "VmHWM:\t  lots kB\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVmHWM([]byte(tc.status))
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("got %v MB, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v MB, %v; want %v MB", got, err, tc.want)
			}
		})
	}
}
