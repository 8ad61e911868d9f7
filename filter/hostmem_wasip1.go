//go:build wasip1

package main

import (
	"encoding/binary"
	"unsafe"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// What the host returns to the module (a header value, a property, the
// header map) it copies into memory it asks the module for: cpp-host's
// WasmBase::allocMemory calls the module's export malloc, or
// proxy_on_memory_allocate when there is no malloc (docs/envoy-host.md#loading).
// The SDK exports only proxy_on_memory_allocate, which makes a new Go slice
// for every value: garbage on every request, and GC cycles. The SDK offers no
// read into a buffer of the caller's. So the module exports malloc, which
// cpp-host prefers, and serves it from an arena while a request's headers
// are handled: the arena is reset when the next request's headers arrive.
// Everything read there lives only as long as that callback (the request
// read into pluginContext.req is cleared at its end: doneRequest).

// arenaSize bounds what one request's reads take from the arena. 128 KiB
// holds twice Envoy's default limit on a request's headers
// (max_request_headers_kb 60), read whole by get_header_map_pairs, plus the
// single values read beside it.
const arenaSize = 128 << 10

// maxOverflow bounds the one larger copy a request may take besides the
// arena (a header map or value over arenaSize, possible when Envoy's
// max_request_headers_kb is raised): it is served from one buffer of this
// size, made at the first such copy and kept.
const maxOverflow = 1 << 20

var arena struct {
	buf  [arenaSize]byte
	used int
	on   bool
	// overflow serves one copy per request that does not fit in buf.
	overflow     []byte
	overflowUsed bool
}

// hostMalloc is the module's malloc export, called by the host only. While
// a request's headers are handled it never allocates: a copy the arena and
// the overflow buffer cannot hold is refused (0), the host then fails that
// call (InvalidMemoryAccess: cpp-host's copyToPointerSize) and the request
// reads the value as missing, so the backup method decides. A Go allocation
// per such request would be garbage, and a GC cycle stalls the worker far
// longer than a request (docs/performance.md#figures-behind-lbcores-caps-and-caches).
//
//go:wasmexport malloc
func hostMalloc(size uint32) *byte {
	if arena.on && size > 0 {
		n := (int(size) + 7) &^ 7
		if n <= arenaSize-arena.used {
			p := &arena.buf[arena.used]
			arena.used += n
			return p
		}
		if arena.overflowUsed || n > maxOverflow {
			return nil
		}
		if arena.overflow == nil {
			arena.overflow = make([]byte, maxOverflow)
		}
		arena.overflowUsed = true
		return &arena.overflow[0]
	}
	if scratch.on && size > 0 {
		if int(size) > len(scratch.buf) {
			scratch.buf = make([]byte, max(int(size), 2*len(scratch.buf), 1<<10))
		}
		return &scratch.buf[0]
	}
	buf := make([]byte, max(size, 1))
	return &buf[0]
}

// scratch serves the host's copies during the tick's shared-data work
// (pluginContext.tickShared): every copy goes to the start of one buffer,
// which grows to the largest value read and is kept. Each copy overwrites
// the one before, which is right for the readers on the tick (lbcore's
// LoadBoard and HealthBoard), which are done with a value before they read
// the next. A tick reads every health record and every worker's load slot
// each second: copies made with make would be a GC cycle every few minutes.
var scratch struct {
	buf []byte
	on  bool
}

// scratchStart and scratchStop bracket the tick's shared-data work.
func scratchStart() { scratch.on = true }
func scratchStop()  { scratch.on = false }

// arenaStart starts serving the host's copies from the arena, from its
// beginning: nothing read during an earlier callback is still referenced.
func arenaStart() { arena.used, arena.overflowUsed, arena.on = 0, false, true }

// arenaStop ends it: what the host returns outside a request's headers
// (configuration, shared data on the tick, response headers) may be kept.
func arenaStop() { arena.on = false }

// proxyGetHeaderMapPairs is proxy_get_header_map_pairs, imported here
// because the SDK's GetHttpRequestHeaders builds a new [][2]string for every
// call.
//
//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(mapType uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer) uint32

// The call's results: globals, so that passing their addresses allocates nothing.
var (
	pairsData *byte
	pairsSize int32
)

// appendRequestHeaders appends to dst every request header line named in
// names (headerNamed), in order, from one host call; the strings are the
// host's copy (the arena during a request). Serialisation: cpp-host
// pairs_util.cc, u32 count, count × (u32 name size, u32 value size), then each
// name and value NUL-terminated.
func appendRequestHeaders(dst [][2]string, names []string) ([][2]string, error) {
	const requestHeaders = 0
	pairsData, pairsSize = nil, 0
	if st := proxyGetHeaderMapPairs(requestHeaders, unsafe.Pointer(&pairsData), unsafe.Pointer(&pairsSize)); st != 0 {
		return dst, types.ErrorStatusBadArgument
	}
	if pairsData == nil || pairsSize < 4 {
		return dst, nil
	}
	bs := unsafe.Slice(pairsData, pairsSize)
	pairsData = nil
	n := int(binary.LittleEndian.Uint32(bs))
	sizes, data := 4, 4+8*n
	if n < 0 || data > len(bs) {
		return dst, types.ErrorStatusBadArgument
	}
	for range n {
		ks := int(binary.LittleEndian.Uint32(bs[sizes:]))
		vs := int(binary.LittleEndian.Uint32(bs[sizes+4:]))
		sizes += 8
		if ks < 0 || vs < 0 || ks+vs+2 > len(bs)-data {
			return dst, types.ErrorStatusBadArgument
		}
		k := unsafe.String(unsafe.SliceData(bs[data:]), ks)
		data += ks + 1
		v := unsafe.String(unsafe.SliceData(bs[data:]), vs)
		data += vs + 1
		if headerNamed(names, k) {
			dst = append(dst, [2]string{k, v})
		}
	}
	return dst, nil
}

// The SDK's GetHttpRequestHeader and GetProperty pass the addresses of
// their locals to the host, which moves them to the heap: two or three small
// allocations per call. The request path reads through these imports
// instead, whose results land in globals.

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(mapType uint32, keyData unsafe.Pointer, keySize uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(pathData unsafe.Pointer, pathSize uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer) uint32

var (
	valueData *byte
	valueSize int32
)

// takeValue is the string the host returned in valueData/valueSize.
func takeValue() string {
	p, n := valueData, valueSize
	valueData, valueSize = nil, 0
	if p == nil || n <= 0 {
		return ""
	}
	return unsafe.String(p, n)
}

// getRequestHeader is proxywasm.GetHttpRequestHeader: the first value of
// request header name; NotFound when there is none (ABI 0.2.x).
func getRequestHeader(name string) (string, error) { return getHeader(0, name) }

// getResponseHeader is proxywasm.GetHttpResponseHeader, as getRequestHeader.
func getResponseHeader(name string) (string, error) { return getHeader(2, name) }

// getHeader reads header name of map mapType (0 request headers, 2 response
// headers).
func getHeader(mapType uint32, name string) (string, error) {
	valueData, valueSize = nil, 0
	if st := proxyGetHeaderMapValue(mapType, unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)),
		unsafe.Pointer(&valueData), unsafe.Pointer(&valueSize)); st != 0 {
		return "", statusError(st)
	}
	return takeValue(), nil
}

