package main

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"
	"unsafe"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// pluginContext is one configured hashlb filter on one worker. Its Balancer
// is this worker's: proxy-wasm calls a VM from one thread, so no locking.
type pluginContext struct {
	types.DefaultPluginContext
	id  uint32
	vm  *vmContext
	cfg *lbcore.Config
	// root is the plugin's root_id (pluginRootID); draining is set when a
	// newer configuration of it started in this VM: this context then only
	// serves the streams it already has (no probes).
	root     string
	draining bool
	bal      *lbcore.Balancer
	m        *metrics
	// fallbackNext is the round-robin position used when a decision panicked.
	fallbackNext int
	// health runs active and passive checks; nil when neither is configured.
	health *health
	// fleet is persistence's fleet-wide level; nil without persistence.fleet.
	fleet *fleetLevel
	// failing[i] is true while this worker knows service i has failed
	// responses in a row (passive health).
	failing []bool
	// own[i] is this worker's active requests on service i; board shares
	// them with the other workers once per tick.
	own   []int64
	board *lbcore.LoadBoard
	// in is what decisions read from a request; req holds the request being decided.
	in  lbcore.Inputs
	req lbcore.Request
	// readFailed: the last readRequest could not read the header map (too
	// large for the module); stripSession then reads the Cookie line alone.
	readFailed bool
	// values are the header values made into strings (value).
	values map[string]string
	// free are ended requests' contexts, reused by NewHttpContext;
	// freeConns ended connections', reused by NewTcpContext (tcp.go).
	free      []*httpContext
	freeConns []*tcpContext
	// hostLate: the host header is read only for a request without
	// :authority (lbcore.Config.HostOnlyForAuthority).
	hostLate bool
	// host is the filter kind Envoy runs the plugin as, once a callback
	// showed it (kind.go); kindLogged: a wrong kind was logged.
	host       hostKind
	kindLogged bool
	// steerLogged: a refused header or filter state was logged (steerFailed).
	steerLogged bool
	wrongHTTP   wrongKindHTTP
	wrongTCP    wrongKindTCP
	// callIDLate: the header i is read only for a request without a
	// call-id (lbcore.Config.CompactCallIDOnlyAsFallback).
	callIDLate bool
	// now is the time of the last tick (or of the start): what a request's
	// persistence reads instead of a clock. A tick runs every second;
	// persistence counts last use in seconds and expiry in minutes.
	now time.Time
}

// OnPluginStart parses the configuration once. A bad configuration is logged
// (every problem, one line each, at error level) and refused, so Envoy
// rejects the filter and nothing half-configured serves traffic.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
	began := time.Now()
	defer func() {
		if r := recover(); r != nil {
			proxywasm.LogErrorf("hashlb: plugin start failed: %v", r)
			status = types.OnPluginStartStatusFailed
		}
	}()
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
		proxywasm.LogErrorf("hashlb: reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	status = p.start(data)
	if status == types.OnPluginStartStatusOK {
		// What a reconfiguration costs this worker, on the host's clock
		// (docs/performance.md#reconfiguration reads it from Envoy's log).
		proxywasm.LogInfof("hashlb: configured %d services in %.1f ms", len(p.cfg.Services), float64(time.Since(began).Microseconds())/1000)
	}
	return status
}

