package main

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// health runs active probes and passive ejection for one plugin on one
// worker: it wires host calls (ticks, dispatch_http_call, response
// properties, logs, metrics) to lbcore.HealthBoard, which holds the records
// and the probe lease in shared data and decides. Each worker refreshes its
// Balancer's view on the plugin's tick (once a second), and at once for what
// it observed itself.
type health struct {
	p         *pluginContext
	board     *lbcore.HealthBoard
	nextRound time.Time
	// probes[i] is service i's probe, made once (callout.go).
	probes []probe
	// line is applied's log line, reused.
	line []byte
}

// probe is one service's health request, serialised for proxy_http_call,
// and the SDK callback record of its answers.
type probe struct {
	h       *health
	i       int
	headers []byte
	callout calloutLayout
}

// tickPeriod is how often workers refresh health and may start a probe round.
const tickPeriod = time.Second

func newHealth(p *pluginContext, cfg *lbcore.Config, ns string, me uint64) *health {
	h := &health{p: p, board: lbcore.NewHealthBoard(sharedStore{}, ns, cfg.Services, me), line: make([]byte, 0, 256)}
	if err := h.board.Err(); err != nil {
		proxywasm.LogErrorf("hashlb: no health slots in shared data (%v): every service counts as healthy, no verdict is kept", err)
	}
	if hc := cfg.HealthCheck; hc != nil {
		h.probes = make([]probe, len(cfg.Services))
		for i := range cfg.Services {
			pr := &h.probes[i]
			pr.h, pr.i, pr.headers = h, i, appendPairs(nil, probeHeaders(cfg, hc, i))
			pr.callout.callback = pr.answered
		}
	}
	return h
}

// probeHeaders is the request that probes service i through the cluster,
// with the upstream header naming the address probed so that an
// ORIGINAL_DST or override_host cluster reaches exactly it. lbcore decides
// the address and the :authority.
func probeHeaders(cfg *lbcore.Config, hc *lbcore.HealthCheck, i int) [][2]string {
	s := &cfg.Services[i]
	return [][2]string{
		{":method", hc.Method}, {":path", hc.Path}, {":authority", hc.ProbeAuthority(s.Address)}, {":scheme", "http"},
		{cfg.UpstreamHeader, hc.ProbeAddress(s.Address)}, {"user-agent", "hashlb-health"},
	}
}

// tick refreshes the view, ends the ejections that ran out and, when a probe
// round is due and this worker holds the lease, probes every service. A
// draining plugin context (a newer configuration replaced it) never probes:
// the new one does, so no service is probed twice a round.
func (h *health) tick(now time.Time) {
	h.refresh(now)
	hc := h.p.cfg.HealthCheck
	if hc == nil || h.p.draining || !lbcore.RoundDue(now, h.nextRound, tickPeriod) {
		return
	}
	h.nextRound = now.Add(hc.Interval)
	if !h.board.TakeLease(now, hc.Interval) {
		return
	}
	for i := range h.p.cfg.Services {
		h.probe(i, hc)
	}
}

// refresh sets this worker's view of every service from the shared records
// and ends the ejections that ran out.
func (h *health) refresh(now time.Time) {
	for i := range h.p.cfg.Services {
		s := h.board.Read(i)
		h.setDown(i, !s.Selectable(now))
		if s.EjectedUntil == 0 || now.UnixMilli() < s.EjectedUntil {
			continue
		}
		if c, ended := h.board.EndEjection(i, now); ended {
			h.applied(i, &c, now)
		}
	}
}

// probe sends service i's health request; its answer comes to answered.
func (h *health) probe(i int, hc *lbcore.HealthCheck) {
	pr := &h.probes[i]
	timeout := uint32(hc.Timeout / time.Millisecond)
	table := sdkCallouts()
	if table == nil { // never: the SDK runs this tick for a registered plugin
		if _, err := proxywasm.DispatchHttpCall(hc.Cluster, probeHeaders(h.p.cfg, hc, i), nil, nil, timeout, pr.answered); err != nil {
			h.observe(i, func(r *lbcore.ServiceHealth) bool { return hc.Probe(r, false) })
		}
		return
	}
	id, err := httpCall(hc.Cluster, pr.headers, nil, timeout)
	if err != nil {
		// The cluster is missing or the call was refused: a failed probe.
		h.observe(i, func(r *lbcore.ServiceHealth) bool { return hc.Probe(r, false) })
		return
	}
	registerCallout(table, id, &pr.callout)
}