// getProperty is proxywasm.GetProperty for a path already serialised: its
// segments joined by NUL ("source\x00address").
func getProperty(path string) (string, error) {
	valueData, valueSize = nil, 0
	if st := proxyGetProperty(unsafe.Pointer(unsafe.StringData(path)), uint32(len(path)),
		unsafe.Pointer(&valueData), unsafe.Pointer(&valueSize)); st != 0 {
		return "", statusError(st)
	}
	return takeValue(), nil
}

//go:wasmimport env proxy_get_shared_data
func proxyGetSharedData(keyData unsafe.Pointer, keySize uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer, returnCAS unsafe.Pointer) uint32

var sharedCAS uint32

// getSharedData is proxywasm.GetSharedData without its locals on the heap:
// the persistence table reads a bucket on every request. The value is the
// host's copy (the arena during a request), read before the next request.
func getSharedData(key string) ([]byte, uint32, error) {
	valueData, valueSize, sharedCAS = nil, 0, 0
	if st := proxyGetSharedData(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)),
		unsafe.Pointer(&valueData), unsafe.Pointer(&valueSize), unsafe.Pointer(&sharedCAS)); st != 0 {
		return nil, 0, statusError(st)
	}
	p, n := valueData, valueSize
	valueData, valueSize = nil, 0
	if p == nil || n <= 0 {
		return nil, sharedCAS, nil
	}
	return unsafe.Slice(p, n), sharedCAS, nil
}

