package envoyrun

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestProcessCPU: the CPU time /proc gives for this process grows by at
// least what a busy loop spent, less the clock tick's rounding.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// A busy machine may give the loop less than its wall time: the
	// bound is a third of it.
	if after-before < 100*time.Millisecond-clockTick {
		t.Errorf("CPU time grew by %v over a 300 ms busy loop (%d turns)", after-before, x)
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("no error for a process that cannot exist")
	}
}

// TestStartupReport: the line names the count, the sum, the median and the
// longest of the times to ready, and the CPU time's sum.
func TestStartupReport(t *testing.T) {
	startups.Lock()
	wall, cpu := startups.wall, startups.cpu
	startups.wall, startups.cpu = nil, nil
	startups.Unlock()
	defer func() {
		startups.Lock()
		startups.wall, startups.cpu = wall, cpu
		startups.Unlock()
	}()
	if r := StartupReport(); r != "" {
		t.Errorf("no Envoy started, report %q", r)
	}
	for _, s := range []int{3, 1, 8} {
		startups.wall = append(startups.wall, time.Duration(s)*time.Second)
		startups.cpu = append(startups.cpu, time.Duration(s)*2*time.Second)
	}
	want := "envoyrun: 3 Envoys started; time to ready 12s in all (median 3s, longest 8s); their CPU time before ready 24s in all"
	if r := StartupReport(); !strings.Contains(r, want) {
		t.Errorf("report %q, want %q", r, want)
	}
}
