package abi

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
// load every P held by an Envoy worker is so taken back over and over, with
// sysmon polling every 20 µs and waking a thread each time: CPU taken from
// Envoy's requests (docs/deploy.md, "The Go runtime in Envoy"; the figures in
// docs/performance.md, "hashlb as Envoy's load-balancing policy"). Two
// measures stop it, and it takes both:
//
//   - GOMAXPROCS is kept above the number of Envoy threads that have made a
//     load balancer (the main thread and each worker), so that a P is always
//     idle;
//   - a worker's goroutine yields (runtime.Gosched) once every yieldEvery
//     while it enters Go densely, so its P's schedule tick moves before
//     sysmon's 10 ms (entries.enter).
//
// A yield costs the choice that makes it a hand-off between two of the
// runtime's threads, and helps only a worker that will hold its P past
// sysmon's 10 ms with Go entered in between: one whose every choice enters
// Go. A worker the choice cache serves enters Go only on the cache's
// misses, tens of times a second; its P is taken back between two of them
// whether it yields or not. BenchmarkEnvoyLBPolicyGoRuntime (e2e/envoy)
// measures the runtime's share of Envoy's CPU; the figures, with and
// without each measure, are in docs/performance.md.

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

// entries is when a worker last entered Go and last yielded.
type entries struct {
	last, yielded time.Time
	yields        int // how many times it yielded (tests)
}

// enter notes a worker's entry into Go at now, and yields its goroutine
// when the entries come densely (the one before less than yieldEvery ago)
// and the last yield is yieldEvery old: a worker whose entries are sparse,
// as the choice cache makes them, loses its P between two of them whatever
// it does, and a yield would only add its hand-off (a callback goroutine is
// locked to its thread, so the thread gives its P to another of the
// runtime's threads, which finds the goroutine and gives the P back) to the
// choice that makes it. With testYield "off", never.
func (e *entries) enter(now time.Time) {
	dense := now.Sub(e.last) < yieldEvery
	e.last = now
	if dense && now.Sub(e.yielded) >= yieldEvery && testYield != "off" {
		e.yielded = now
		e.yields++
		runtime.Gosched()
	}
}