//go:wasmimport env proxy_call_foreign_function
func proxyCallForeignFunction(nameData unsafe.Pointer, nameSize uint32, argData unsafe.Pointer, argSize uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer) uint32

// callForeign is proxywasm.CallForeignFunction for a function whose result
// is not read (set_envoy_filter_state returns none), without the SDK's
// locals on the heap: a network filter calls it on every connection.
func callForeign(name string, args []byte) error {
	valueData, valueSize = nil, 0
	st := proxyCallForeignFunction(unsafe.Pointer(unsafe.StringData(name)), uint32(len(name)),
		unsafe.Pointer(unsafe.SliceData(args)), uint32(len(args)), unsafe.Pointer(&valueData), unsafe.Pointer(&valueSize))
	valueData, valueSize = nil, 0
	return statusError(st)
}

//go:wasmimport env proxy_http_call
func proxyHTTPCall(upstreamData unsafe.Pointer, upstreamSize uint32, headerData unsafe.Pointer, headerSize uint32,
	bodyData unsafe.Pointer, bodySize uint32, trailersData unsafe.Pointer, trailersSize uint32, timeout uint32, calloutID unsafe.Pointer) uint32

var calloutID uint32

// httpCall is proxy_http_call to cluster with headers already serialised
// (appendPairs), body, and no trailers; it returns the callout id. The
// caller registers the answer's callback (callout.go).
func httpCall(cluster string, headers, body []byte, timeoutMs uint32) (uint32, error) {
	calloutID = 0
	st := proxyHTTPCall(unsafe.Pointer(unsafe.StringData(cluster)), uint32(len(cluster)),
		unsafe.Pointer(unsafe.SliceData(headers)), uint32(len(headers)), unsafe.Pointer(unsafe.SliceData(body)), uint32(len(body)),
		unsafe.Pointer(unsafe.SliceData(noTrailers)), uint32(len(noTrailers)), timeoutMs, unsafe.Pointer(&calloutID))
	return calloutID, statusError(st)
}

// getCallResponseHeader is the first value of header name of the answer to
// an http call, during proxy_on_http_call_response.
func getCallResponseHeader(name string) (string, error) { return getHeader(6, name) }

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(bufferType uint32, start uint32, maxSize uint32, returnData unsafe.Pointer, returnSize unsafe.Pointer) uint32

// getCallResponseBody is the first max bytes of the answer's body, during
// proxy_on_http_call_response.
func getCallResponseBody(max int) ([]byte, error) {
	const httpCallResponseBody = 4
	valueData, valueSize = nil, 0
	if st := proxyGetBufferBytes(httpCallResponseBody, 0, uint32(max), unsafe.Pointer(&valueData), unsafe.Pointer(&valueSize)); st != 0 {
		return nil, statusError(st)
	}
	p, n := valueData, valueSize
	valueData, valueSize = nil, 0
	if p == nil || n <= 0 {
		return nil, nil
	}
	return unsafe.Slice(p, n), nil
}

// logInfoBytes logs b at info without copying it: the host is done with the
// message when the call returns (cpp-host's exports.cc log passes a view of
// the module's memory to Envoy's Context::log, which formats it at once with
// ENVOY_LOG), so b may be reused.
func logInfoBytes(b []byte) { proxywasm.LogInfo(unsafe.String(unsafe.SliceData(b), len(b))) }