// answered takes the answer to a probe (proxy_on_http_call_response: in
// Envoy a refused, reset or timed-out probe is a 503 or 504 of Envoy's own,
// docs/envoy-host.md#http-callouts; no headers when the host reset the
// call): lbcore decides whether it passes. Its reads go to the arena:
// nothing read is kept.
func (pr *probe) answered(numHeaders, bodySize, _ int) {
	h := pr.h
	defer func() {
		if r := recover(); r != nil {
			h.p.m.recovered("health check response", r)
		}
	}()
	arenaStart()
	defer arenaStop()
	hc := h.p.cfg.HealthCheck
	status := 0
	if numHeaders > 0 {
		if v, err := getCallResponseHeader(":status"); err == nil {
			status, _ = lbcore.ParseStatus(v)
		}
	}
	var body []byte
	if hc.NeedsBody() && bodySize > 0 {
		body, _ = getCallResponseBody(min(bodySize, lbcore.MaxHealthBodyBytes))
	}
	ok := hc.Healthy(status, body)
	h.observe(pr.i, func(r *lbcore.ServiceHealth) bool { return hc.Probe(r, ok) })
}

// passive records a response from service i; failed responses eject the
// service after PassiveHealth.ConsecutiveFailures in a row, unless it is the
// last selectable one. A success costs a shared-data write only when this
// worker knows of failures to reset.
func (h *health) passive(i int, status int) {
	ph := h.p.cfg.PassiveHealth
	failed := ph.Failed(status, upstreamConnectionFailed)
	if !failed && !h.p.failing[i] {
		return
	}
	now := time.Now()
	last := h.p.bal.OnlySelectable(i)
	h.observe(i, func(r *lbcore.ServiceHealth) bool { return ph.Observe(r, failed, last, now) })
}

// observe updates service i's shared record with f (which reports a
// transition) and applies the result to this worker.
func (h *health) observe(i int, f func(*lbcore.ServiceHealth) bool) {
	c, ok := h.board.Update(i, f)
	if !ok {
		return
	}
	h.p.failing[i] = c.After.Failures > 0
	h.applied(i, &c, time.Now())
}

// applied sets this worker's view of service i from a change it wrote, and
// logs (at info) and counts the transition, which only the writer sees. A
// backend that flaps decides how often this runs, so it allocates nothing:
// the line is built in h.line.
func (h *health) applied(i int, c *lbcore.Change, now time.Time) {
	h.setDown(i, !c.After.Selectable(now))
	svc := &h.p.cfg.Services[i]
	b := append(h.line[:0], "hashlb: service "...)
	b = append(append(append(append(b, svc.Name...), " ("...), svc.Address...), ") "...)
	switch c.Transition(now) {
	case lbcore.WentDown:
		h.p.m.healthTransition(i, true, false)
		b = append(b, "is DOWN: "...)
		b = strconv.AppendInt(b, int64(h.p.cfg.HealthCheck.UnhealthyThreshold), 10)
		b = append(b, " failed health checks"...)
	case lbcore.Ejected:
		h.p.m.healthTransition(i, false, true)
		b = append(b, "ejected for "...)
		b = lbcore.AppendDuration(b, h.p.cfg.PassiveHealth.EjectionTime)
		b = append(b, " after "...)
		b = strconv.AppendInt(b, int64(h.p.cfg.PassiveHealth.ConsecutiveFailures), 10)
		b = append(b, " failed responses"...)
	case lbcore.CameBack:
		h.p.m.healthTransition(i, false, false)
		b = append(b, "is UP: "...)
		if c.Before.Down {
			b = append(b, "passed its health checks"...)
		} else {
			b = append(b, "ejection ended"...)
		}
	case lbcore.PassedStillEjected:
		left := time.UnixMilli(c.After.EjectedUntil).Sub(now).Round(time.Second)
		b = append(b, "passed its health checks; not selectable yet: still ejected for "...)
		b = lbcore.AppendDuration(b, left)
	case lbcore.EjectionEndedStillDown:
		b = append(b, "ejection ended; not selectable yet: it is DOWN by active health checks"...)
	default:
		return
	}
	h.line = b
	logInfoBytes(b)
}

// setDown applies a verdict to this worker's Balancer.
func (h *health) setDown(i int, down bool) { h.p.bal.SetDown(i, down) }

// Envoy's response flags (property response.flags, a bitmask: StreamInfo's
// legacy response flags) for a connection to the upstream that failed or broke:
// UpstreamRemoteReset (UR), UpstreamConnectionFailure (UF) and
// UpstreamConnectionTermination (UC).
const connectionFailureFlags = 0x10 | 0x20 | 0x40

// upstreamConnectionFailed reports whether Envoy answered this request itself
// because the connection to the upstream failed: its local reply counts as
// the service's failure whatever failureStatuses says. Read only for 5xx
// responses, so a healthy request costs no property lookup.
func upstreamConnectionFailed() bool {
	v, err := proxywasm.GetProperty([]string{"response", "flags"})
	if err != nil || len(v) != 8 {
		return false
	}
	return binary.LittleEndian.Uint64(v)&connectionFailureFlags != 0
}
