package main

// How the Go runtime lives with Envoy's threads. Envoy's threads call into
// Go through cgo callbacks; between two callbacks each such thread is "in a
// C call" as far as the runtime knows, and keeps holding a Go P (Go's
// processor slot: at most GOMAXPROCS of them). The runtime's monitor thread
// (sysmon) takes a P back from a thread that holds it in a C call when
//
//   - no P is idle and the thread has been in C for one of its ticks (20 µs
//     and up), or
//   - the P's goroutine has not been rescheduled for 10 ms: a callback
//     goroutine never is, since it runs straight from C into Go and back,
//
// then hands the P to another of its threads, waking it for nothing. Under
// load every P held by an Envoy worker was so taken back over and over, with
// sysmon polling every 20 µs and waking a thread each time: a tenth of
// Envoy's CPU (docs/deploy.md, "The Go runtime in Envoy"; the figures in
// docs/performance.md, "hashlb as Envoy's load-balancing policy"). Two
// measures stop it, and it takes both:
//
//   - GOMAXPROCS is kept above the number of Envoy threads that have made a
//     load balancer (the main thread and each worker), so that a P is always
//     idle;
//   - each worker's goroutine yields (runtime.Gosched) once every yieldEvery
//     of choices, so its P's schedule tick moves before sysmon's 10 ms.
//
// A yield costs the choice that makes it a hand-off between two of the
// runtime's threads, once per yieldEvery per worker.

import (
	"runtime"
	"sync"
	"syscall"
	"time"
)

// yieldEvery is how often, at most, a worker's callback goroutine yields:
// below sysmon's 10 ms (forcePreemptNS in the runtime's proc.go), so that
// while choices keep coming the P's schedule tick has moved whenever sysmon
// looks again 10 ms after it last saw it move; the 2 ms left cover a choice
// that comes a little late. Every yield costs, so not more often.
const yieldEvery = 8 * time.Millisecond

// spareProcs is how many Ps are kept beyond one per calling thread: one
// idle P is what stops sysmon taking a P back at its first tick; the second
// serves the runtime's own goroutines (the garbage collector's).
const spareProcs = 2

// callers counts the Envoy threads that have made a load balancer.
var callers struct {
	sync.Mutex
	tids  map[int]struct{}
	procs int // the GOMAXPROCS last set, 0 before
}

// noteCaller records the calling thread (a hook runs on the Envoy thread
// that called it) and raises GOMAXPROCS when the threads seen so far and
// the spares need more Ps than there are. It never lowers it.
func noteCaller() {
	tid := syscall.Gettid()
	callers.Lock()
	defer callers.Unlock()
	if callers.tids == nil {
		callers.tids = map[int]struct{}{}
	}
	callers.tids[tid] = struct{}{}
	want := len(callers.tids) + spareProcs
	if callers.procs == 0 {
		callers.procs = runtime.GOMAXPROCS(0)
	}
	if want > callers.procs {
		runtime.GOMAXPROCS(want)
		callers.procs = want
	}
}

// maybeYield yields the calling goroutine when yieldEvery has passed since
// *last, and records now there.
func maybeYield(last *time.Time, now time.Time) {
	if now.Sub(*last) < yieldEvery {
		return
	}
	*last = now
	runtime.Gosched()
}