// start configures the plugin context from data. When a previous
// configuration of the same plugin runs in this VM, what the workers know
// about each service carries over to the new one by identity (lbcore.Carry):
// health and ejections (shared records, read at once), active requests (the
// old context's, seen at once; it keeps counting its streams until they
// end), passive failure streaks, slow-start ramps (lbcore.Balancer.Continue:
// a service the new configuration adds ramps once it is selectable);
// services the new configuration adds start Pending when health checks are
// configured (probed in the first round, at the first tick). The old context stops probing, and its fleet
// client hands its work to the new one (fleet.Client.HandOver).
func (p *pluginContext) start(data []byte) types.OnPluginStartStatus {
	// data is this call's own copy of the host's buffer, never changed.
	cfg, err := lbcore.ParseConfigOwned(data)
	if err == nil && cfg.Persistence != nil && cfg.Persistence.Fleet != nil {
		err = cfg.Persistence.Fleet.FilterProblem()
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			proxywasm.LogErrorf("hashlb: config: %s", line)
		}
		return types.OnPluginStartStatusFailed
	}
	// Everything is built before p.cfg is set: a plugin whose start failed
	// half way must look unstarted to the request path (which then answers
	// 503), never half configured.
	root := pluginRootID()
	prev := p.vm.current(root)
	if prev != nil && prev.cfg == nil {
		prev = nil
	}
	var carry lbcore.Carry
	var pm *prevMetrics
	if prev != nil {
		carry = prev.bal.Carry(cfg.Services)
		pm = &prevMetrics{m: prev.m, services: prev.cfg.Services, from: carry.From}
	}
	if !p.build(cfg, root, pm) {
		return types.OnPluginStartStatusFailed
	}
	now := time.Now()
	p.now = now
	var inherited []int64
	if prev != nil {
		// Slow start: ramps go on, and a service the new configuration
		// adds, enables or raises from weight 0 starts one (before health
		// is applied: a service still DOWN ends it, and starts it again
		// when it comes back).
		p.bal.Continue(prev.bal, &carry)
		inherited = p.takeOver(prev, &carry, now)
	}
	// Nothing below can fail: the context is started.
	p.goLive(cfg, root, now, inherited)
	return types.OnPluginStartStatusOK
}

// build makes what the context decides, counts, shares and checks with for
// cfg: metrics (carrying pm's counts), the Balancer with its persistence
// table, session key and fleet level, the tick, the load board and health.
// It reports false, after logging why, when one cannot be made; p then
// keeps nothing of it.
func (p *pluginContext) build(cfg *lbcore.Config, root string, pm *prevMetrics) bool {
	m := defineMetrics(cfg, &p.vm.metrics, pm)
	bal := lbcore.NewBalancer(cfg, rand.Uint64())
	// The persistence table is per plugin: two hashlb filters sharing a vm_id
	// must not read each other's buckets.
	ns := "hashlb/" + root
	bal.EnablePersistence(sharedStore{}, ns)
	if err := enableSession(bal, cfg, root); err != nil {
		proxywasm.LogErrorf("hashlb: config: %v", err)
		return false
	}
	var fl *fleetLevel
	if cfg.Persistence != nil && cfg.Persistence.Fleet != nil {
		fl = newFleet(p, bal, cfg.Persistence, pluginRootID())
	}
	// The tick shares active request counts and runs health checks.
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(tickPeriod / time.Millisecond)); err != nil {
		proxywasm.LogErrorf("hashlb: setting the tick period: %v", err)
		return false
	}
	p.m, p.bal, p.in, p.hostLate, p.fleet, p.root = m, bal, cfg.Inputs(), cfg.HostOnlyForAuthority(), fl, root
	p.callIDLate = cfg.CompactCallIDOnlyAsFallback()
	p.own = make([]int64, len(cfg.Services))
	p.board = lbcore.NewLoadBoard(sharedStore{}, ns, cfg.Services, rand.Uint64())
	if cfg.HealthCheck != nil || cfg.PassiveHealth != nil {
		p.failing = make([]bool, len(cfg.Services))
		p.health = newHealth(p, cfg, ns, p.vm.me)
	}
	return true
}

// takeOver carries what prev, the previous configuration's context, knows
// into p by carry: failure streaks, the health board's new services, the
// fleet client's work, and (returned, per new service) the requests prev
// has in flight when it never published them.
func (p *pluginContext) takeOver(prev *pluginContext, carry *lbcore.Carry, now time.Time) (inherited []int64) {
	if p.failing != nil && prev.failing != nil {
		p.failing = lbcore.CarryValues(carry, prev.failing)
	}
	if p.bal.Config().HealthCheck != nil {
		for _, i := range carry.Added() {
			p.health.board.Admit(i)
		}
	}
	// The fleet's queue, placed keys and view of etcd go on in the new
	// client; the old one only settles what it has in flight.
	if prev.fleet != nil && p.fleet != nil {
		prev.fleet.c.HandOver(p.fleet.c)
	} else if prev.fleet != nil {
		prev.fleet.c.Stop()
	}
	// Its requests in flight: republished for p.viewLoads, or, when it
	// never published (no tick yet), added here; no key is created.
	if !prev.board.Refresh(now, prev.own) {
		inherited = lbcore.CarryValues(carry, prev.own)
	}
	return inherited
}

