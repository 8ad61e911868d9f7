// Command filter is hashlb's proxy-wasm module: built with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, it runs inside Envoy,
// Istio or any host of the proxy-wasm ABI 0.2.1.
//
// It owns the proxy-wasm contexts and wires the host to lbcore, which makes
// every decision: the VM and its plugin contexts, started, reconfigured with
// what the workers know carried over, and ticking (main.go, plugin.go); a
// request (http.go) or, as a network filter, a connection (tcp.go), read into
// lbcore's request view, and the decision applied: the upstream header or
// filter state (steer.go), the service header, local replies; the kind Envoy
// really runs the plugin as (kind.go); the shared-data Store (store.go); the
// active probes and passive ejection (health.go, callout.go); the fleet level
// of persistence (fleet.go); session persistence, its key from the VM's
// environment, and the client's session cookie or header removed before the
// request goes upstream (session.go); metrics (metrics.go); the memory the host copies into
// (hostmem_wasip1.go) and the clock (clock_wasip1.go), which outside Wasm,
// in the SDK's native test host, are ordinary Go memory and time.Now
// (hostmem_other.go, clock_other.go). A test-only build with the tag
// hashlb_memstats logs the guest's memory statistics at every tick
// (memstats.go).
//
// ./build.sh wasm ships go build's output without the exports of the SDK's
// callbacks the module handles nowhere (bodies, trailers, shared queues,
// Redis calls: internal/wasmpost.Unhandled), so that Envoy never calls into
// the module for them; implementing one of them here means taking it off
// that list (e2e's TestUnhandledCallbacksStayUnhandled says so).
//
// The module must never start Go's netpoller: no timers, sleeps, goroutines,
// files or printing (docs/envoy-host.md#the-go-runtime and RATIONALE.md):
// Envoy answers poll_oneoff with ENOSYS and the Go runtime then dies.
package main
