// Command basic is a hostsim test module written against the raw proxy-wasm
// ABI (no SDK). Its request handler is driven by the :path header.
package main

import (
	"unsafe"

	"github.com/hashlb/hashlb/hostsim/testdata/guest"
)

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

func logf(level uint32, s string) { guest.Log(level, s) }

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

func property(path string) (string, uint32) {
	var p, n uint32
	st := proxyGetProperty(guest.Ptr(path), uint32(len(path)), unsafe.Pointer(&p), unsafe.Pointer(&n))
	return guest.BytesAt(p, n), st
}

func main() {}
