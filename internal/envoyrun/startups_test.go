package envoyrun

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessCPU: the CPU time /proc gives for this process grows as the
// kernel's own account of it (getrusage) does over a busy loop. The loop
// runs until the process has spent 300 ms of CPU, however long a busy
// machine takes to give it that.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used0 := rusageCPU(t)
	x := 0
	for rusageCPU(t)-used0 < 300*time.Millisecond {
		for range 100000 {
			x++
		}
	}
	after, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used := rusageCPU(t) - used0
	// /proc counts in clock ticks: each reading may lag by one.
	if grew := after - before; grew < used-2*clockTick || grew > used+2*clockTick {
		t.Errorf("/proc's CPU time grew by %v while getrusage's grew by %v (%d turns)", grew, used, x)
	}
	if _, err := processCPU(-1); err == nil {
		t.Error("no error for a process that cannot exist")
	}
}

// rusageCPU is this process's user and system CPU time by getrusage(2).
func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestStartupReport: the line names the count, the sum, the median and the
// longest of the times to ready, the CPU time's sum, and the tests whose
// Envoys spent the most CPU time in all, most first.
func TestStartupReport(t *testing.T) {
	startups.Lock()
	wall, cpu, label, exited := startups.wall, startups.cpu, startups.label, startups.exited
	startups.wall, startups.cpu, startups.label, startups.exited = nil, nil, nil, nil
	startups.Unlock()
	defer func() {
		startups.Lock()
		startups.wall, startups.cpu, startups.label, startups.exited = wall, cpu, label, exited
		startups.Unlock()
	}()
	if r := StartupReport(); r != "" {
		t.Errorf("no Envoy started, report %q", r)
	}
	for i, s := range []int{3, 1, 8} {
		startups.wall = append(startups.wall, time.Duration(s)*time.Second)
		startups.cpu = append(startups.cpu, time.Duration(s)*2*time.Second)
		startups.label = append(startups.label, []string{"TestA", "TestA", "TestB"}[i])
	}
	noteExit("TestA", 30*time.Second)
	noteExit("TestA", 5*time.Second)
	want := "envoyrun: 3 Envoys started; time to ready 12s in all (median 3s, longest 8s); their CPU time before ready 24s in all; most by (Envoys: CPU before ready / in all): TestA 2: 8s / 35s, TestB 1: 16s / 0s"
	if r := StartupReport(); !strings.Contains(r, want) {
		t.Errorf("report %q, want %q", r, want)
	}
}
