//go:build wasip1

package main

import (
	"time"
	"unsafe"
)

// clockTimeGet is WASI clock_time_get, which Envoy allows in every callback
// (docs/envoy-host.md#wasi-functions).
//
//go:wasmimport wasi_snapshot_preview1 clock_time_get
func clockTimeGet(id uint32, precision uint64, out unsafe.Pointer) uint32

// wallNanos receives clock_time_get's result; a global, so that the call
// allocates nothing.
var wallNanos uint64

// wallClock is the realtime clock in one host call. time.Now makes two (the
// realtime and the monotonic clock); what the request path passes to lbcore
// needs only the wall time, shared by every worker. On an error (no host
// does that for id 0) it falls back to time.Now.
func wallClock() time.Time {
	const realtime = 0
	if clockTimeGet(realtime, 1, unsafe.Pointer(&wallNanos)) != 0 {
		return time.Now()
	}
	return time.Unix(0, int64(wallNanos))
}
