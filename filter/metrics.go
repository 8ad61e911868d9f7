package main

import (
	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// metrics are the filter's proxy-wasm metrics. Envoy keeps them under the
// prefix "wasmcustom."; its Prometheus output strips that prefix and turns
// dots into underscores: hashlb_service_b1_requests (docs/deploy.md).
type metrics struct {
	requests      []proxywasm.MetricCounter  // per service: requests routed
	active        []proxywasm.MetricGauge    // per service: active requests on this worker's VM
	decisions     []proxywasm.MetricCounter  // per lbcore.Reason
	internalError proxywasm.MetricCounter    // callbacks that panicked and were recovered
	capped        proxywasm.MetricCounter    // decisions whose input was cut by a cap (lbcore/limits.go)
	persist       [8]proxywasm.MetricCounter // hit, miss, expired, rechosen, evicted, empty_key, cas_retry, cas_giveup
	healthDown    []proxywasm.MetricCounter  // per service: active checks marked it DOWN
	healthUp      []proxywasm.MetricCounter  // per service: selectable again (active checks passed, or an ejection ended)
	ejected       []proxywasm.MetricCounter  // per service: passive health ejected it

	// pend is what this worker counted on the request path and has not yet
	// given the host: each metric is a host call, so the request path only
	// adds here and the tick flushes (flush). The host's values lag by up to
	// one tick (tickPeriod); after a tick they are exact. Health transitions
	// and internal errors are rare and go to the host at once.
	pend struct {
		requests  []uint64 // per service
		active    []int64  // per service: the change since the last flush
		decisions []uint64 // per lbcore.Reason
		capped    uint64
		persist   [len(persistNames)]uint64
	}
}

var persistNames = [...]string{"hit", "miss", "expired", "rechosen", "evicted", "empty_key", "cas_retry", "cas_giveup"}

func defineMetrics(c *lbcore.Config) *metrics {
	m := &metrics{
		internalError: proxywasm.DefineCounterMetric("hashlb.internal_error"),
		capped:        proxywasm.DefineCounterMetric("hashlb.input_capped"),
	}
	for _, s := range c.Services {
		m.requests = append(m.requests, proxywasm.DefineCounterMetric("hashlb.service."+s.Name+".requests"))
		m.active = append(m.active, proxywasm.DefineGaugeMetric("hashlb.service."+s.Name+".active"))
		if c.HealthCheck != nil || c.PassiveHealth != nil {
			m.healthDown = append(m.healthDown, proxywasm.DefineCounterMetric("hashlb.service."+s.Name+".health_down"))
			m.healthUp = append(m.healthUp, proxywasm.DefineCounterMetric("hashlb.service."+s.Name+".health_up"))
			m.ejected = append(m.ejected, proxywasm.DefineCounterMetric("hashlb.service."+s.Name+".ejected"))
		}
	}
	if c.Persistence != nil {
		for i, n := range persistNames {
			m.persist[i] = proxywasm.DefineCounterMetric("hashlb.persistence_" + n)
		}
	}
	for _, r := range lbcore.Reasons() {
		m.decisions = append(m.decisions, proxywasm.DefineCounterMetric("hashlb.decision."+r))
	}
	m.pend.requests = make([]uint64, len(c.Services))
	m.pend.active = make([]int64, len(c.Services))
	m.pend.decisions = make([]uint64, len(m.decisions))
	return m
}

// flush gives the host what this worker counted since the last flush: one
// host call per metric that changed, none when nothing did.
func (m *metrics) flush() {
	p := &m.pend
	for i, n := range p.requests {
		if n != 0 {
			p.requests[i] = 0
			m.requests[i].Increment(n)
		}
	}
	for i, d := range p.active {
		if d != 0 {
			p.active[i] = 0
			m.active[i].Add(d)
		}
	}
	for i, n := range p.decisions {
		if n != 0 {
			p.decisions[i] = 0
			m.decisions[i].Increment(n)
		}
	}
	if p.capped != 0 {
		m.capped.Increment(p.capped)
		p.capped = 0
	}
	for i, n := range p.persist {
		if n != 0 {
			p.persist[i] = 0
			m.persist[i].Increment(n)
		}
	}
}

func (m *metrics) decision(r lbcore.Reason) {
	if int(r) < len(m.pend.decisions) {
		m.pend.decisions[r]++
	}
}

// routed counts a request routed to service i (delta 1) or its end (delta -1).
func (m *metrics) routed(i int, delta int64) {
	if delta > 0 {
		m.pend.requests[i]++
	}
	m.pend.active[i] += delta
}

// persisted counts what the persistence table did for one decision.
func (m *metrics) persisted(d *lbcore.Decision) {
	o := &d.Persist
	p := &m.pend.persist
	p[0] += uint64(b2i(o.Hit))
	p[1] += uint64(b2i(o.Miss))
	p[2] += uint64(b2i(o.Expired))
	p[3] += uint64(b2i(o.Rechosen))
	p[4] += uint64(max(o.Evicted, 0))
	p[5] += uint64(b2i(d.EmptyKey))
	p[6] += uint64(max(o.CASRetries, 0))
	p[7] += uint64(b2i(o.GaveUp))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// healthTransition counts a verdict change made by this worker: counted once,
// by the worker whose observation changed the shared record.
func (m *metrics) healthTransition(i int, down, ejected bool) {
	switch {
	case down:
		m.healthDown[i].Increment(1)
	case ejected:
		m.ejected[i].Increment(1)
	default:
		m.healthUp[i].Increment(1)
	}
}

// recovered counts and logs a panic recovered in callback where: a panic that
// reached the host would kill the VM. m may be nil when the plugin never
// started.
func (m *metrics) recovered(where string, r any) {
	if m != nil {
		m.internalError.Increment(1)
	}
	proxywasm.LogErrorf("hashlb: internal error in %s: %v", where, r)
}
