//go:build hashlb_memstats

package main

// A test-only build (go build -tags hashlb_memstats) that logs the guest's
// runtime.MemStats at the start and at the end of every tick, so that a test
// can count what requests, ticks and probes allocate between two ticks
// (e2e/guestmem_test.go). The release module never contains it.

import (
	"runtime"
	"strconv"
	"unsafe"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

var (
	memStats runtime.MemStats
	memLine  = make([]byte, 0, 256)
)

func init() { tickHook = logMemStats }

// logMemStats logs "hashlb-memstats <where> total_alloc=… mallocs=… num_gc=…
// heap_alloc=… next_gc=…"
// without allocating: the line is built in a buffer kept for the purpose.
func logMemStats(where string) {
	runtime.ReadMemStats(&memStats)
	b := append(memLine[:0], "hashlb-memstats "...)
	b = append(b, where...)
	b = append(b, " total_alloc="...)
	b = strconv.AppendUint(b, memStats.TotalAlloc, 10)
	b = append(b, " mallocs="...)
	b = strconv.AppendUint(b, memStats.Mallocs, 10)
	b = append(b, " num_gc="...)
	b = strconv.AppendUint(b, uint64(memStats.NumGC), 10)
	b = append(b, " heap_alloc="...)
	b = strconv.AppendUint(b, memStats.HeapAlloc, 10)
	b = append(b, " next_gc="...)
	b = strconv.AppendUint(b, memStats.NextGC, 10)
	memLine = b
	proxywasm.LogInfo(unsafe.String(unsafe.SliceData(b), len(b)))
}
