package main

import (
	"encoding/binary"
	"strconv"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
)

// health runs active probes and passive ejection for one plugin on one
// worker. The records live in shared data ("<ns>/h/<service id>"), so every
// worker sees every verdict; each worker refreshes its Balancer's view on
// the plugin's tick (once a second), and at once for what it observed itself.
type health struct {
	p         *pluginContext
	ns        string
	keys      []string // shared-data key of each service's record
	leaseKey  string
	me        uint64 // this worker's lease identity
	nextRound time.Time
}

// tickPeriod is how often workers refresh health and may start a probe round.
const tickPeriod = time.Second

func newHealth(p *pluginContext, cfg *lbcore.Config, ns string, me uint64) *health {
	h := &health{p: p, ns: ns, leaseKey: ns + "/h/lease", me: me | 1}
	for _, s := range cfg.Services {
		h.keys = append(h.keys, ns+"/h/"+strconv.FormatUint(s.ID, 16))
	}
	return h
}

// tick refreshes the view and, when a probe round is due and this worker
// holds the lease, probes every service.
func (h *health) tick(now time.Time) {
	for i, key := range h.keys {
		if v, _, err := proxywasm.GetSharedData(key); err == nil {
			s, _ := lbcore.DecodeHealth(v)
			h.setDown(i, !s.Selectable(now))
			h.endEjections(now, i, &s)
		}
	}
	hc := h.p.cfg.HealthCheck
	if hc == nil || now.Before(h.nextRound) {
		return
	}
	h.nextRound = now.Add(hc.Interval)
	if !h.lease(now, hc.Interval) {
		return
	}
	for i := range h.p.cfg.Services {
		h.probe(i, hc)
	}
}

// lease makes one worker at a time the prober: the lease record holds the
// holder's identity and expiry. Two workers that both find it missing may
// both probe once; that costs a duplicate probe, never a wrong verdict.
func (h *health) lease(now time.Time, d time.Duration) bool {
	v, cas, err := proxywasm.GetSharedData(h.leaseKey)
	if err == nil && len(v) == 16 {
		holder, until := binary.LittleEndian.Uint64(v), int64(binary.LittleEndian.Uint64(v[8:]))
		if holder != h.me && now.UnixMilli() < until {
			return false
		}
	}
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[:], h.me)
	// Held a little beyond one interval, so the holder renews it before
	// anyone else may take it.
	binary.LittleEndian.PutUint64(buf[8:], uint64(now.Add(d+d/2).UnixMilli()))
	return proxywasm.SetSharedData(h.leaseKey, buf[:], cas) == nil
}

// probe sends one health request to service i through the cluster, with the
// upstream header naming the service so that an ORIGINAL_DST or
// override_host cluster reaches exactly it.
func (h *health) probe(i int, hc *lbcore.HealthCheck) {
	s := &h.p.cfg.Services[i]
	headers := [][2]string{
		{":method", "GET"}, {":path", hc.Path}, {":authority", s.Address}, {":scheme", "http"},
		{h.p.cfg.UpstreamHeader, s.Address}, {"user-agent", "hashlb-health"},
	}
	_, err := proxywasm.DispatchHttpCall(hc.Cluster, headers, nil, nil, uint32(hc.Timeout/time.Millisecond),
		func(numHeaders, _, _ int) {
			defer func() {
				if r := recover(); r != nil {
					h.p.m.recovered("health check response", r)
				}
			}()
			status := 0
			if numHeaders > 0 {
				hs, _ := proxywasm.GetHttpCallResponseHeaders()
				for _, kv := range hs {
					if kv[0] == ":status" {
						status, _ = strconv.Atoi(kv[1])
					}
				}
			}
			h.observe(i, func(r *lbcore.ServiceHealth) bool { return hc.Probe(r, hc.ExpectedStatuses.Contains(status)) })
		})
	if err != nil {
		// The cluster is missing or the call was refused: a failed probe.
		h.observe(i, func(r *lbcore.ServiceHealth) bool { return hc.Probe(r, false) })
	}
}

