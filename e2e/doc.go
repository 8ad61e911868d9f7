// Package e2e holds hashlb's black-box tests: they build the module from
// source and run it under hostsim (one and four workers, both Envoy import
// profiles), under the SDK's own wasm runner, behind hashlb-proxy over real
// HTTP, and check the Envoy and Istio deployment files against
// go-control-plane's and istio.io/api's types. lbcore serves as an oracle.
package e2e
