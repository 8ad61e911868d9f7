package main

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// pluginContext is one configured hashlb filter on one worker. Its Balancer
// is this worker's: proxy-wasm calls a VM from one thread, so no locking.
type pluginContext struct {
	types.DefaultPluginContext
	id  uint32
	cfg *lbcore.Config
	bal *lbcore.Balancer
	m   *metrics
	// fallbackNext is the round-robin position used when a decision panicked.
	fallbackNext int
	// health runs active and passive checks; nil when neither is configured.
	health *health
	// failing[i] is true while this worker knows service i has failed
	// responses in a row (passive health).
	failing []bool
	// own[i] is this worker's active requests on service i; board shares
	// them with the other workers once per tick.
	own   []int64
	board *lbcore.LoadBoard
	// in is what decisions read from a request; hdrs is scratch for it.
	in   lbcore.Inputs
	hdrs [][2]string
}

// OnPluginStart parses the configuration once. A bad configuration is logged
// (every problem, one line each, at error level) and refused, so Envoy
// rejects the filter and nothing half-configured serves traffic.
func (p *pluginContext) OnPluginStart(int) (status types.OnPluginStartStatus) {
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
	cfg, err := lbcore.ParseConfig(data)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			proxywasm.LogErrorf("hashlb: config: %s", line)
		}
		return types.OnPluginStartStatusFailed
	}
	// Everything is built before p.cfg is set: a plugin whose start failed
	// half way must look unstarted to the request path (which then answers
	// 503), never half configured.
	m := defineMetrics(cfg)
	bal := lbcore.NewBalancer(cfg, rand.Uint64())
	// The persistence table is per plugin: two hashlb filters sharing a vm_id
	// must not read each other's buckets.
	ns := "hashlb/" + pluginRootID()
	bal.EnablePersistence(sharedStore{}, ns)
	// The tick shares active request counts and runs health checks.
	if err := proxywasm.SetTickPeriodMilliSeconds(uint32(tickPeriod / time.Millisecond)); err != nil {
		proxywasm.LogErrorf("hashlb: setting the tick period: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.m, p.bal, p.in = m, bal, cfg.Inputs()
	p.own = make([]int64, len(cfg.Services))
	p.board = lbcore.NewLoadBoard(sharedStore{}, ns, cfg.Services, rand.Uint64())
	if cfg.HealthCheck != nil || cfg.PassiveHealth != nil {
		p.failing = make([]bool, len(cfg.Services))
		p.health = newHealth(p, cfg, ns, rand.Uint64())
	}
	p.cfg = cfg
	proxywasm.LogInfof("hashlb: %s over %d services, upstream header %s", cfg.LBMethod, len(cfg.Services), cfg.UpstreamHeader)
	return types.OnPluginStartStatusOK
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
	now := time.Now()
	p.shareLoads(now)
	if p.health != nil {
		p.health.tick(now)
	}
}

// shareLoads publishes this worker's active requests and takes in the other
// workers', so least connection and bounded load see the whole proxy.
func (p *pluginContext) shareLoads(now time.Time) {
	p.board.Publish(now, p.own)
	others := p.board.Others(now)
	for i := range p.own {
		p.bal.SetActive(i, p.own[i]+others[i])
	}
}

// NewHttpContext implements types.PluginContext.
func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{p: p, chosen: -1}
}

// upstreamValue is the upstream header's value: the decision's addresses in
// rank order, comma-separated, as Envoy's override_host policy reads them.
func (p *pluginContext) upstreamValue(d *lbcore.Decision) string {
	if d.Len() == 1 {
		return p.cfg.Services[d.At(0)].Address
	}
	var b strings.Builder
	for i := 0; i < d.Len(); i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.cfg.Services[d.At(i)].Address)
	}
	return b.String()
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

// decisionText is the debug header's value.
func (p *pluginContext) decisionText(method lbcore.Method, reason lbcore.Reason, chosen int) string {
	svc := "-"
	if chosen >= 0 {
		svc = p.cfg.Services[chosen].Name
	}
	return "method=" + method.String() + "; service=" + svc + "; reason=" + reason.String()
}

// pluginRootID is the plugin's root_id (Envoy property plugin_root_id), or
// "default" when the host has none.
func pluginRootID() string {
	if id := property("plugin_root_id"); id != "" {
		return id
	}
	return "default"
}
