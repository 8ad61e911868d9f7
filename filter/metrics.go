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
	session       []proxywasm.MetricCounter  // per lbcore.SessionState (from absent), per key age, strip_failed, then issued, refreshed

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
		session   []uint64
	}
}

var persistNames = [...]string{"hit", "miss", "expired", "rechosen", "evicted", "empty_key", "cas_retry", "cas_giveup"}

// metricIDs are the host's ids of the plugin-wide metrics this VM defined,
// by name, so that a new configuration of the same VM reuses them instead of
// defining them again; a service's metrics are taken over from the
// configuration it replaces (defineMetrics). Envoy gives every
// proxy_define_metric call a new id for the same stat (Context::defineMetric
// in envoy source/extensions/common/wasm/context.cc takes the next id and
// looks the stat up by name in the plugin's scope, the Wasm's for every
// context of the VM), so a reused id counts into the same stat as a new one
// would; with 10^4 services a configuration names 2–5 metrics per service,
// and defining them all again is a large part of a reconfiguration's time
// in Envoy (docs/performance.md#reconfiguration-in-real-envoy). The ids are the VM's: this
// lives in the vmContext, never across VMs.
type metricIDs struct {
	named map[string]uint32
}

func (ids *metricIDs) counter(name string) proxywasm.MetricCounter {
	if ids == nil {
		return proxywasm.DefineCounterMetric(name)
	}
	if id, ok := ids.named[name]; ok {
		return proxywasm.MetricCounter(id)
	}
	m := proxywasm.DefineCounterMetric(name)
	if ids.named == nil {
		ids.named = map[string]uint32{}
	}
	ids.named[name] = uint32(m)
	return m
}

// prevMetrics is what defineMetrics may take over: the metrics of the
// configuration replaced, its services, and where each new service was in
// it (lbcore.Carry).
type prevMetrics struct {
	m        *metrics
	services []lbcore.Service
	from     []int
}

// of returns the position in the previous configuration of new service i
// with the same name, or -1.
func (pm *prevMetrics) of(c *lbcore.Config, i int) int {
	if pm == nil || pm.m == nil || i >= len(pm.from) {
		return -1
	}
	j := pm.from[i]
	if j < 0 || j >= len(pm.services) || j >= len(pm.m.requests) || pm.services[j].Name != c.Services[i].Name {
		return -1
	}
	return j
}

