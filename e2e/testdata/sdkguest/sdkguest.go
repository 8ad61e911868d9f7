// Package sdkguest is what e2e's proxy-wasm test modules on the SDK (noop,
// baseline, trap) share: the ABI marker hashlb exports, and a VM context
// that hands each plugin the module's own plugin context.
package sdkguest

import (
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// Start makes newPlugin the maker of the module's plugin contexts; a
// module's init calls it.
func Start(newPlugin func() types.PluginContext) {
	proxywasm.SetVMContext(&vmContext{newPlugin: newPlugin})
}

type vmContext struct {
	types.DefaultVMContext
	newPlugin func() types.PluginContext
}

// NewPluginContext implements types.VMContext.
func (v *vmContext) NewPluginContext(uint32) types.PluginContext { return v.newPlugin() }

// abi marks the module as proxy-wasm ABI 0.2.1, as hashlb does.
//
//go:wasmexport proxy_abi_version_0_2_1
func abi() {}
