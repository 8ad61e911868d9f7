//go:build !wasip1

package main

import (
	"fmt"
	"testing"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// steered is one set_envoy_filter_state call as the host received it.
type steered struct {
	path, value string
	span        uint64
}

// decodeSteer reads SetEnvoyFilterStateArguments: path = 1, value = 2,
// span = 3, each field at most once, lengths and span below 128 (enough here).
func decodeSteer(t *testing.T, b []byte) steered {
	t.Helper()
	var s steered
	for i := 0; i < len(b); {
		tag := b[i]
		i++
		switch tag {
		case 0x0a, 0x12: // fields 1 and 2, length-delimited
			n := int(b[i])
			v := string(b[i+1 : i+1+n])
			i += 1 + n
			if tag == 0x0a {
				s.path = v
			} else {
				s.value = v
			}
		case 0x18: // field 3, varint
			s.span = uint64(b[i])
			i++
		default:
			t.Fatalf("unexpected tag %#x in %q", tag, b)
		}
	}
	return s
}

// startNetworkHost starts config with set_envoy_filter_state recorded in calls.
func startNetworkHost(t *testing.T, newHost newHostFunc, config string, calls *[]steered) *host {
	h := newHost(t, config)
	if h.started != types.OnPluginStartStatusOK {
		t.Fatalf("plugin refused %s: %v", config, h.GetErrorLogs())
	}
	h.RegisterForeignFunction("set_envoy_filter_state", func(b []byte) []byte {
		*calls = append(*calls, decodeSteer(t, b))
		return []byte{0} // the emulator hands back a result; Envoy gives none
	})
	return h
}

// connect runs one whole connection: new connection (with its addresses),
// downstream data, close, done.
func (h *host) connect(src, dst string) types.Action {
	h.t.Helper()
	if err := h.SetProperty([]string{"source", "address"}, []byte(src)); err != nil {
		h.t.Fatal(err)
	}
	if err := h.SetProperty([]string{"destination", "address"}, []byte(dst)); err != nil {
		h.t.Fatal(err)
	}
	id, action := h.InitializeConnection()
	if action == types.ActionContinue {
		h.CallOnDownstreamData(id, []byte("hello"))
	}
	h.CloseDownstreamConnection(id)
	h.CompleteConnection(id)
	return action
}

// nativeRunner runs f under the SDK's native emulator only. The network
// filter tests cannot run against the .wasm here: the SDK's wazero runner
// (proxytest.NewWasmVMContext) creates HTTP contexts only (its
// NewTcpContext returns nil). The compiled module's connections are tested
// under hostsim (e2e/tcp_test.go) and in V8 (e2e/v8_tcp_test.go).
func nativeRunner(t *testing.T, f func(t *testing.T, newHost newHostFunc)) {
	t.Run("native", func(t *testing.T) {
		f(t, func(t *testing.T, config string) *host { return startHost(t, &vmContext{}, config) })
	})
}

// TestNetworkFilter: with filterType network each connection sets the
// ORIGINAL_DST filter state to the address lbcore ranks first, with the
// connection's life span, and counts as active until it is done.
func TestNetworkFilter(t *testing.T) {
	config := `{"filterType":"network","lbMethod":"SRCIPDESTIPHASH",` + services + `}`
	nativeRunner(t, func(t *testing.T, newHost newHostFunc) {
		var calls []steered
		h := startNetworkHost(t, newHost, config, &calls)
		for i := 0; i < 20; i++ {
			src, dst := fmt.Sprintf("192.0.2.%d:%d", i+1, 4000+i), "198.51.100.1:443"
			if a := h.connect(src, dst); a != types.ActionContinue {
				t.Fatalf("connection %d: action %v, want Continue", i, a)
			}
			want := oracle(t, config, lbcore.Request{Source: src, Dest: dst})
			got := calls[len(calls)-1]
			if len(calls) != i+1 || got.path != lbcore.OriginalDstFilterState || got.value != want[0] || got.span != spanDownstreamConnection {
				t.Fatalf("connection %d: set_envoy_filter_state calls %v, want one {%s %s 2}", i, calls, lbcore.OriginalDstFilterState, want[0])
			}
		}
		var routed uint64
		for _, name := range []string{"a", "b", "c", "d"} {
			if n := h.gauge("hashlb.service." + name + ".active"); n != 0 {
				t.Errorf("hashlb.service.%s.active = %d after every connection ended, want 0", name, n)
			}
			routed += h.counter("hashlb.service." + name + ".requests")
		}
		if routed != 20 {
			t.Errorf("%d connections counted, want 20", routed)
		}
	})
}

// TestNetworkFilterNothingSelectable: with every service disabled the
// connection is held (and closed), never steered.
func TestNetworkFilterNothingSelectable(t *testing.T) {
	config := `{"filterType":"network","lbMethod":"SOURCEIPHASH","services":[{"name":"a","address":"10.0.0.1:80","enabled":false}]}`
	nativeRunner(t, func(t *testing.T, newHost newHostFunc) {
		var calls []steered
		h := startNetworkHost(t, newHost, config, &calls)
		if a := h.connect("192.0.2.1:4000", "198.51.100.1:443"); a != types.ActionPause || len(calls) != 0 {
			t.Fatalf("action %v with filter state calls %v, want Pause and none", a, calls)
		}
		if n := h.counter("hashlb.decision.no_service"); n != 1 {
			t.Errorf("hashlb.decision.no_service = %d, want 1", n)
		}
	})
}

// TestUpstreamViaFilterState: an HTTP request with upstreamVia filterState
// carries no upstream header; the filter state names the address, for the
// request only (span left out: FilterChain).
func TestUpstreamViaFilterState(t *testing.T) {
	config := `{"lbMethod":"URLHASH","upstreamVia":"filterState",` + services + `}`
	eachRunner(t, func(t *testing.T, newHost newHostFunc) {
		var calls []steered
		h := startNetworkHost(t, newHost, config, &calls)
		r := h.request("192.0.2.1:1", "198.51.100.1:80", [2]string{":method", "GET"}, [2]string{":path", "/x"},
			[2]string{":authority", "h"}, [2]string{"x-envoy-original-dst-host", "6.6.6.6:1"})
		want := oracle(t, config, lbcore.Request{Target: "/x"})
		if got := get(r.headers, "x-envoy-original-dst-host"); len(got) != 0 {
			t.Errorf("upstream header %v on the request, want none", got)
		}
		if len(calls) != 1 || calls[0].value != want[0] || calls[0].span != spanFilterChain {
			t.Errorf("set_envoy_filter_state calls %v, want one naming %s with span 0", calls, want[0])
		}
	})
}
