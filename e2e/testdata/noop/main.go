// Command noop is a proxy-wasm module that does nothing: the SDK's default
// VM, plugin and HTTP contexts, built like hashlb. The benchmarks in e2e use
// it as the baseline cost of one stream through hostsim.
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
