// Package corpus is the request corpus that every host of hashlb's tests
// runs: the emulators in e2e (hostsim under both import profiles, the SDK's
// wasm runner) and real Envoy in e2e/envoy. It holds the services and one
// configuration per lbMethod (plus persistence and a pool with nothing
// enabled), a deterministic request generator that covers every method's
// input, its absence and malformed forms, and client copies of the headers
// hashlb sets, and lbcore as the oracle: Oracle is the decision a request
// must get, Check compares what a host did with it.
//
// Test-only: the module never imports it.
//
// The configurations, the request generator, the oracle and the check are
// corpus.go; store.go is the persistence table of an oracle that keeps one
// (MemStore).
package corpus
