package main

import (
	_ "unsafe" // go:linkname

	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// A plugin's configuration says which filter it is (filterType), but Envoy
// may load it as the other kind: the network filter calls
// proxy_on_new_connection, the HTTP filter proxy_on_request_headers, and
// proxy_on_context_create is the same for both. The SDK makes a context
// either HTTP or TCP when it is created and panics (a trap, a dead worker)
// when a callback of the other kind comes. So until a worker has seen the
// first callback of a plugin, its contexts are registered as both kinds;
// the first callback tells the kind, the other registration is dropped,
// and later contexts are made of that kind alone. A plugin of the wrong
// kind then answers every request with a 503, or closes every connection,
// and says why in one log line per worker.

// hostKind is which filter Envoy runs a plugin as.
type hostKind uint8

const (
	kindUnknown hostKind = iota // no callback seen yet
	kindHTTP                    // envoy.filters.http.wasm
	kindNetwork                 // envoy.filters.network.wasm
)

// sdkState is the SDK's context registry (proxywasm/internal's
// currentState), reached so that a context can be registered as a TCP
// context too; TestSDKStateLayout holds sdkStateLayout to the SDK's.
//
//go:linkname sdkState github.com/higress-group/proxy-wasm-go-sdk/proxywasm/internal.currentState
var sdkState *sdkStateLayout

// sdkStateLayout mirrors the SDK's internal state type, field for field.
type sdkStateLayout struct {
	vmContext         types.VMContext
	pluginContexts    map[uint32]*pluginStateLayout
	httpContexts      map[uint32]types.HttpContext
	tcpContexts       map[uint32]types.TcpContext
	contextIDToRootID map[uint32]uint32
	activeContextID   uint32
}

// firstContext is NewHttpContext before the plugin's kind is known (or
// once it is known to be a network filter, when it returns nil and the SDK
// asks NewTcpContext).
func (p *pluginContext) firstContext(id uint32) types.HttpContext {
	if p.host == kindNetwork {
		return nil
	}
	if _, dup := sdkState.tcpContexts[id]; !dup {
		sdkState.tcpContexts[id] = &probeTCP{TcpContext: p.newTCP(), p: p, id: id}
	}
	return &probeHTTP{HttpContext: p.newHTTP(id), p: p, id: id}
}

// learn records the kind the first callback showed and drops the context's
// registration as the other kind.
func (p *pluginContext) learn(k hostKind, id uint32) {
	p.host = k
	if k == kindHTTP {
		delete(sdkState.tcpContexts, id)
	} else {
		delete(sdkState.httpContexts, id)
	}
}

// probeHTTP and probeTCP are the two registrations of a context made
// before the kind was known.
type probeHTTP struct {
	types.HttpContext
	p  *pluginContext
	id uint32
}

func (h *probeHTTP) OnHttpRequestHeaders(n int, end bool) types.Action {
	h.p.learn(kindHTTP, h.id)
	return h.HttpContext.OnHttpRequestHeaders(n, end)
}

type probeTCP struct {
	types.TcpContext
	p  *pluginContext
	id uint32
}

func (c *probeTCP) OnNewConnection() types.Action {
	c.p.learn(kindNetwork, c.id)
	return c.TcpContext.OnNewConnection()
}

// wrongKindHTTP is a request to a plugin whose filterType is network.
type wrongKindHTTP struct {
	types.DefaultHttpContext
	p *pluginContext
}

// The local reply to a request for a network plugin, made once.
var (
	wrongKindBody    = []byte("hashlb: this filter is configured as a network filter")
	wrongKindHeaders = [][2]string{{"content-type", "text/plain"}}
)

func (h *wrongKindHTTP) OnHttpRequestHeaders(int, bool) types.Action {
	defer func() { _ = recover() }()
	h.p.kindOnce("filterType network, but Envoy runs this plugin as an HTTP filter (envoy.filters.http.wasm): every request is answered 503; load it as envoy.filters.network.wasm before tcp_proxy, or remove filterType")
	_ = proxywasm.SendHttpResponse(503, wrongKindHeaders, wrongKindBody, -1)
	return types.ActionPause
}

// wrongKindTCP is a connection to a plugin that is not a network filter:
// filterType http, or a plugin that never started.
type wrongKindTCP struct {
	types.DefaultTcpContext
	p *pluginContext
}

func (c *wrongKindTCP) OnNewConnection() types.Action {
	defer func() { _ = recover() }()
	if c.p.cfg != nil {
		c.p.kindOnce("filterType http, but Envoy runs this plugin as a network filter (envoy.filters.network.wasm): every connection is closed; load it as envoy.filters.http.wasm, or set filterType network")
	}
	_ = proxywasm.CloseDownstream()
	return types.ActionPause
}

// kindOnce logs msg at error level, once per worker and plugin.
func (p *pluginContext) kindOnce(msg string) {
	if !p.kindLogged {
		p.kindLogged = true
		proxywasm.LogErrorf("hashlb: %s", msg)
	}
}
