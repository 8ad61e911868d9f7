// Command allocbad exports a malloc that yields (sched_yield), which V8
// forbids while the host allocates: the VM traps on its first allocation.
package main

import "unsafe"

//go:wasmimport wasi_snapshot_preview1 sched_yield
func schedYield() uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathSize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport malloc
func malloc(size uint32) unsafe.Pointer {
	schedYield()
	b := make([]byte, size)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	var p, s uint32
	path := "plugin_name"
	proxyGetProperty(unsafe.Pointer(unsafe.StringData(path)), uint32(len(path)), unsafe.Pointer(&p), unsafe.Pointer(&s))
	return 0
}

func main() {}
