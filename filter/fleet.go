package main

import (
	"syscall"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/hashlb/hashlb/lbcore/fleet"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// fleetLevel wires persistence's fleet-wide level to the host: the protocol is
// fleet.Client (a state machine, one per worker); this file sends its
// calls with proxy_http_call on persistence.fleet.cluster, hands it the
// answers, and applies what it settles to the waiting requests.
//
// Every call belongs to the root context, whichever context sends it: the
// host makes a call on the root context of the one that calls
// proxy_http_call and answers it there (docs/envoy-host.md, "HTTP
// callouts"), so a transaction's answer comes even after the request that
// started it ended, and settles the requests for the same key that wait on
// it. The calls go without the SDK's DispatchHttpCall, which allocates on
// every call, as active probes do (callout.go): headers serialised into
// hdrBuf, a record from free registered in the SDK's table for the root
// context, the answer read into the arena. A transaction allocates nothing.
type fleetLevel struct {
	p       *pluginContext
	cfg     *lbcore.Fleet
	c       *fleet.Client
	waiters map[uint32]waitList // by transaction

	// asking is the request inside Miss: a transaction settled before it
	// could pause is decided at once (askSvc).
	asking *httpContext
	askSvc int

	m    fleetMetrics
	seen fleet.Counts // what the metrics have been given
	cur  fleet.Counts // the client's counts being given (a field: the table's getters take a pointer, which would move a local to the heap)

	authority string
	hdrs      [][2]string
	hdrBuf    []byte
	free      []*fleetCallout
	resuming  []*httpContext // settled's list, reused
}

// waitList is the requests waiting on one transaction, linked through
// httpContext.nextWaiter, in arrival order.
type waitList struct{ first, last *httpContext }

// fleetCallout is a fleet call in flight; records are reused.
type fleetCallout struct {
	f       *fleetLevel
	id      uint32 // the fleet.Call's
	callout calloutLayout
}

// fleetCounters are the client's counters as metrics
// hashlb.persistence_fleet_<name> (docs/persistence.md#metrics), in one
// table that defining and counting walk.
var fleetCounters = [...]struct {
	name string
	get  func(*fleet.Counts) uint64
}{
	{"hit", func(c *fleet.Counts) uint64 { return c.Hit }},
	{"created", func(c *fleet.Counts) uint64 { return c.Created }},
	{"replaced", func(c *fleet.Counts) uint64 { return c.Replaced }},
	{"refreshed", func(c *fleet.Counts) uint64 { return c.Refreshed }},
	{"timeout", func(c *fleet.Counts) uint64 { return c.Timeout }},
	{"error", func(c *fleet.Counts) uint64 { return c.Error }},
	{"skipped", func(c *fleet.Counts) uint64 { return c.Skipped }},
	{"throttled", func(c *fleet.Counts) uint64 { return c.Throttled }},
	{"reconciled", func(c *fleet.Counts) uint64 { return c.Reconciled }},
	{"followed", func(c *fleet.Counts) uint64 { return c.Followed }},
	{"queue_full", func(c *fleet.Counts) uint64 { return c.QueueFull }},
	{"auth_failed", func(c *fleet.Counts) uint64 { return c.Auth }},
	{"resynced", func(c *fleet.Counts) uint64 { return c.Resynced }},
	{"diverted", func(c *fleet.Counts) uint64 { return c.Diverted }},
}

type fleetMetrics struct {
	counters [len(fleetCounters)]proxywasm.MetricCounter
	latency  proxywasm.MetricHistogram
}

// The VM's environment variables (Envoy: vm_config.environment_variables)
// with etcd's user and password; never the plugin configuration, which
// Envoy's admin endpoint shows.
const (
	envEtcdUser     = "HASHLB_ETCD_USER"
	envEtcdPassword = "HASHLB_ETCD_PASSWORD"
)

func newFleet(p *pluginContext, bal *lbcore.Balancer, c *lbcore.Persistence, rootID string) *fleetLevel {
	user, _ := syscall.Getenv(envEtcdUser)
	password, _ := syscall.Getenv(envEtcdPassword)
	f := &fleetLevel{p: p, cfg: c.Fleet, waiters: map[uint32]waitList{},
		c:         fleet.NewClient(c, fleet.Prefix(c.Fleet, rootID), bal, user, password, time.Now()),
		authority: c.Fleet.CallAuthority()}
	for i, m := range fleetCounters {
		f.m.counters[i] = proxywasm.DefineCounterMetric("hashlb.persistence_fleet_" + m.name)
	}
	f.m.latency = proxywasm.DefineHistogramMetric("hashlb.persistence_fleet_latency_ms")
	return f
}

// ask starts (or joins) the transaction for the key of the decision just
// made (Balancer.AskKey), proposing service proposal. It reports wait when
// the request pauses; else it is decided now with service svc (the
// proposal, or the fleet's if etcd settled at once).
func (f *fleetLevel) ask(h *httpContext, proposal int, now time.Time) (svc int, wait bool) {
	op, wait := f.c.Miss(now, f.p.bal.AskKey(), proposal)
	if !wait {
		f.flush(now) // its counts
		return proposal, false
	}
	return f.join(h, op, wait, proposal, now)
}

// hit reports a local hit on service svc. The client may make the request
// wait for etcd (an entry used last before etcd recovered), as ask does.
func (f *fleetLevel) hit(h *httpContext, d *lbcore.Decision, now time.Time) (svc int, wait bool) {
	op, wait := f.c.Hit(now, f.p.bal.AskKey(), d.At(0), int64(d.Persist.PrevUse))
	return f.join(h, op, wait, d.At(0), now)
}

// join makes h wait on transaction op, unless it settles at once.
func (f *fleetLevel) join(h *httpContext, op uint32, wait bool, proposal int, now time.Time) (svc int, _ bool) {
	if !wait {
		if f.c.Pending() { // a local hit usually asks for nothing: no work
			f.flush(now)
		}
		return proposal, false
	}
	l := f.waiters[op]
	if l.last == nil {
		l.first = h
	} else {
		l.last.nextWaiter = h
	}
	l.last, h.nextWaiter = h, nil
	f.waiters[op] = l
	h.wait = op
	f.asking, f.askSvc = h, proposal
	f.flush(now)
	f.asking = nil
	if h.wait == 0 { // settled already (the call could not be sent)
		return f.askSvc, false
	}
	return 0, true
}

// tick runs the client's own work, from the root context.
func (f *fleetLevel) tick(now time.Time) {
	f.c.Tick(now)
	f.flush(now)
}

// forget drops h from the transaction it waits on: its stream ended. The
// transaction goes on (its answer comes to the root context) and settles
// the other requests.
func (f *fleetLevel) forget(h *httpContext) {
	op := h.wait
	h.wait = 0
	l, ok := f.waiters[op]
	if !ok {
		return
	}
	var prev *httpContext
	for w := l.first; w != nil; prev, w = w, w.nextWaiter {
		if w != h {
			continue
		}
		if prev == nil {
			l.first = w.nextWaiter
		} else {
			prev.nextWaiter = w.nextWaiter
		}
		if l.last == w {
			l.last = prev
		}
		break
	}
	h.nextWaiter = nil
	if l.first == nil {
		delete(f.waiters, op)
	} else {
		f.waiters[op] = l
	}
}

// flush does what the client asks for until it asks for nothing more: a
// call the host refuses is reported back as unanswered.
func (f *fleetLevel) flush(now time.Time) {
	for {
		out := f.c.Take()
		if out.Empty() {
			f.c.Recycle(out)
			break
		}
		for _, l := range out.Logs {
			if l.Warn {
				proxywasm.LogWarn(l.Msg)
			} else {
				proxywasm.LogInfo(l.Msg)
			}
		}
		for _, r := range out.Remember {
			f.p.bal.RememberHash(r.Hash, now, r.Service)
		}
		for _, c := range out.Calls {
			if f.dispatch(c) != nil {
				f.c.NoAnswer(now, c.ID)
			}
		}
		for _, s := range out.Settled {
			f.settled(s, now)
		}
		f.c.Recycle(out)
	}
	f.count()
}

// dispatch sends call c to etcd's gateway on the fleet's cluster, its
// answer to come to the root context.
func (f *fleetLevel) dispatch(c fleet.Call) error {
	table := sdkCallouts()
	if table == nil { // never: the SDK runs the filter's callbacks for a registered plugin
		return types.ErrorStatusNotFound
	}
	f.hdrs = append(f.hdrs[:0], [2]string{":method", "POST"}, [2]string{":path", c.Path},
		[2]string{":authority", f.authority}, [2]string{":scheme", "http"}, [2]string{"content-type", "application/json"})
	if c.Token != "" {
		f.hdrs = append(f.hdrs, [2]string{"authorization", c.Token})
	}
	var fc *fleetCallout
	if n := len(f.free); n > 0 {
		fc, f.free = f.free[n-1], f.free[:n-1]
	} else {
		fc = &fleetCallout{f: f}
		fc.callout.callback = fc.answered
	}
	fc.id = c.ID
	f.hdrBuf = appendPairs(f.hdrBuf[:0], f.hdrs)
	callout, err := httpCall(f.cfg.Cluster, f.hdrBuf, c.Body, uint32(c.Timeout/time.Millisecond))
	if err != nil {
		f.free = append(f.free, fc)
		return err
	}
	registerCalloutFor(table, callout, &fc.callout, f.p.id)
	return nil
}

// answered takes the answer to a fleet call (no headers: the host reset
// it; Envoy answers a refused, reset or timed-out call with a 503 or 504 of
// its own, which lbcore tells from etcd's JSON, docs/envoy-host.md#http-callouts). The status and body are read into the arena, which the
// client does not keep (lbcore copies what it keeps of an answer).
func (fc *fleetCallout) answered(numHeaders, bodySize, _ int) {
	f := fc.f
	defer func() {
		if r := recover(); r != nil {
			f.p.m.recovered("fleet answer", r)
		}
	}()
	id := fc.id
	f.free = append(f.free, fc) // the SDK dropped it from its table
	now := time.Now()
	if numHeaders == 0 {
		f.c.NoAnswer(now, id)
	} else {
		func() {
			arenaStart()
			defer arenaStop()
			status := 0
			if v, err := getCallResponseHeader(":status"); err == nil {
				status, _ = lbcore.ParseStatus(v)
			}
			var body []byte
			if bodySize > 0 && bodySize <= fleet.MaxAnswerBytes {
				body, _ = getCallResponseBody(bodySize)
			}
			f.c.Answer(now, id, status, body, bodySize)
		}()
	}
	f.flush(now)
}

// settled decides every request waiting on s.Op with s.Service.
func (f *fleetLevel) settled(s fleet.Settled, now time.Time) {
	l := f.waiters[s.Op]
	delete(f.waiters, s.Op)
	f.m.latency.Record(uint64(s.Waited / time.Millisecond))
	// The list is copied out first: a request resumed may end, and its
	// context be reused, before the next one is resumed.
	ws := f.resuming[:0]
	f.resuming = nil
	for h := l.first; h != nil; {
		next := h.nextWaiter
		h.nextWaiter = nil
		ws = append(ws, h)
		h = next
	}
	for _, h := range ws {
		if h.wait != s.Op {
			continue
		}
		h.wait = 0
		if h == f.asking {
			f.askSvc = s.Service
			continue
		}
		h.resume(s.Service, now)
	}
	clear(ws)
	f.resuming = ws[:0]
}

// count gives the client's new counts to the metrics.
func (f *fleetLevel) count() {
	f.cur = f.c.Counts()
	for i, m := range fleetCounters {
		if now, before := m.get(&f.cur), m.get(&f.seen); now != before {
			f.m.counters[i].Increment(now - before)
		}
	}
	f.seen = f.cur
}

// resume finishes a request that waited for the fleet with service i (the
// fleet's, or its proposal), or a local decision when i is not selectable
// here. It runs in a callback of another context, so it makes h's stream
// the effective one first.
func (h *httpContext) resume(i int, now time.Time) {
	p := h.p
	defer func() {
		if r := recover(); r != nil {
			p.m.recovered("fleet resume", r)
			_ = proxywasm.SetEffectiveContext(h.id)
			h.lastResort()
		}
	}()
	if h.ended || proxywasm.SetEffectiveContext(h.id) != nil {
		return // the stream is gone
	}
	arenaStart()
	defer arenaStop()
	req := p.readRequest()
	defer p.doneRequest()
	d := p.bal.DecideFleet(req, now, i)
	secondRead(&d)
	if h.decided(&d) == types.ActionContinue {
		_ = proxywasm.ResumeHttpRequest()
	}
}