// goLive starts the context on cfg: the request path sees it from here.
// The loads are read, inherited requests added, health verdicts applied.
func (p *pluginContext) goLive(cfg *lbcore.Config, root string, now time.Time, inherited []int64) {
	p.cfg = cfg
	p.viewLoads(now)
	for i, n := range inherited {
		p.bal.SetActive(i, p.bal.Active(i)+n)
	}
	if p.health != nil {
		p.health.refresh(now)
	}
	p.bal.SetTime(now) // a ramp the configuration started starts now
	p.vm.started(root, p)
	if cfg.ViaFilterState() {
		proxywasm.LogInfof("hashlb: %s filter, %s over %d services, upstream in filter state %s", cfg.FilterType, cfg.LBMethod, len(cfg.Services), lbcore.OriginalDstFilterState)
	} else {
		proxywasm.LogInfof("hashlb: %s over %d services, upstream header %s", cfg.LBMethod, len(cfg.Services), cfg.UpstreamHeader)
	}
}

// OnTick refreshes health verdicts and runs due probes.
func (p *pluginContext) OnTick() {
	defer func() {
		if r := recover(); r != nil {
			p.m.recovered("tick", r)
		}
	}()
	if p.cfg == nil {
		return
	}
	if tickHook != nil {
		tickHook("tick-start")
		defer tickHook("tick-end")
	}
	p.m.flush()
	now := time.Now()
	p.now = now
	p.tickShared(now)
	if p.fleet != nil {
		p.fleet.tick(now)
	}
}

// tickShared is the tick's work on the loads and health records: the host's
// copies of what it reads land in the scratch buffer (hostmem_wasip1.go),
// each read done with before the next, so that a tick allocates nothing.
func (p *pluginContext) tickShared(now time.Time) {
	scratchStart()
	defer scratchStop()
	p.shareLoads(now)
	if p.health != nil {
		p.health.tick(now)
	}
	// A service the health records brought back starts its ramp at this
	// tick, the time it became selectable here, even without a request.
	p.bal.SetTime(now)
}

// tickHook is nil in the module; the test build with tag hashlb_memstats
// (memstats.go) sets it to log the guest's memory statistics around a tick.
var tickHook func(where string)

// OnPluginDone gives the host the counts not yet flushed: the plugin is
// going away (a configuration change or shutdown) and will tick no more.
func (p *pluginContext) OnPluginDone() bool {
	defer func() {
		if r := recover(); r != nil {
			p.m.recovered("plugin done", r)
		}
	}()
	if p.cfg != nil {
		p.m.flush()
		p.board.Release()
		p.vm.done(p.root, p)
	}
	return true
}

// shareLoads publishes this worker's active requests and takes in the other
// workers', so least connection and bounded load see the whole proxy.
func (p *pluginContext) shareLoads(now time.Time) {
	p.board.Publish(now, p.own)
	p.viewLoads(now)
}

// viewLoads sets the balancer's active counts from this worker's own and
// the other workers' (and plugin contexts') published ones.
func (p *pluginContext) viewLoads(now time.Time) {
	others := p.board.Others(now)
	for i := range p.own {
		p.bal.SetActive(i, p.own[i]+others[i])
	}
}

// active adds delta (1 when a request or connection is sent to service i,
// -1 when it ends) to this worker's count, the balancer's view and the
// metrics.
func (p *pluginContext) active(i int, delta int64) {
	p.own[i] += delta
	p.bal.SetActive(i, p.bal.Active(i)+delta)
	p.m.routed(i, delta)
}

