// Command procexit calls os.Exit from a request handler: proc_exit returns in
// Envoy, and the Go runtime traps right after.
package main

import (
	"os"
	"unsafe"
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	os.Exit(3)
	return 0
}

func main() {}
