// Package hostsim is a proxy-wasm host built on wazero that runs a compiled
// proxy-wasm module the way Envoy does, for tests and demos.
//
// It owns, by file: loading (host.go: ABI marker and import checks with
// Envoy's wording, one VM per worker, _initialize → root
// proxy_on_context_create → proxy_on_vm_start → proxy_on_configure) and a VM
// with its contexts and traps (vm.go); the two import profiles "envoy-1.33"
// (default) and "envoy-1.39" with V8's restricted callback allow-lists
// (profile.go) and Envoy's exact WASI return codes (wasi.go); the env proxy_*
// host functions: logs (logs.go), header maps (headers.go), buffers
// (buffers.go), properties (properties.go), local replies and stream control
// (control.go), shared data with CAS (shareddata.go), ticks and time
// (timers.go), HTTP callouts (httpcall.go) and metrics (metrics.go); a
// virtual clock that never moves under a running guest call (clock.go); a
// Stream API that drives one HTTP stream through a worker (stream.go) and
// records the host calls of its callbacks and the calls into the module made
// for it, callbacks and allocator re-entries (trace.go); and a Conn API that
// drives one TCP connection through a network-filter context (conn.go), with
// the foreign function set_envoy_filter_state (foreign.go).
//
// Callouts: a proxy_http_call to a cluster of Config.Clusters (Envoy cluster
// name → host:port) is sent as real HTTP/1.1 on its own goroutine and
// answered later, as Envoy's async client does: when the response, a failure
// or the module's timeout comes, the goroutine takes the VM's lock and calls
// proxy_on_http_call_response on the root context that made the call
// (failures as Envoy's: no headers, no body). Host.Close cancels what is in
// flight and waits for it; Host.PendingCallouts counts it. Calls to other
// clusters go to Config.HTTPCall (or loopback HTTP) and are answered as soon
// as the running guest call returns.
//
// Paused streams: when proxy_on_request_headers returns Pause, Stream.Wait
// blocks until the module lets the request go — proxy_continue_stream on the
// stream (typically from a callout's response, after
// proxy_set_effective_context), a local reply (run through the filter's own
// proxy_on_response_headers), proxy_close_stream, or the VM's death — and
// returns what RequestHeaders would have. Stream.Finish on a paused stream is
// Envoy's reset: the context is done, logged and deleted, and the module's
// later proxy_set_effective_context to it is BadArgument, so it never resumes.
//
// The facts it emulates come from proxy-wasm-cpp-host (src/exports.cc,
// src/wasm.cc, include/proxy-wasm/wasm.h, src/v8/v8.cc, src/shared_data.cc,
// src/bytecode_util.cc) and Envoy (source/extensions/common/wasm/context.cc);
// docs/envoy-host.md lists them with their sources and commits, and each file
// cites the parts it relies on. hostsim imports wazero and the standard library
// only (TestDependencies): it never imports the module's own packages, so it
// cannot share their bugs.
//
// Concurrency: every VM is single-threaded (one mutex per VM); different VMs
// run concurrently, and so do callout goroutines, which wait for their VM. Shared data, metrics and logs are shared by all VMs of one
// Host and are safe for concurrent use.
package hostsim