// defineMetrics returns configuration c's metrics: a service named as in
// the previous configuration keeps its metrics' ids (prev, nil for none),
// the others are defined; ids keeps the plugin-wide ones (nil: define
// every one).
func defineMetrics(c *lbcore.Config, ids *metricIDs, prev *prevMetrics) *metrics {
	m := &metrics{
		internalError: ids.counter("hashlb.internal_error"),
		capped:        ids.counter("hashlb.input_capped"),
	}
	health := c.HealthCheck != nil || c.PassiveHealth != nil
	n := len(c.Services)
	m.requests = make([]proxywasm.MetricCounter, n)
	m.active = make([]proxywasm.MetricGauge, n)
	if health {
		m.healthDown = make([]proxywasm.MetricCounter, n)
		m.healthUp = make([]proxywasm.MetricCounter, n)
		m.ejected = make([]proxywasm.MetricCounter, n)
	}
	var name []byte // "hashlb.service.<name>.": one buffer for every name
	define := func(i int, metric string, gauge bool) uint32 {
		name = append(append(append(name[:0], "hashlb.service."...), c.Services[i].Name...), metric...)
		if gauge {
			return uint32(proxywasm.DefineGaugeMetric(string(name)))
		}
		return uint32(proxywasm.DefineCounterMetric(string(name)))
	}
	for i := range c.Services {
		j := prev.of(c, i)
		if j >= 0 {
			m.requests[i], m.active[i] = prev.m.requests[j], prev.m.active[j]
		} else {
			m.requests[i] = proxywasm.MetricCounter(define(i, ".requests", false))
			m.active[i] = proxywasm.MetricGauge(define(i, ".active", true))
		}
		if !health {
			continue
		}
		if j >= 0 && j < len(prev.m.healthDown) {
			m.healthDown[i], m.healthUp[i], m.ejected[i] = prev.m.healthDown[j], prev.m.healthUp[j], prev.m.ejected[j]
		} else {
			m.healthDown[i] = proxywasm.MetricCounter(define(i, ".health_down", false))
			m.healthUp[i] = proxywasm.MetricCounter(define(i, ".health_up", false))
			m.ejected[i] = proxywasm.MetricCounter(define(i, ".ejected", false))
		}
	}
	if c.Persistence != nil {
		for i, n := range persistNames {
			m.persist[i] = ids.counter("hashlb.persistence_" + n)
		}
	}
	for _, r := range lbcore.Reasons() {
		m.decisions = append(m.decisions, ids.counter("hashlb.decision."+r))
	}
	if c.Session != nil {
		// hashlb.session_<state> per request; hashlb.session_key_<age> per
		// value that verified, by the key's place in HASHLB_SESSION_KEY;
		// hashlb.session_strip_failed per request answered because its value
		// could not be removed; hashlb.session_issued and
		// hashlb.session_refreshed per response that carries one.
		names := lbcore.SessionStates()[lbcore.SessionAbsent:]
		names = append(names, sessionKeyAges[:]...)
		for _, s := range append(names, "strip_failed", "issued", "refreshed") {
			m.session = append(m.session, ids.counter("hashlb.session_"+s))
		}
		m.pend.session = make([]uint64, len(m.session))
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
	flushCounts(p.requests, m.requests)
	for i, d := range p.active {
		if d != 0 {
			p.active[i] = 0
			m.active[i].Add(d)
		}
	}
	flushCounts(p.decisions, m.decisions)
	flushCounts(p.session, m.session)
	if p.capped != 0 {
		m.capped.Increment(p.capped)
		p.capped = 0
	}
	flushCounts(p.persist[:], m.persist[:])
}

// flushCounts adds each count that is not 0 to its counter and zeroes it.
func flushCounts(counts []uint64, counters []proxywasm.MetricCounter) {
	for i, n := range counts {
		if n != 0 {
			counts[i] = 0
			counters[i].Increment(n)
		}
	}
}

func (m *metrics) decision(r lbcore.Reason) {
	if int(r) < len(m.pend.decisions) {
		m.pend.decisions[r]++
	}
}

// sessionKeyAges name the keys of HASHLB_SESSION_KEY in its metrics, by
// place: the current key, then the previous ones.
var sessionKeyAges = [lbcore.MaxSessionKeys]string{"key_current", "key_previous1", "key_previous2", "key_previous3"}

// Offsets in metrics.session past the states.
const (
	sessionStates    = int(lbcore.SessionFuture-lbcore.SessionAbsent) + 1
	sessionKeyAt     = sessionStates
	sessionStripAt   = sessionKeyAt + lbcore.MaxSessionKeys
	sessionCounters  = sessionStripAt + 3 // strip_failed, issued, refreshed
	sessionIssuedAt  = sessionStripAt + 1
	sessionRefreshAt = sessionStripAt + 2
)

// sessionSeen counts what a request's session came to, and which key
// verified its value.
func (m *metrics) sessionSeen(d *lbcore.Decision) {
	if len(m.pend.session) != sessionCounters {
		return
	}
	if i := int(d.Session) - int(lbcore.SessionAbsent); i >= 0 && i < sessionStates {
		m.pend.session[i]++
	}
	if k := d.SessionKey(); k >= 0 && k < lbcore.MaxSessionKeys {
		m.pend.session[sessionKeyAt+k]++
	}
}

// sessionStripFailed counts a request answered locally because its
// session value could not be removed.
func (m *metrics) sessionStripFailed() {
	if len(m.pend.session) == sessionCounters {
		m.pend.session[sessionStripAt]++
	}
}

// sessionSet counts a response that carries a session: issued, or refreshed.
func (m *metrics) sessionSet(d *lbcore.Decision) {
	if len(m.pend.session) == sessionCounters {
		if d.Refreshes() {
			m.pend.session[sessionRefreshAt]++
		} else {
			m.pend.session[sessionIssuedAt]++
		}
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
