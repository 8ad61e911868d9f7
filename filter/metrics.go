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
	stripped      proxywasm.MetricCounter    // requests that carried a forged upstream/service header
	internalError proxywasm.MetricCounter    // callbacks that panicked and were recovered
	capped        proxywasm.MetricCounter    // decisions whose input was cut by a cap (lbcore/limits.go)
	persist       [8]proxywasm.MetricCounter // hit, miss, expired, rechosen, evicted, empty_key, cas_retry, cas_giveup
	healthDown    []proxywasm.MetricCounter  // per service: active checks marked it DOWN
	healthUp      []proxywasm.MetricCounter  // per service: selectable again (active checks passed, or an ejection ended)
	ejected       []proxywasm.MetricCounter  // per service: passive health ejected it
}

var persistNames = [...]string{"hit", "miss", "expired", "rechosen", "evicted", "empty_key", "cas_retry", "cas_giveup"}

func defineMetrics(c *lbcore.Config) *metrics {
	m := &metrics{
		stripped:      proxywasm.DefineCounterMetric("hashlb.forged_header_stripped"),
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
	return m
}

func (m *metrics) decision(r lbcore.Reason) {
	if int(r) < len(m.decisions) {
		m.decisions[r].Increment(1)
	}
}

// routed counts a request routed to service i (delta 1) or its end (delta -1).
func (m *metrics) routed(i int, delta int64) {
	if delta > 0 {
		m.requests[i].Increment(1)
	}
	m.active[i].Add(delta)
}

// persisted counts what the persistence table did for one decision.
func (m *metrics) persisted(d *lbcore.Decision) {
	o := &d.Persist
	for i, n := range [...]int{b2i(o.Hit), b2i(o.Miss), b2i(o.Expired), b2i(o.Rechosen), o.Evicted, b2i(d.EmptyKey), o.CASRetries, b2i(o.GaveUp)} {
		if n > 0 {
			m.persist[i].Increment(uint64(n))
		}
	}
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
