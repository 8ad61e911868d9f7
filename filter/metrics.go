package main

import (
	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// metrics are the filter's proxy-wasm metrics. Envoy shows them under
// /stats with the prefix "wasmcustom." (Prometheus: envoy_wasmcustom_...).
type metrics struct {
	requests      []proxywasm.MetricCounter // per service: requests routed
	active        []proxywasm.MetricGauge   // per service: active requests on this worker's VM
	decisions     []proxywasm.MetricCounter // per lbcore.Reason
	stripped      proxywasm.MetricCounter   // requests that carried a forged upstream/service header
	internalError proxywasm.MetricCounter   // decisions that panicked and were recovered
}

func defineMetrics(c *lbcore.Config) *metrics {
	m := &metrics{
		stripped:      proxywasm.DefineCounterMetric("hashlb.forged_header_stripped"),
		internalError: proxywasm.DefineCounterMetric("hashlb.internal_error"),
	}
	for _, s := range c.Services {
		m.requests = append(m.requests, proxywasm.DefineCounterMetric("hashlb.service."+s.Name+".requests"))
		m.active = append(m.active, proxywasm.DefineGaugeMetric("hashlb.service."+s.Name+".active"))
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
