package main

import (
	"encoding/binary"
	"unsafe"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// An active probe is a proxy_http_call whose answer comes to the SDK's
// export proxy_on_http_call_response, which looks the callout id up in the
// calling plugin's table of callbacks (and panics, killing the VM, on an id
// it does not know). The SDK's DispatchHttpCall allocates on every call: the
// serialised headers and trailers, the callout id (its address goes to the
// host), a record for the table, and the caller's closure. So the filter
// makes the call itself (httpCall, hostmem_*.go), with a request serialised
// once per service, and puts in the SDK's table a record made once per
// service, whose callback is a method value made once: a probe allocates
// nothing. The table is reached as kind.go reaches the context registry;
// TestSDKCalloutLayout holds these mirrors to the SDK's types. A probe's
// answer is then read through the module's own imports into the arena.

// pluginStateLayout mirrors the SDK's pluginContextState (proxywasm/internal
// vmstate.go), field for field.
type pluginStateLayout struct {
	context        types.PluginContext
	httpCallbacks  map[uint32]*calloutLayout
	redisCallbacks map[uint32]unsafe.Pointer
}

// calloutLayout mirrors the SDK's httpCallbackAttribute.
type calloutLayout struct {
	callback        func(numHeaders, bodySize, numTrailers int)
	callerContextID uint32
}

// sdkCallouts is the callback table of the running context's plugin, as the
// SDK's RegisterHttpCallout finds it; nil when there is none.
func sdkCallouts() map[uint32]*calloutLayout {
	s := sdkState.pluginContexts[sdkState.contextIDToRootID[sdkState.activeContextID]]
	if s == nil {
		return nil
	}
	return s.httpCallbacks
}

// registerCallout puts c in the table for the answer to callout id, as the
// SDK's RegisterHttpCallout does with a new record: for the running context.
func registerCallout(table map[uint32]*calloutLayout, id uint32, c *calloutLayout) {
	registerCalloutFor(table, id, c, sdkState.activeContextID)
}

// registerCalloutFor is registerCallout for context caller: the SDK calls c
// back only while that context lives, with it effective.
func registerCalloutFor(table map[uint32]*calloutLayout, id uint32, c *calloutLayout, caller uint32) {
	c.callerContextID = caller
	table[id] = c
}

// appendPairs appends headers serialised as proxy-wasm header maps are
// (proxy-wasm-cpp-host pairs_util.cc): u32 count, count × (u32 name size,
// u32 value size), then each name and value followed by a NUL.
func appendPairs(dst []byte, headers [][2]string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(headers)))
	for _, kv := range headers {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[0])))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(kv[1])))
	}
	for _, kv := range headers {
		dst = append(append(dst, kv[0]...), 0)
		dst = append(append(dst, kv[1]...), 0)
	}
	return dst
}

// noTrailers is an empty header map, serialised.
var noTrailers = appendPairs(nil, nil)

// statusError is the SDK's error for a proxy-wasm status.
func statusError(st uint32) error {
	switch st {
	case 0:
		return nil
	case 1:
		return types.ErrorStatusNotFound
	case 2:
		return types.ErrorStatusBadArgument
	}
	return types.ErrorInternalFailure
}
