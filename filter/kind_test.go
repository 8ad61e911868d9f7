//go:build !wasip1

package main

import (
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// TestSDKStateLayout holds sdkStateLayout to the SDK's registry: the first
// context of a plugin is registered as both kinds, where the SDK's own
// lookups find it, and its first callback drops the other registration.
// (Natively: the SDK's emulator drives the same internal package.)
func TestSDKStateLayout(t *testing.T) {
	h := startHost(t, &vmContext{}, `{"lbMethod":"URLHASH",`+services+`}`)
	id := h.InitializeHttpContext()
	got, ok := sdkState.httpContexts[id]
	if !ok || got == nil || got != proxywasm.GetHttpContext(id) {
		t.Fatalf("sdkState.httpContexts[%d] = %v, %v; the SDK's GetHttpContext = %v", id, got, ok, proxywasm.GetHttpContext(id))
	}
	if _, ok := sdkState.tcpContexts[id]; !ok {
		t.Fatalf("the first context %d is not registered as a TCP context too", id)
	}
	if len(sdkState.pluginContexts) == 0 || sdkState.vmContext == nil {
		t.Fatalf("sdkState has %d plugin contexts and VM context %v, want the running plugin's", len(sdkState.pluginContexts), sdkState.vmContext)
	}
	h.CallOnRequestHeaders(id, [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "a"}}, true)
	if _, ok := sdkState.tcpContexts[id]; ok {
		t.Errorf("after proxy_on_request_headers context %d is still registered as a TCP context", id)
	}
	id2 := h.InitializeHttpContext()
	if _, ok := sdkState.tcpContexts[id2]; ok {
		t.Errorf("context %d, made once the plugin is known to be an HTTP filter, is registered as a TCP context", id2)
	}
}

// TestWrongKindNative: an HTTP configuration run as a network filter closes
// the connection; a network configuration run as an HTTP filter answers
// 503. Once per plugin the reason is logged.
func TestWrongKindNative(t *testing.T) {
	t.Run("HTTP configuration, network filter", func(t *testing.T) {
		h := startHost(t, &vmContext{}, `{"lbMethod":"SOURCEIPHASH",`+services+`}`)
		for range 3 {
			if a := h.connect("192.0.2.1:4000", "198.51.100.1:443"); a != types.ActionPause {
				t.Fatalf("connection = %v, want Pause (closed)", a)
			}
		}
		if logs := h.GetErrorLogs(); len(logs) != 1 {
			t.Errorf("error logs %q, want one", logs)
		}
	})
	t.Run("network configuration, HTTP filter", func(t *testing.T) {
		h := startHost(t, &vmContext{}, `{"filterType":"network","lbMethod":"SOURCEIPHASH",`+services+`}`)
		for range 3 {
			r := h.request("192.0.2.1:4000", "198.51.100.1:443", [2]string{":path", "/"})
			if r.local == nil || r.local.StatusCode != 503 {
				t.Fatalf("request: local reply %+v, want 503", r.local)
			}
		}
		if logs := h.GetErrorLogs(); len(logs) != 1 {
			t.Errorf("error logs %q, want one", logs)
		}
	})
}
