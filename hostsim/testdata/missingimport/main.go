// Command missingimport imports a Higress-only host function Envoy lacks.
package main

import "unsafe"

//go:wasmimport env proxy_set_upstream_override_host
func proxySetUpstreamOverrideHost(p unsafe.Pointer, n uint32) uint32

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	proxySetUpstreamOverrideHost(nil, 0)
	return 0
}

func main() {}