// NewHttpContext implements types.PluginContext: every context of a plugin
// Envoy runs as an HTTP filter (kind.go decides, on the first callback).
func (p *pluginContext) NewHttpContext(id uint32) types.HttpContext {
	if p.host != kindHTTP {
		return p.firstContext(id)
	}
	return p.newHTTP(id)
}

// newHTTP makes a request's context. A context whose stream ended
// (OnHttpStreamDone: proxy_on_log, after which a host only deletes the
// context) is reused, so that a request allocates no context.
func (p *pluginContext) newHTTP(id uint32) types.HttpContext {
	if p.cfg != nil && p.cfg.Network() {
		p.wrongHTTP.p = p
		return &p.wrongHTTP // stateless: one for every request
	}
	if h := reuse(&p.free); h != nil {
		*h = httpContext{p: p, id: id, chosen: -1, upstream: h.upstream[:0], debug: h.debug[:0], cookie: h.cookie[:0], session: h.session[:0]}
		return h
	}
	return &httpContext{p: p, id: id, chosen: -1}
}

// reuse takes the last ended context off free, or returns nil when there is
// none.
func reuse[T any](free *[]*T) *T {
	n := len(*free)
	if n == 0 {
		return nil
	}
	c := (*free)[n-1]
	(*free)[n-1] = nil
	*free = (*free)[:n-1]
	return c
}

// upstreamValue is the upstream header's value: the decision's addresses in
// rank order, comma-separated, as Envoy's override_host policy reads them,
// built in the stream's own buffer (value).
func (h *httpContext) upstreamValue(d *lbcore.Decision) string {
	p := h.p
	if d.Len() == 1 {
		return p.cfg.Services[d.At(0)].Address
	}
	b := h.upstream[:0]
	for i := 0; i < d.Len(); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, p.cfg.Services[d.At(i)].Address...)
	}
	h.upstream = b
	return p.value(b)
}

// maxValues bounds the strings value keeps.
const maxValues = 4096

// value returns b, a buffer of a stream's context, as a header value. A
// header value handed to the host must stay as it was: Envoy copies it
// during the call, but a host may keep a view of module memory (the SDK's
// own hosts do, natively and running the module in wazero, and keep it past
// the stream). So each value is made into a string once and kept, for the
// first maxValues distinct ones: no allocation per request, and a value
// that never changes. Past them (a configuration with very many services
// and upstreamCount > 1, or debug texts of very many services) the value is
// a view of b itself, which its stream's context leaves unchanged until the
// stream ends (newHTTP reuses it only after): still no allocation, valid as
// long as the stream that carries it.
func (p *pluginContext) value(b []byte) string {
	if s, ok := p.values[string(b)]; ok { // no allocation: a lookup by the bytes
		return s
	}
	if len(p.values) >= maxValues {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	s := string(b)
	if p.values == nil {
		p.values = make(map[string]string)
	}
	p.values[s] = s
	return s
}

// fallbackService picks an enabled, not DOWN service round robin, without
// lbcore's ranking: used only when a decision failed with a panic.
func (p *pluginContext) fallbackService() int {
	n := len(p.cfg.Services)
	for k := 0; k < n; k++ {
		i := (p.fallbackNext + k) % n
		if p.bal.Selectable(i) {
			p.fallbackNext = i + 1
			return i
		}
	}
	return -1
}

// decisionText is the debug header's value, built in the stream's own
// buffer (value).
func (h *httpContext) decisionText() string {
	p := h.p
	svc := "-"
	if h.chosen >= 0 {
		svc = p.cfg.Services[h.chosen].Name
	}
	b := append(h.debug[:0], "method="...)
	b = append(b, h.method.String()...)
	b = append(b, "; service="...)
	b = append(b, svc...)
	b = append(b, "; reason="...)
	b = append(b, h.reason.String()...)
	h.debug = b
	return p.value(b)
}

// pluginRootID is the plugin's root_id (Envoy property plugin_root_id), or
// "default" when the host has none.
func pluginRootID() string {
	if id := property("plugin_root_id"); id != "" {
		return id
	}
	return "default"
}
