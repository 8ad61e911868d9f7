// Package guest is what hostsim's raw-ABI test modules (testdata/basic and
// testdata/async, no SDK) share: the proxy-wasm ABI marker, the allocator
// the host calls, and the header and buffer calls over Go strings.
package guest

import (
	"encoding/binary"
	"unsafe"
)

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, max uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeader(typ uint32, key unsafe.Pointer, keySize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeader(typ uint32, key unsafe.Pointer, keySize uint32, val unsafe.Pointer, valSize uint32) uint32

// keep holds the buffers handed to the host until the next callback, so the
// garbage collector cannot reuse them while the host writes into them.
var keep [][]byte

// Release lets the buffers handed to the host go; a module calls it first
// in every callback.
func Release() { keep = keep[:0] }

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	keep = append(keep, b)
	return unsafe.Pointer(&b[0])
}

// Ptr is the address of s's bytes, for the host to read.
func Ptr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

// Log sends s to the host's log at level (proxy_log).
func Log(level uint32, s string) { proxyLog(level, Ptr(s), uint32(len(s))) }

// BytesAt is a copy of the n bytes the host wrote at p.
func BytesAt(p, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(p))), n))
}

// GetHeader is the value of header k in map typ, and the call's status.
func GetHeader(typ uint32, k string) (string, uint32) {
	var p, n uint32
	st := proxyGetHeader(typ, Ptr(k), uint32(len(k)), unsafe.Pointer(&p), unsafe.Pointer(&n))
	return BytesAt(p, n), st
}

// SetHeader replaces header k in map typ with v.
func SetHeader(typ uint32, k, v string) uint32 {
	return proxyReplaceHeader(typ, Ptr(k), uint32(len(k)), Ptr(v), uint32(len(v)))
}

// Buffer is the first MiB of buffer typ, and the call's status.
func Buffer(typ uint32) (string, uint32) {
	var p, n uint32
	st := proxyGetBufferBytes(typ, 0, 1<<20, unsafe.Pointer(&p), unsafe.Pointer(&n))
	return BytesAt(p, n), st
}

// Pairs serialises header pairs in the ABI's format.
func Pairs(ps [][2]string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(ps)))
	for _, p := range ps {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[0])))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(p[1])))
	}
	for _, p := range ps {
		b = append(append(append(append(b, p[0]...), 0), p[1]...), 0)
	}
	return b
}
