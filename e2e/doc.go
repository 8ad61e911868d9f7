// Package e2e holds hashlb's black-box tests: they build the module from
// source and run it under hostsim (one and more workers, both Envoy import
// profiles, reconfigured as Envoy does), under the SDK's own wasm runner, in
// V8 with Envoy's imports through e2e/v8 (Node), and behind hashlb-proxy over
// real HTTP and TCP; the fleet tests add real etcd (Debian's 3.4 binary, or
// the embedded 3.7 as a child process) with faults. They check the Envoy and
// Istio deployment files against go-control-plane's and istio.io/api's types,
// the docs against the tree (every file, command and link they name), the
// schema against lbcore's field table, and measure cost (the bench_* files).
// lbcore serves as the oracle for where a request must go. Real Envoy is
// package e2e/envoy.
package e2e
