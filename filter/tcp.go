package main

import (
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// tcpContext is one TCP connection, with filterType network: Envoy runs the
// module as a network filter before tcp_proxy (envoy.filters.network.wasm),
// and the connection goes where the ORIGINAL_DST filter state says.
//
// Envoy's order (source/extensions/common/wasm/context.cc): the context is
// created and proxy_on_new_connection runs when the connection is accepted,
// before tcp_proxy connects upstream; proxy_on_downstream_data and
// proxy_on_upstream_data carry the bytes; a downstream close (local or
// remote, a reset too) calls proxy_on_downstream_connection_close, then
// proxy_on_done, proxy_on_log and proxy_on_delete, once.
type tcpContext struct {
	types.DefaultTcpContext
	p      *pluginContext
	chosen int  // index of the chosen service, -1 for none
	ended  bool // OnStreamDone ran: c is in the plugin's free list
}

// NewTcpContext implements types.PluginContext: the SDK asks for it once
// NewHttpContext returned nil, for a plugin Envoy runs as a network filter
// (kind.go).
func (p *pluginContext) NewTcpContext(uint32) types.TcpContext { return p.newTCP() }

// newTCP makes a connection's context, reusing an ended one.
func (p *pluginContext) newTCP() types.TcpContext {
	if p.cfg == nil || !p.cfg.Network() {
		p.wrongTCP.p = p
		return &p.wrongTCP // stateless: one for every connection
	}
	if c := reuse(&p.freeConns); c != nil {
		*c = tcpContext{p: p, chosen: -1}
		return c
	}
	return &tcpContext{p: p, chosen: -1}
}

// OnNewConnection decides where the connection goes and tells Envoy through
// the filter state. With nothing selectable, or if Envoy refuses the filter
// state, the connection is closed and held (Pause): continuing would let
// tcp_proxy connect it to the ORIGINAL_DST cluster's own fallback (the
// connection's restored destination), somewhere hashlb did not choose.
func (c *tcpContext) OnNewConnection() (action types.Action) {
	p := c.p
	defer func() {
		if r := recover(); r != nil {
			action = c.recoverConnection(r)
		}
	}()
	arenaStart()
	defer arenaStop()
	req := p.readRequest() // source.address and destination.address only (lbcore refuses the rest)
	defer p.doneRequest()
	var now time.Time
	if p.cfg.Persistence != nil || p.cfg.SlowStart != nil {
		now = p.now // the last tick's, as for a request (http.go)
	}
	d := p.bal.Decide(req, now)
	if d.Ask { // no fleet level for connections (lbcore refuses it): never wait
		d = p.bal.DecideLocal(req, now)
	}
	p.m.decision(d.Reason)
	if p.cfg.Persistence != nil {
		p.m.persisted(&d)
	}
	if d.Len() == 0 {
		return c.refuse()
	}
	return c.route(d.At(0))
}

// route sets the filter state to service i's address and counts the
// connection active on it.
func (c *tcpContext) route(i int) types.Action {
	p := c.p
	if err := setUpstream(p.cfg.Services[i].Address, spanDownstreamConnection); err != nil {
		p.steerFailed("filter state ", lbcore.OriginalDstFilterState, err, " (Envoy 1.28 or later is needed)")
		return c.refuse()
	}
	c.chosen = i
	p.active(i, 1)
	return types.ActionContinue
}

// refuse closes the downstream connection (Envoy closes it after the
// callback, flushing nothing: no byte was proxied) and stops the filter
// chain, so tcp_proxy never connects it anywhere.
func (c *tcpContext) refuse() types.Action {
	_ = proxywasm.CloseDownstream()
	return types.ActionPause
}

// recoverConnection handles a panic in the decision: count and log it, then
// balance the connection round robin over selectable services, as a request
// would be; if even that fails the connection is closed.
func (c *tcpContext) recoverConnection(r any) (action types.Action) {
	p := c.p
	defer func() {
		if r2 := recover(); r2 != nil {
			p.m.recovered("connection fallback", r2)
			action = types.ActionPause
			func() {
				defer func() { _ = recover() }()
				_ = proxywasm.CloseDownstream()
			}()
		}
	}()
	p.m.recovered("new connection (connection balanced round robin)", r)
	if c.chosen >= 0 { // the panic came after routing; the filter state is set
		return types.ActionContinue
	}
	i := p.fallbackService()
	if i < 0 {
		return c.refuse()
	}
	return c.route(i)
}

// OnStreamDone (proxy_on_log, once per connection after its close, a reset
// included) ends the connection's active count.
func (c *tcpContext) OnStreamDone() {
	defer func() {
		if r := recover(); r != nil {
			c.p.m.recovered("connection done", r)
		}
	}()
	p := c.p
	if i := c.chosen; i >= 0 {
		c.chosen = -1
		p.active(i, -1)
	}
	if !c.ended {
		c.ended = true
		p.freeConns = append(p.freeConns, c)
	}
}