// passive records a response from service i; failed responses eject the
// service after PassiveHealth.ConsecutiveFailures in a row. A success costs
// a shared-data write only when this worker knows of failures to reset.
func (h *health) passive(i int, status int) {
	ph := h.p.cfg.PassiveHealth
	failed := ph.FailureStatuses.Contains(status) || status >= 500 && upstreamConnectionFailed()
	if !failed && !h.p.failing[i] {
		return
	}
	now := time.Now()
	h.observe(i, func(r *lbcore.ServiceHealth) bool {
		if failed && !h.othersSelectable(i) {
			// Never eject the last selectable service: a half-working
			// backend serves better than a 503 for everyone (Envoy's
			// outlier detection bounds ejections the same way).
			r.Failures = 0
			return false
		}
		return ph.Response(r, failed, now)
	})
}

// othersSelectable reports whether a service other than i is selectable.
func (h *health) othersSelectable(i int) bool {
	for j := range h.p.cfg.Services {
		if j != i && h.p.bal.Selectable(j) {
			return true
		}
	}
	return false
}

// observe updates service i's shared record with f; f reports a transition,
// which is logged at info and counted. The log line says what changed, read
// from the record before and after: an active check can bring a service UP
// while a passive ejection still runs, and that is not a new ejection.
func (h *health) observe(i int, f func(*lbcore.ServiceHealth) bool) {
	changed := false
	var before lbcore.ServiceHealth
	r, ok := lbcore.UpdateHealth(sharedStore{}, h.keys[i], func(r *lbcore.ServiceHealth) {
		before = *r
		changed = f(r)
	})
	if !ok {
		return
	}
	h.p.failing[i] = r.Failures > 0
	now := time.Now()
	h.setDown(i, !r.Selectable(now))
	if changed {
		h.logTransition(i, &before, &r, now)
	}
}

// logTransition logs and counts the change from before to after.
func (h *health) logTransition(i int, before, after *lbcore.ServiceHealth, now time.Time) {
	svc := &h.p.cfg.Services[i]
	var state string
	switch {
	case after.Down && !before.Down:
		h.p.m.healthTransition(i, true, false)
		proxywasm.LogInfof("hashlb: service %s (%s) is DOWN: %d failed health checks", svc.Name, svc.Address, h.p.cfg.HealthCheck.UnhealthyThreshold)
		return
	case after.EjectedUntil > before.EjectedUntil && !after.Selectable(now):
		h.p.m.healthTransition(i, false, true)
		proxywasm.LogInfof("hashlb: service %s (%s) ejected for %s after %d failed responses", svc.Name, svc.Address,
			lbcore.FormatDuration(h.p.cfg.PassiveHealth.EjectionTime), h.p.cfg.PassiveHealth.ConsecutiveFailures)
		return
	case before.Down && !after.Down:
		state = "passed its health checks"
	default:
		state = "ejection ended"
	}
	if after.Selectable(now) {
		h.p.m.healthTransition(i, false, false)
		proxywasm.LogInfof("hashlb: service %s (%s) is UP: %s", svc.Name, svc.Address, state)
		return
	}
	// UP by active checks, but a passive ejection still runs (or DOWN by
	// active checks when an ejection ends): not selectable yet.
	why := "it is DOWN by active health checks"
	if !after.Down {
		why = "still ejected for " + lbcore.FormatDuration(time.UnixMilli(after.EjectedUntil).Sub(now).Round(time.Second))
	}
	proxywasm.LogInfof("hashlb: service %s (%s) %s; not selectable yet: %s", svc.Name, svc.Address, state, why)
}

// endEjections clears the ejections that have run out, so that the end of
// each is logged once, by the worker whose write clears it.
func (h *health) endEjections(now time.Time, i int, s *lbcore.ServiceHealth) {
	if s.EjectedUntil == 0 || now.UnixMilli() < s.EjectedUntil {
		return
	}
	h.observe(i, func(r *lbcore.ServiceHealth) bool {
		if r.EjectedUntil == 0 || now.UnixMilli() < r.EjectedUntil {
			return false
		}
		r.EjectedUntil = 0
		return true
	})
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
