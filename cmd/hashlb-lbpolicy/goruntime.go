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
//   - each worker's goroutine yields (runtime.Gosched) once every 8 ms of
//     choices, so that its P's schedule tick moves before sysmon's 10 ms
//     (forcePreemptNS in the runtime's proc.go): sysmon sees the tick move
//     at each of its looks, 10 ms apart once it has backed off, and never
//     takes the P. The clock is kept in C (cache.c, HL_YIELD_NS) and read
//     on every choice, the cache's hits included: while the yields were
//     made in Go, a worker whose choices the cache answered entered Go only
//     on the few misses, its P sat in C unscheduled for more than 10 ms
//     between two of them, and every such entry cost a take-back and a
//     millisecond of sysmon polling every 20 µs (2-3 % of Envoy's CPU at
//     the benchmark's load; TestLBPolicyGoRuntimeQuiet, URLHASH).
//
// A yield costs the choice that makes it a hand-off between two of the
// runtime's threads (a callback goroutine is locked to its thread, so the
// thread gives its P to another, which finds the goroutine and gives the P
// back), 125 times a second per busy worker. When choices stop, the P is
// taken back once and sysmon, finding every P idle, sleeps until Go is
// entered again.

import "C"

import (
	"runtime"
	"sync"
	"syscall"
)

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

// hl_go_yield yields the calling worker's goroutine: cache.c calls it once
// every HL_YIELD_NS of choices, whether they are answered from the cache or
// in Go.
//
//export hl_go_yield
func hl_go_yield() {
	runtime.Gosched()
}
