// Command noop is a proxy-wasm module that does nothing: the SDK's default
// plugin and HTTP contexts under sdkguest's VM context, built like hashlb. The benchmarks in e2e use
// it as the baseline cost of one stream through hostsim.
package main

import (
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/hashlb/hashlb/e2e/testdata/sdkguest"
)

func main() {}

func init() { sdkguest.Start(func() types.PluginContext { return &pluginContext{} }) }

type pluginContext struct{ types.DefaultPluginContext }

// NewHttpContext implements types.PluginContext.
func (*pluginContext) NewHttpContext(uint32) types.HttpContext { return &httpContext{} }

type httpContext struct{ types.DefaultHttpContext }
