// Command trap is a proxy-wasm test module whose VM fails on demand: an HTTP
// filter that passes every request, except one carrying the header x-trap,
// on which it panics without recovering, so the Go runtime aborts and the
// Wasm VM fails at request time; as a network filter it passes every
// connection and panics on downstream data holding "TRAP". e2e/envoy's failure_policy test loads it in
// real Envoy to see what each policy does to the requests that follow.
// Built like hashlb (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared).
package main

import (
	"bytes"

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/hashlb/hashlb/e2e/testdata/sdkguest"
)

func main() {}

func init() { sdkguest.Start(func() types.PluginContext { return &pluginContext{} }) }

// pluginContext is an HTTP filter's, or a network filter's when its
// configuration says "filterType": "network" (as configs/envoy-tcp.yaml's
// does): the SDK makes an HTTP context whenever NewHttpContext gives one.
type pluginContext struct {
	types.DefaultPluginContext
	network bool
}

// OnPluginStart implements types.PluginContext.
func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	c, _ := proxywasm.GetPluginConfiguration()
	p.network = bytes.Contains(c, []byte(`"network"`))
	return types.OnPluginStartStatusOK
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	if p.network {
		return nil
	}
	return &httpContext{}
}

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

// NewTcpContext implements types.PluginContext: the module as a network
// filter.
func (p *pluginContext) NewTcpContext(uint32) types.TcpContext {
	if !p.network {
		return nil
	}
	return &tcpContext{}
}

type tcpContext struct{ types.DefaultTcpContext }

// OnDownstreamData panics when the client's data holds "TRAP".
func (*tcpContext) OnDownstreamData(size int, _ bool) types.Action {
	if size > 0 {
		if b, err := proxywasm.GetDownstreamData(0, size); err == nil && bytes.Contains(b, []byte("TRAP")) {
			panic("trap requested on a connection")
		}
	}
	return types.ActionContinue
}
