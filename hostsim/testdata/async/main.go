// Command async is a hostsim test module (raw proxy-wasm ABI, no SDK) that
// pauses each request on a callout and resumes it from the callout's
// response through proxy_set_effective_context, as a module waiting on a
// remote store does.
//
// proxy_on_request_headers: "/pass" continues at once; any other :path is
// fetched from the cluster named by the x-cluster header (timeout x-timeout
// ms, default 5000; the body "for stream ID") and the request pauses. proxy_on_http_call_response logs
// "response TOKEN status STATUS headers N body BODY", then acts on the body:
// "again PATH" makes a second callout for the same stream (chained from the
// response), "local" answers the stream with a 418, "close" closes it, and
// anything else sets x-answer: STATUS:BODY on the request and continues it.
// It logs the status of proxy_set_effective_context ("effective ID ST") and
// of the final call ("continue ST", "local ST", "close ST").
package main

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

//go:wasmimport env proxy_http_call
func proxyHTTPCall(up unsafe.Pointer, upSize uint32, hs unsafe.Pointer, hsSize uint32, body unsafe.Pointer, bodySize uint32, tr unsafe.Pointer, trSize uint32, timeout uint32, token unsafe.Pointer) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(typ uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(typ uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, det unsafe.Pointer, detSize uint32, body unsafe.Pointer, bodySize uint32, hs unsafe.Pointer, hsSize uint32, grpc int32) uint32

// keep holds the buffers handed to the host until the next callback.
var keep [][]byte

// waiting maps a callout's token to the stream it resumes, and cluster to
// the cluster that stream's callouts go to.
var (
	waiting = map[uint32]uint32{}
	cluster = map[uint32]string{}
	timeout = map[uint32]uint32{}
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size)
	keep = append(keep, b)
	return unsafe.Pointer(&b[0])
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) { keep = keep[:0] }

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	keep = keep[:0]
	path, _ := getHeader(0, ":path")
	if path == "/pass" {
		return 0
	}
	c, _ := getHeader(0, "x-cluster")
	ms := uint32(5000)
	if t, st := getHeader(0, "x-timeout"); st == 0 {
		ms = uint32(atoi(t))
	}
	cluster[id], timeout[id] = c, ms
	if st := call(id, path); st != 0 {
		setHeader(0, "x-call-status", itoa(st))
		return 0
	}
	return 1
}

// call sends GET path to the stream's cluster on its behalf.
func call(id uint32, path string) uint32 {
	c := cluster[id]
	hs := pairs([][2]string{{":method", "GET"}, {":path", path}, {":authority", "store"}, {"x-stream", itoa(id)}})
	body := "for stream " + itoa(id)
	var tok uint32
	st := proxyHTTPCall(ptr(c), uint32(len(c)), unsafe.Pointer(&hs[0]), uint32(len(hs)), ptr(body), uint32(len(body)), nil, 0, timeout[id], unsafe.Pointer(&tok))
	if st == 0 {
		waiting[tok] = id
	}
	return st
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, bodySize, nt uint32) {
	keep = keep[:0]
	body, _ := buffer(4)
	status, _ := getHeader(6, ":status")
	logf("response " + itoa(token) + " status " + status + " headers " + itoa(nh) + " body " + body)
	id, ok := waiting[token]
	if !ok {
		return
	}
	delete(waiting, token)
	if len(body) > 6 && body[:6] == "again " {
		logf("again " + itoa(call(id, body[6:])))
		return
	}
	logf("effective " + itoa(id) + " " + itoa(proxySetEffectiveContext(id)))
	switch body {
	case "local":
		b := "from the store"
		hs := pairs([][2]string{{"x-local", "yes"}})
		logf("local " + itoa(proxySendLocalResponse(418, ptr("store_says_no"), 13, ptr(b), uint32(len(b)), unsafe.Pointer(&hs[0]), uint32(len(hs)), -1)))
	case "close":
		logf("close " + itoa(proxyCloseStream(0)))
	default:
		setHeader(0, "x-answer", status+":"+body)
		logf("continue " + itoa(proxyContinueStream(0)))
	}
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n uint32, eos bool) uint32 {
	keep = keep[:0]
	setHeader(2, "x-seen", "1")
	return 0
}

//go:wasmexport proxy_on_done
func onDone(id uint32) bool { return true }

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	delete(cluster, id)
	delete(timeout, id)
}

func ptr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func logf(s string) { proxyLog(2, ptr(s), uint32(len(s))) }

func bytesAt(p, n uint32) string {
	if n == 0 {
		return ""
	}
	return string(unsafe.Slice((*byte)(unsafe.Pointer(uintptr(p))), n))
}

func getHeader(typ uint32, k string) (string, uint32) {
	var p, n uint32
	st := proxyGetHeader(typ, ptr(k), uint32(len(k)), unsafe.Pointer(&p), unsafe.Pointer(&n))
	return bytesAt(p, n), st
}

func setHeader(typ uint32, k, v string) uint32 {
	return proxyReplaceHeader(typ, ptr(k), uint32(len(k)), ptr(v), uint32(len(v)))
}

func buffer(typ uint32) (string, uint32) {
	var p, n uint32
	st := proxyGetBufferBytes(typ, 0, 1<<20, unsafe.Pointer(&p), unsafe.Pointer(&n))
	return bytesAt(p, n), st
}

func itoa(i uint32) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// pairs serialises header pairs in the ABI's format.
func pairs(ps [][2]string) []byte {
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

func main() {}
