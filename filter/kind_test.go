//go:build !wasip1

package main

import (
	"testing"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/proxytest"
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

// TestSDKCalloutLayout holds pluginStateLayout and calloutLayout (callout.go)
// to the SDK's: a callout the SDK's own DispatchHttpCall registers reads
// through them as the record it made (its caller and its callback), and a
// probe's record, put in the same table, is what the SDK's
// proxy_on_http_call_response finds and calls.
func TestSDKCalloutLayout(t *testing.T) {
	h := startHost(t, &vmContext{}, `{"lbMethod":"URLHASH","healthCheck":{"interval":"1s","unhealthyThreshold":1,"healthyThreshold":1,"cluster":"probe"},`+services+`}`)
	h.Tick() // the plugin's context is the running one; probes are sent
	st := sdkState.pluginContexts[proxytest.PluginContextID]
	if st == nil {
		t.Fatalf("sdkState.pluginContexts has no plugin %d", proxytest.PluginContextID)
	}
	p, ok := st.context.(*pluginContext)
	if !ok || p.health == nil {
		t.Fatalf("the SDK's plugin state holds context %T, want the started *pluginContext", st.context)
	}
	table := sdkCallouts()
	if table == nil {
		t.Fatal("sdkCallouts() = nil while the plugin runs")
	}
	probes := h.GetCalloutAttributesFromContext(proxytest.PluginContextID)
	if len(probes) != len(p.health.probes) {
		t.Fatalf("one tick sent %d probes, want %d", len(probes), len(p.health.probes))
	}
	for _, c := range probes {
		rec := table[c.CalloutID]
		if rec == nil || rec.callerContextID != proxytest.PluginContextID {
			t.Fatalf("callout %d: table record %+v, want one of the probes', caller %d", c.CalloutID, rec, proxytest.PluginContextID)
		}
	}

	var got [3]int
	id, err := proxywasm.DispatchHttpCall("probe", [][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "a"}}, nil, nil, 1000,
		func(numHeaders, bodySize, numTrailers int) { got = [3]int{numHeaders, bodySize, numTrailers} })
	if err != nil {
		t.Fatalf("DispatchHttpCall: %v", err)
	}
	rec := table[id]
	if rec == nil || rec.callback == nil || rec.callerContextID != proxytest.PluginContextID {
		t.Fatalf("the SDK's record of callout %d reads as %+v, want its callback and caller %d", id, rec, proxytest.PluginContextID)
	}
	rec.callback(1, 2, 3)
	if got != [3]int{1, 2, 3} {
		t.Errorf("the SDK's callback called through calloutLayout got %v, want [1 2 3]", got)
	}

	for _, c := range probes {
		h.CallOnHttpCallResponse(c.CalloutID, [][2]string{{":status", "503"}}, nil, nil)
		if _, left := table[c.CalloutID]; left {
			t.Errorf("callout %d is still in the SDK's table after its answer", c.CalloutID)
		}
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if n, _ := h.GetCounterMetric("hashlb.service." + name + ".health_down"); n != 1 {
			t.Errorf("hashlb.service.%s.health_down = %d after a failed probe with unhealthyThreshold 1, want 1", name, n)
		}
	}
}
