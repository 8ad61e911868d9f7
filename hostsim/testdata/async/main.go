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
	"unsafe"

	"github.com/hashlb/hashlb/hostsim/testdata/guest"
)

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

// waiting maps a callout's token to the stream it resumes, and cluster to
// the cluster that stream's callouts go to.
var (
	waiting = map[uint32]uint32{}
	cluster = map[uint32]string{}
	timeout = map[uint32]uint32{}
)

//go:wasmexport proxy_on_context_create
func onContextCreate(id, root uint32) { guest.Release() }

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n uint32, eos bool) uint32 {
	guest.Release()
	path, _ := guest.GetHeader(0, ":path")
	if path == "/pass" {
		return 0
	}
	c, _ := guest.GetHeader(0, "x-cluster")
	ms := uint32(5000)
	if t, st := guest.GetHeader(0, "x-timeout"); st == 0 {
		ms = uint32(atoi(t))
	}
	cluster[id], timeout[id] = c, ms
	if st := call(id, path); st != 0 {
		guest.SetHeader(0, "x-call-status", itoa(st))
		return 0
	}
	return 1
}

// call sends GET path to the stream's cluster on its behalf.
func call(id uint32, path string) uint32 {
	c := cluster[id]
	hs := guest.Pairs([][2]string{{":method", "GET"}, {":path", path}, {":authority", "store"}, {"x-stream", itoa(id)}})
	body := "for stream " + itoa(id)
	var tok uint32
	st := proxyHTTPCall(guest.Ptr(c), uint32(len(c)), unsafe.Pointer(&hs[0]), uint32(len(hs)), guest.Ptr(body), uint32(len(body)), nil, 0, timeout[id], unsafe.Pointer(&tok))
	if st == 0 {
		waiting[tok] = id
	}
	return st
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, nh, bodySize, nt uint32) {
	guest.Release()
	body, _ := guest.Buffer(4)
	status, _ := guest.GetHeader(6, ":status")
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
		hs := guest.Pairs([][2]string{{"x-local", "yes"}})
		logf("local " + itoa(proxySendLocalResponse(418, guest.Ptr("store_says_no"), 13, guest.Ptr(b), uint32(len(b)), unsafe.Pointer(&hs[0]), uint32(len(hs)), -1)))
	case "close":
		logf("close " + itoa(proxyCloseStream(0)))
	default:
		guest.SetHeader(0, "x-answer", status+":"+body)
		logf("continue " + itoa(proxyContinueStream(0)))
	}
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n uint32, eos bool) uint32 {
	guest.Release()
	guest.SetHeader(2, "x-seen", "1")
	return 0
}

//go:wasmexport proxy_on_done
func onDone(id uint32) bool { return true }

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	delete(cluster, id)
	delete(timeout, id)
}

func logf(s string) { guest.Log(2, s) }

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

func main() {}
