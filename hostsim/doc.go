// Package hostsim is a proxy-wasm host built on wazero that runs a compiled
// proxy-wasm module the way Envoy does, for tests and demos.
//
// It owns: loading (ABI marker and import checks with Envoy's wording, one VM
// per worker, _initialize → root proxy_on_context_create → proxy_on_vm_start →
// proxy_on_configure), the two import profiles "envoy-1.33" (default) and
// "envoy-1.39" with Envoy's exact WASI return codes and V8's restricted
// callback allow-lists, the env proxy_* host functions (logs, header maps,
// buffers, properties, local replies, shared data with CAS, ticks, HTTP
// callouts, metrics, time), a virtual clock that never moves under a running
// guest call, and a Stream API that drives one HTTP stream through a worker.
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
// run concurrently. Shared data, metrics and logs are shared by all VMs of one
// Host and are safe for concurrent use.
package hostsim
