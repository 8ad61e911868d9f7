// Command noabi exports only the Higress SDK's marker, which Envoy refuses.
package main

import "unsafe"

//go:wasmexport proxy_abi_version_0_2_100
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	return unsafe.Pointer(&b[0])
}

func main() {}
