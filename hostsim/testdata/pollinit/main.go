// Command pollinit calls poll_oneoff from a package initialiser, i.e. during
// _initialize, where envoy-1.33 forbids it and envoy-1.39 allows it.
package main

import "unsafe"

//go:wasmimport wasi_snapshot_preview1 poll_oneoff
func pollOneoff(in, out unsafe.Pointer, n uint32, nevents unsafe.Pointer) uint32

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

var pollResult = func() uint32 {
	var in [48]byte
	var out [32]byte
	var nevents uint32 = 7
	st := pollOneoff(unsafe.Pointer(&in[0]), unsafe.Pointer(&out[0]), 1, unsafe.Pointer(&nevents))
	msg := "poll_oneoff " + string(rune('0'+st%10)) + " nevents " + string(rune('0'+nevents))
	proxyLog(2, unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
	return st
}()

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	return unsafe.Pointer(&b[0])
}

func main() {}
