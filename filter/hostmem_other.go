//go:build !wasip1

package main

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// Outside Wasm (the SDK's native test host) the host's copies are ordinary
// Go memory: hostmem_wasip1.go holds the module's arena.

func arenaStart()   {}
func arenaStop()    {}
func scratchStart() {}
func scratchStop()  {}

// appendRequestHeaders appends to dst every request header line named in
// names (headerNamed), in order.
func appendRequestHeaders(dst [][2]string, names []string) ([][2]string, error) {
	all, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return dst, err
	}
	for _, h := range all {
		if headerNamed(names, h[0]) {
			dst = append(dst, h)
		}
	}
	return dst, nil
}

// getRequestHeader is proxywasm.GetHttpRequestHeader.
func getRequestHeader(name string) (string, error) { return proxywasm.GetHttpRequestHeader(name) }

// getResponseHeader is proxywasm.GetHttpResponseHeader.
func getResponseHeader(name string) (string, error) { return proxywasm.GetHttpResponseHeader(name) }

// getProperty is proxywasm.GetProperty for a path serialised with NULs
// between its segments.
func getProperty(path string) (string, error) {
	v, err := proxywasm.GetProperty(strings.Split(path, "\x00"))
	return string(v), err
}

// getSharedData is proxywasm.GetSharedData.
func getSharedData(key string) ([]byte, uint32, error) { return proxywasm.GetSharedData(key) }

// callForeign is proxywasm.CallForeignFunction, its result dropped.
func callForeign(name string, args []byte) error {
	_, err := proxywasm.CallForeignFunction(name, args)
	return err
}

// sdkProxyHTTPCall is the SDK's proxy_http_call, which natively calls its
// emulator.
//
//go:linkname sdkProxyHTTPCall github.com/higress-group/proxy-wasm-go-sdk/proxywasm/internal.ProxyHttpCall
func sdkProxyHTTPCall(upstreamData *byte, upstreamSize int32, headerData *byte, headerSize int32,
	bodyData *byte, bodySize int32, trailersData *byte, trailersSize int32, timeout uint32, calloutIDPtr *uint32) uint32

var calloutID uint32

// httpCall is proxy_http_call with headers already serialised, and body.
// The SDK's emulator keeps views of the headers it is given, where a host
// copies them: they are copied here, since the callers reuse their buffers.
func httpCall(cluster string, headers, body []byte, timeoutMs uint32) (uint32, error) {
	headers = bytes.Clone(headers)
	calloutID = 0
	st := sdkProxyHTTPCall(unsafe.StringData(cluster), int32(len(cluster)), unsafe.SliceData(headers), int32(len(headers)),
		unsafe.SliceData(body), int32(len(body)), unsafe.SliceData(noTrailers), int32(len(noTrailers)), timeoutMs, &calloutID)
	return calloutID, statusError(st)
}

// getCallResponseHeader is the first value of header name of an http call's answer.
func getCallResponseHeader(name string) (string, error) {
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return "", err
	}
	for _, kv := range hs {
		if kv[0] == name {
			return kv[1], nil
		}
	}
	return "", types.ErrorStatusNotFound
}

// getCallResponseBody is the first max bytes of an http call's answer body.
func getCallResponseBody(max int) ([]byte, error) { return proxywasm.GetHttpCallResponseBody(0, max) }

// logInfoBytes logs a copy of b at info: the SDK's native test host keeps
// the string it is given.
func logInfoBytes(b []byte) { proxywasm.LogInfo(string(b)) }
