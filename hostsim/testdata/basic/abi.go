// Command basic is a hostsim test module written against the raw proxy-wasm
// ABI (no SDK). Its request handler is driven by the :path header.
package main

import "unsafe"

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, max uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeader(typ uint32, key unsafe.Pointer, keySize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxyReplaceHeader(typ uint32, key unsafe.Pointer, keySize uint32, val unsafe.Pointer, valSize uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func proxyGetHeaderSize(typ uint32, size unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathSize uint32, ptr, size unsafe.Pointer) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, det unsafe.Pointer, detSize uint32, body unsafe.Pointer, bodySize uint32, hs unsafe.Pointer, hsSize uint32, grpc int32) uint32

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(key unsafe.Pointer, keySize uint32, ptr, size, cas unsafe.Pointer) uint32

//go:wasmimport env proxy_set_shared_data
func proxySetSharedData(key unsafe.Pointer, keySize uint32, val unsafe.Pointer, valSize uint32, cas uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetTime(ptr unsafe.Pointer) uint32

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, upSize uint32, hs unsafe.Pointer, hsSize uint32, body unsafe.Pointer, bodySize uint32, tr unsafe.Pointer, trSize uint32, timeout uint32, token unsafe.Pointer) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(typ uint32, name unsafe.Pointer, nameSize uint32, id unsafe.Pointer) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, off int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(id uint32, val uint64) uint32

//go:wasmimport env proxy_get_metric
func proxyGetMetric(id uint32, val unsafe.Pointer) uint32

//go:wasmimport env proxy_done
func proxyDone() uint32

//go:wasmimport env proxy_get_log_level
func proxyGetLogLevel(ptr unsafe.Pointer) uint32

// keep holds the buffers handed to the host until the next callback, so the
// garbage collector cannot reuse them while the host writes into them.
var keep [][]byte

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	keep = append(keep, b)
	return unsafe.Pointer(&b[0])
}

func ptr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func logf(level uint32, s string) { proxyLog(level, ptr(s), uint32(len(s))) }

func bytesAt(p, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(p))), n))
}

func itoa(i int64) string {
	if i == 0 {
		return "0"
	}
	neg := i < 0
	if neg {
		i = -i
	}
	var b []byte
	for i > 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	if neg {
		b = append([]byte{'-'}, b...)
	}
	return string(b)
}

func getHeader(typ uint32, k string) (string, uint32) {
	var p, n uint32
	st := proxyGetHeader(typ, ptr(k), uint32(len(k)), unsafe.Pointer(&p), unsafe.Pointer(&n))
	return bytesAt(p, n), st
}

func setHeader(typ uint32, k, v string) uint32 {
	return proxyReplaceHeader(typ, ptr(k), uint32(len(k)), ptr(v), uint32(len(v)))
}

func property(path string) (string, uint32) {
	var p, n uint32
	st := proxyGetProperty(ptr(path), uint32(len(path)), unsafe.Pointer(&p), unsafe.Pointer(&n))
	return bytesAt(p, n), st
}

func buffer(typ uint32) (string, uint32) {
	var p, n uint32
	st := proxyGetBufferBytes(typ, 0, 1<<20, unsafe.Pointer(&p), unsafe.Pointer(&n))
	return bytesAt(p, n), st
}

func main() {}
