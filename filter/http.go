package main

import (
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// noServiceBody is the local reply's body when nothing is selectable.
const noServiceBody = "no healthy service"

// httpContext is one request. What the response phase needs is kept here:
// Envoy refuses reads of request headers once they have been passed on.
type httpContext struct {
	types.DefaultHttpContext
	p      *pluginContext
	id     uint32 // the stream's context id
	chosen int    // index of the chosen service, -1 for none
	wait   uint32 // the fleet transaction the request waits for, 0 when none
	// nextWaiter is the next request waiting on the same transaction (fleet.waiters).
	nextWaiter *httpContext
	method     lbcore.Method
	reason     lbcore.Reason
	local      bool // we sent a local reply
	ended      bool // OnHttpStreamDone ran: h is in the plugin's free list
	dec        lbcore.Decision
	// upstream and debug are the buffers of upstreamValue and decisionText,
	// kept when the context is reused: a value the host was given stays
	// unchanged until the stream ends (pluginContext.value).
	upstream, debug []byte
	// cookie and session are the buffers of the request's Cookie line
	// without the session's cookie and of the session the response sets
	// (session.go), kept likewise.
	cookie, session []byte
}

// OnHttpRequestHeaders strips client copies of our headers, decides, and sets
// the headers or sends a local 503. It never lets a panic reach the host: a
// panic inside a Go module kills the VM and every later request of the worker.
func (h *httpContext) OnHttpRequestHeaders(int, bool) (action types.Action) {
	p := h.p
	defer func() {
		if r := recover(); r != nil {
			action = h.recoverRequest(r)
		}
	}()
	// What the host returns during this callback is copied into the
	// module's arena (hostmem_wasip1.go) and must not outlive it.
	arenaStart()
	defer arenaStop()
	if p.cfg == nil {
		// The plugin never started (a host that ignores a failed start):
		// fail closed, never forward a request without hashlb's header.
		h.reason = lbcore.ReasonNoService
		return h.reply503()
	}
	// A client must never choose the upstream. Its copies of our headers
	// are not read: the replace that sets each one removes every copy first
	// (route; docs/envoy-host.md#header-maps), and a local reply forwards
	// nothing.
	dropForged(p.cfg)
	req := p.readRequest()
	defer p.doneRequest()
	if p.cfg.Session != nil {
		if status := h.stripSession(req); status != 0 {
			return h.replyStrip(status)
		}
	}

	// Persistence, sessions and slow start need the time in seconds
	// (entries live 10 minutes or more, sessions a minute, a ramp a second
	// or more): the last tick's, so a request reads no clock (plugin.go, now).
	var now time.Time
	if p.cfg.Persistence != nil || p.cfg.Session != nil || p.cfg.SlowStart != nil {
		now = p.now
	}
	// Into the context's own Decision: returning one by value costs two
	// bulk-memory calls into the engine (docs/performance.md).
	d := &h.dec
	p.bal.DecideInto(d, req, now)
	if p.cfg.Session != nil {
		// Counted here, once per request: a request resumed after the
		// fleet is decided again without its (removed) session value.
		p.m.sessionSeen(d)
	}
	if d.Ask { // a local miss, and the table has a fleet level
		h.method, h.reason = d.Method, d.Reason
		p.m.persisted(d)
		// The fleet's deadlines need the clock itself: only where etcd is asked.
		now = wallClock()
		svc, wait := p.fleet.ask(h, d.At(0), now)
		if wait {
			return types.ActionPause // resumed by fleet.settled
		}
		*d = p.bal.DecideFleet(req, now, svc) // the proposal, stored; DecideLocal if not selectable
		secondRead(d)
	} else if p.fleet != nil && d.Persist.Hit {
		// The fleet may ask etcd about a hit (after a recovery), with a deadline.
		now = wallClock()
		svc, wait := p.fleet.hit(h, d, now)
		if wait { // etcd recovered since the entry's last use: the fleet confirms it first
			h.method, h.reason = d.Method, d.Reason
			p.m.persisted(d)
			return types.ActionPause
		}
		if svc != d.At(0) {
			*d = p.bal.DecideFleet(req, now, svc)
			secondRead(d)
		}
	}
	return h.decided(d)
}

// secondRead drops what a decision's table read reported about the key
// (hit, miss, expired, rechosen) when the request already counted its first
// read, as one that asked the fleet did: what the second resolve added
// (evictions, CAS retries) is still counted.
func secondRead(d *lbcore.Decision) {
	o := &d.Persist
	o.Hit, o.Miss, o.Expired, o.Rechosen = false, false, false, false
}

// decided counts decision d and applies it: the headers, or a 503 when it
// names no service.
func (h *httpContext) decided(d *lbcore.Decision) types.Action {
	p := h.p
	h.method, h.reason = d.Method, d.Reason
	p.m.decision(d.Reason)
	if p.cfg.Session != nil {
		if d != &h.dec { // a request resumed after the fleet: the response reads h.dec
			h.dec = *d
		}
	}
	if p.cfg.Persistence != nil {
		p.m.persisted(d)
	}
	if d.Capped {
		p.m.pend.capped++
	}
	if d.Len() == 0 {
		return h.reply503()
	}
	return h.route(d.At(0), h.upstreamValue(d))
}

// route sets the request headers for service i and counts the request. If
// the host refuses either header the request is answered 503: it must never
// leave without the headers hashlb chose, nor with a client's copy of them.
// Envoy's replace is HeaderMap::setCopy, which removes every copy of the
// name (any case: names are LowerCaseString) before adding one, since 1.16
// and unconditionally since 1.19 (source/extensions/common/wasm/context.cc
// replaceHeaderMapValue, source/common/http/header_map_impl.cc setCopy).
func (h *httpContext) route(i int, upstream string) types.Action {
	p := h.p
	if p.cfg.ViaFilterState() {
		// upstreamVia filterState: Envoy's ORIGINAL_DST cluster reads the
		// filter state first; no header the client could see (steer.go).
		if err := setUpstream(upstream, spanFilterChain); err != nil {
			p.steerFailed("filter state ", lbcore.OriginalDstFilterState, err, " (Envoy 1.28 or later is needed)")
			return h.reply503()
		}
	} else if err := proxywasm.ReplaceHttpRequestHeader(p.cfg.UpstreamHeader, upstream); err != nil {
		p.steerFailed("", p.cfg.UpstreamHeader, err, "")
		return h.reply503()
	}
	if p.cfg.ServiceHeader != "" {
		if err := proxywasm.ReplaceHttpRequestHeader(p.cfg.ServiceHeader, p.cfg.Services[i].Name); err != nil {
			p.steerFailed("", p.cfg.ServiceHeader, err, "")
			return h.reply503()
		}
	}
	h.chosen = i
	p.active(i, 1)
	return types.ActionContinue
}

// reply503 answers the request locally: nothing is selectable, and a request
// must never leave without the upstream header.
func (h *httpContext) reply503() types.Action {
	h.local = true
	_ = proxywasm.SendHttpResponse(503, [][2]string{{"content-type", "text/plain"}}, []byte(noServiceBody), -1)
	return types.ActionPause
}

// recoverRequest handles a panic in the decision: count and log it, then
// balance the request round robin over selectable services so that the
// worker keeps serving. If even that fails the request gets a 503.
func (h *httpContext) recoverRequest(r any) (action types.Action) {
	p := h.p
	defer func() {
		if r2 := recover(); r2 != nil {
			// Even the fallback failed: answer 503 rather than leave the
			// request paused with no reply until the stream times out.
			p.m.recovered("request fallback", r2)
			action = h.lastResort()
		}
	}()
	p.m.recovered("request headers (request balanced round robin)", r)
	if p.cfg == nil {
		return h.reply503()
	}
	h.method, h.reason = lbcore.MethodRoundRobin, lbcore.ReasonBackup
	if h.chosen >= 0 { // the panic came after routing; the headers are set
		return types.ActionContinue
	}
	i := p.fallbackService()
	if i < 0 {
		h.reason = lbcore.ReasonNoService
		return h.reply503()
	}
	return h.route(i, p.cfg.Services[i].Address)
}

// lastResort sends the 503 local reply when everything else panicked, and
// pauses the request: continuing could forward it without hashlb's header.
func (h *httpContext) lastResort() (action types.Action) {
	action = types.ActionPause
	defer func() { _ = recover() }()
	h.local = true
	return h.reply503()
}

// OnHttpResponseHeaders feeds passive health and adds the debug header when
// configured. Envoy passes our own local reply through here too: it is not
// the upstream's failure and is not counted.
func (h *httpContext) OnHttpResponseHeaders(int, bool) types.Action {
	defer func() {
		if r := recover(); r != nil {
			h.p.m.recovered("response headers", r)
		}
	}()
	if p := h.p; p.health != nil && p.cfg.PassiveHealth != nil && h.chosen >= 0 && !h.local {
		// Into the arena, as the request's reads, with the health record a
		// failure updates: the SDK's read would make garbage on every response.
		arenaStart()
		v, _ := getResponseHeader(":status")
		if status, ok := lbcore.ParseStatus(v); ok {
			p.health.passive(h.chosen, status)
		}
		arenaStop()
	}
	if h.p.cfg != nil && h.p.cfg.Session != nil && h.chosen >= 0 && !h.local {
		h.setSession()
	}
	if h.p.cfg != nil && h.p.cfg.DebugHeader {
		_ = proxywasm.ReplaceHttpResponseHeader("x-hashlb-decision", h.decisionText())
	}
	return types.ActionContinue
}

// OnHttpStreamDone ends the request's active count, also after a reset.
func (h *httpContext) OnHttpStreamDone() {
	defer func() {
		if r := recover(); r != nil {
			h.p.m.recovered("stream done", r)
		}
	}()
	if h.wait != 0 { // reset while waiting for the fleet
		h.p.fleet.forget(h)
	}
	if i := h.chosen; i >= 0 {
		h.chosen = -1
		h.p.active(i, -1)
	}
	if !h.ended { // once: a context in the free list twice would serve two streams
		h.ended = true
		h.p.free = append(h.p.free, h) // the stream is over: NewHttpContext may reuse h
	}
}

// dropForged removes the client's copies of our headers that route's
// replaces do not reach: with upstreamVia filterState the upstream header is
// never set, so a client's copy goes, in one call that removes every copy
// (context.cc removeHeaderMapValue: HeaderMap::remove).
func dropForged(c *lbcore.Config) {
	if c.ViaFilterState() && c.UpstreamHeader != "" {
		_ = proxywasm.RemoveHttpRequestHeader(c.UpstreamHeader)
	}
}

// readRequest fetches what the configuration's decisions read, and nothing
// more (lbcore.Config.Inputs): copying every header into the module on every
// request would cost time and garbage for nothing. The request lives in the
// plugin context (one per worker, one request at a time): a Request on the
// stack would escape to the heap through lbcore's keyers.
func (p *pluginContext) readRequest() *lbcore.Request {
	in := &p.in
	req := &p.req
	*req = lbcore.Request{Headers: req.Headers[:0]}
	p.readFailed = false
	if in.Target {
		req.Target = requestHeader(":path")
	}
	if in.Authority {
		req.Authority = requestHeader(":authority")
	}
	if in.Method {
		req.Method = requestHeader(":method")
	}
	if in.AllCopies {
		// Every copy, in order: a host may keep repeated lines apart, and
		// get_header_map_value returns only the first (Envoy's
		// Context::getHeaderMapValue takes entry [0]). One host call for the
		// whole map, kept only for the names the decision reads.
		var err error
		req.Headers, err = appendRequestHeaders(req.Headers, in.Headers)
		p.readFailed = err != nil
	} else {
		callID := false // a non-empty call-id was read
		for _, name := range in.Headers {
			if name == "host" && p.hostLate && req.Authority != "" {
				continue // read only when :authority is missing (lbcore.Config.HostOnlyForAuthority)
			}
			if name == "i" && p.callIDLate && callID {
				continue // read only without a call-id (lbcore.Config.CompactCallIDOnlyAsFallback)
			}
			if v, err := getRequestHeader(name); err == nil {
				req.Headers = append(req.Headers, [2]string{name, v})
				callID = callID || name == "call-id" && v != ""
			}
		}
	}
	if in.Source {
		req.Source = property("source\x00address")
	}
	if in.Dest {
		req.Dest = property("destination\x00address")
	}
	return req
}

// doneRequest drops the request's strings (the slice is kept for the next
// request): nothing may keep host memory of a finished request.
func (p *pluginContext) doneRequest() {
	clear(p.req.Headers)
	p.req = lbcore.Request{Headers: p.req.Headers[:0]}
}

// headerNamed reports whether the header line name is one of names (lower
// case), ignoring ASCII case. Lengths first: most lines of a request are then
// no comparison at all, and a lower-case line (what Envoy passes) one.
func headerNamed(names []string, name string) bool {
	for _, n := range names {
		if len(n) == len(name) && (n == name || strings.EqualFold(n, name)) {
			return true
		}
	}
	return false
}

// requestHeader returns a request header's value, or "".
func requestHeader(name string) string {
	v, _ := getRequestHeader(name)
	return v
}

// property reads an Envoy string property such as source.address, its path
// serialised as the ABI wants it (segments joined by NUL: "source\x00address");
// "" if the host does not have it.
func property(path string) string {
	v, _ := getProperty(path)
	return v
}

// steerFailed counts a request or connection the host would not steer
// (setting the kind name, failed with err) in hashlb.internal_error, and
// logs the first of this configuration: a host that refuses once refuses
// every request, and a line per request would flood its log (and make
// garbage on each).
func (p *pluginContext) steerFailed(kind, name string, err error, hint string) {
	p.m.internalError.Increment(1)
	if p.steerLogged {
		return
	}
	p.steerLogged = true
	proxywasm.LogErrorf("hashlb: setting %s%s: %v%s; such requests are refused and counted in hashlb.internal_error (logged once per worker and configuration)", kind, name, err, hint)
}
