// Command trap is a proxy-wasm test module whose VM fails on demand: an HTTP
// filter that passes every request, except one carrying the header x-trap,
// on which it panics without recovering, so the Go runtime aborts and the
// Wasm VM fails at request time. e2e/envoy's failure_policy test loads it in
// real Envoy to see what each policy does to the requests that follow.
// Built like hashlb (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared).
package main

import (
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() { proxywasm.SetVMContext(&vmContext{}) }

// abi marks the module as proxy-wasm ABI 0.2.1, as hashlb does.
//
//go:wasmexport proxy_abi_version_0_2_1
func abi() {}

type vmContext struct{ types.DefaultVMContext }

// NewPluginContext implements types.VMContext.
func (*vmContext) NewPluginContext(uint32) types.PluginContext { return &pluginContext{} }

type pluginContext struct{ types.DefaultPluginContext }

// NewHttpContext implements types.PluginContext.
func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }

// OnHttpRequestHeaders panics on x-trap. Otherwise it drops a client's
// x-envoy-original-dst-host, as hashlb does (so override_host falls back to
// its round robin), and marks the request as having passed the module
// (x-trap-module: passed), so a test can tell a request the filter ran on
// from one a failed VM let through.
func (*httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	if v, err := proxywasm.GetHttpRequestHeader("x-trap"); err == nil && v != "" {
		panic("trap requested: " + v)
	}
	_ = proxywasm.RemoveHttpRequestHeader("x-envoy-original-dst-host")
	_ = proxywasm.ReplaceHttpRequestHeader("x-trap-module", "passed")
	return types.ActionContinue
}
