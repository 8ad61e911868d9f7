package e2e

// The breakdown of one request's cost at the Wasm boundary, as Envoy drives
// it: every call into the module (the callbacks of the stream's context and
// the allocator's re-entries, one per value the host hands back) and every
// host call by name, for the peers benchmark's configurations
// (e2e/envoy/bench_peers_test.go: URLHASH with three upstream addresses, with
// persistence on x-client-id, and over 10⁴ services). docs/performance.md's
// "Calls across the Wasm boundary per request" is this test's table.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
)

// boundaryConfig is the peers benchmark's plugin configuration over n
// services, with its persistence when persist is set.
func boundaryConfig(n int, persist bool) []byte {
	var b strings.Builder
	b.WriteString(`{"lbMethod": "URLHASH", "upstreamHeader": "x-envoy-original-dst-host", "upstreamCount": 3,`)
	if persist {
		b.WriteString(` "persistence": {"keys": ["${request.header.x-client-id}"]},`)
	}
	b.WriteString(` "services": [`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name": "s%d", "address": "127.1.%d.%d:8080"}`, i, i/250, i%250+1)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// boundaryRequest is a GET as the peers benchmark's load generator sends it.
var boundaryRequest = [][2]string{
	{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"},
	{":path", "/api/v1/items/1234?view=full"}, {"user-agent", "hashlb-loadgen"}, {"x-client-id", "client-7"},
}

// boundary is what one request costs at the Wasm boundary.
type boundary struct {
	callbacks []string       // the callbacks Envoy enters the module by, in order
	allocs    int            // the allocator's re-entries
	calls     map[string]int // host calls by name (WASI ones as module.name)
}

// total is every call into the module.
func (b boundary) total() int { return len(b.callbacks) + b.allocs }

// hostCalls is every host call.
func (b boundary) hostCalls() (n int) {
	for _, c := range b.calls {
		n += c
	}
	return n
}

// measureBoundary runs three whole streams of boundaryRequest (headers, a
// 3-byte response body as the benchmark's backend sends, the end) on one
// tracing worker and returns the third's cost: the first does one-time work,
// and with persistence the second is the entry's first hit, which also
// writes the bucket; the third is a hit as most are.
func measureBoundary(t *testing.T, wasm, config []byte) boundary {
	t.Helper()
	ctx := context.Background()
	h, err := hostsim.New(ctx, wasm, hostsim.Config{PluginConfig: config, Workers: 1, LogLevel: hostsim.LogWarn, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close(ctx)
	var s *hostsim.Stream
	for range 3 {
		s = h.Stream(0)
		if res := s.RequestHeaders(boundaryRequest, benchProps); res.Err != nil || res.LocalReply != nil {
			t.Fatalf("RequestHeaders = err %v, local reply %+v, want routed", res.Err, res.LocalReply)
		}
		if res := s.ResponseHeaders([][2]string{{":status", "200"}, {"content-length", "3"}}); res.Err != nil {
			t.Fatal(res.Err)
		}
		if _, err := s.ResponseBody(3, true); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	b := boundary{calls: map[string]int{}}
	for _, e := range s.Entries() {
		if e.Func == e.Phase {
			b.callbacks = append(b.callbacks, e.Func)
		} else {
			b.allocs++
		}
	}
	for _, c := range s.Calls() {
		b.calls[c.Func]++
	}
	return b
}

// TestCallsAcrossTheBoundary prints, per configuration, the calls into the
// module and the host calls one request costs, and holds each to what the
// module reaches: a change that adds a callback, a copy or a host call to
// every request fails here before it shows as Envoy CPU in the peers
// benchmark.
func TestCallsAcrossTheBoundary(t *testing.T) {
	wasm := module(t)
	tests := []struct {
		name      string
		config    []byte
		callbacks []string // exactly these, in order
		allocs    int      // at most
		calls     int      // at most
	}{
		// :path's copy; reading it, the upstream and the service header.
		{"URLHASH, 3 services", boundaryConfig(3, false), wantCallbacks, 1, 3},
		// and x-client-id and the entry's bucket (get_shared_data), each a copy.
		{"URLHASH + persistence (hit)", boundaryConfig(3, true), wantCallbacks, 3, 5},
		{"URLHASH, 10⁴ services", boundaryConfig(10000, false), wantCallbacks, 1, 3},
	}
	var table strings.Builder
	table.WriteString("| configuration | callbacks | allocator re-entries | host calls |\n|---|---|---|---|\n")
	for _, tt := range tests {
		b := measureBoundary(t, wasm, tt.config)
		var calls []string
		for name, n := range b.calls {
			calls = append(calls, fmt.Sprintf("%s ×%d", strings.TrimPrefix(name, "proxy_"), n))
		}
		slices.Sort(calls)
		fmt.Fprintf(&table, "| %s | %d: %s | %d | %d: %s |\n", tt.name, len(b.callbacks),
			strings.Join(trimProxy(b.callbacks), ", "), b.allocs, b.hostCalls(), strings.Join(calls, ", "))
		if !slices.Equal(b.callbacks, tt.callbacks) {
			t.Errorf("%s: a request enters the module by %v, want %v", tt.name, b.callbacks, tt.callbacks)
		}
		if b.allocs > tt.allocs {
			t.Errorf("%s: a request re-enters the allocator %d times, want at most %d (one per value the host hands back)", tt.name, b.allocs, tt.allocs)
		}
		if n := b.hostCalls(); n > tt.calls {
			t.Errorf("%s: a request makes %d host calls (%v), want at most %d", tt.name, n, b.calls, tt.calls)
		}
	}
	t.Logf("calls across the Wasm boundary per request:\n%s", table.String())
	// The peers benchmark's floor, the SDK's contexts as they come, is
	// entered for the body as well: hashlb's module is one call below it.
	noop := measureBoundary(t, noopModule(t), []byte("{}"))
	wantNoop := slices.Insert(slices.Clone(wantCallbacks), 3, "proxy_on_response_body")
	if !slices.Equal(noop.callbacks, wantNoop) {
		t.Errorf("the no-op module is entered by %v, want %v", noop.callbacks, wantNoop)
	}
	t.Logf("the no-op module: %d callbacks: %s", len(noop.callbacks), strings.Join(trimProxy(noop.callbacks), ", "))
}

// trimProxy drops the ABI's proxy_ prefix of each name, for the table.
func trimProxy(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimPrefix(n, "proxy_")
	}
	return out
}

// wantCallbacks are the callbacks of one stream: context create, the headers
// each way, then Envoy's end of stream (done, log, delete). Not the response
// body: the module does not export proxy_on_response_body (wasmpost.Unhandled).
var wantCallbacks = []string{"proxy_on_context_create", "proxy_on_request_headers", "proxy_on_response_headers",
	"proxy_on_done", "proxy_on_log", "proxy_on_delete"}
