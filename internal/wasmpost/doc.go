// Package wasmpost is the step after Go's linker that makes dist/hashlb.wasm
// out of the module go build writes: the exports of the SDK's callbacks that
// hashlb handles nowhere are dropped (exports.go: Unhandled, DropExports), so
// that Envoy never calls into the module for them. ./build.sh wasm runs it
// through tools/wasmpost, and the tests that build the module (e2e,
// internal/envoyrun) run the same Finish (finish.go), so every host test
// runs the module as shipped. Sizes (size.go) divides a module's code
// among the Go packages its functions come from, for tools/wasmpost -size.
package wasmpost
