package main

import (
	"strconv"
	"time"

	"github.com/hashlb/hashlb/lbcore"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm"
	"github.com/higress-group/proxy-wasm-go-sdk/proxywasm/types"
)

// fleet is the fleet-wide level of the persistence table: etcd, reached with
// proxy_http_call through persistence.fleet.cluster and etcd's JSON gateway
// (lbcore/fleet.go has the protocol, docs/persistence.md the design). The
// local table stays the first level: only a local miss, an expired entry or
// a re-choose waits, for at most fleet.timeout.
//
// One fleet per worker. A callout the SDK dispatches from a stream is
// answered to that stream (the SDK calls back only while it lives), so a
// transaction belongs to the request that started it; requests for the
// same key that arrive meanwhile wait on it (fleetOp.waiters). Work that
// must not die with a stream (lease grants, refreshes) is dispatched from
// the root context, on the tick.
type fleet struct {
	p       *pluginContext
	cfg     *lbcore.Fleet
	prefix  string
	expire  time.Duration
	slot    time.Duration       // lbcore.FleetSlot(expire)
	pending map[string]*fleetOp // by etcd key

	// leases hold the lease of a slot at index slot%2: the current slot's
	// and the next one's, granted ahead, never share an index.
	leases   [2]struct{ slot, id int64 }
	granting bool

	// fails counts failed transactions in a row; at failLimit the fleet
	// is skipped until retryAt, and the wait doubles up to maxBackoff.
	fails   int
	retryAt time.Time
	backoff time.Duration

	// refresh holds keys whose stamp a hit found in an older slot; the
	// tick sends them (refreshing counts those in flight).
	refresh    []refreshItem
	queued     map[string]bool
	refreshing int

	m             fleetMetrics
	refusedLogged bool // an answer too large or too deep was logged
}

// fleetOp is one transaction for one key, shared by every request of this
// worker waiting for that key.
type fleetOp struct {
	key      string // etcd key
	local    []byte // the persistence key
	proposal int    // the method's choice, proposed to the fleet
	waiters  []*httpContext
	caller   *httpContext // the stream the callout answers to
	start    time.Time
	deadline time.Time
	replaces int
	creates  int
	calls    int // calls sent; at most maxCalls
}

type refreshItem struct {
	key   string // etcd key
	local []byte // the persistence key, to correct the local table
	svc   int
	stamp int64
}

type fleetMetrics struct {
	hit, created, replaced, refreshed, timeout, errors, skipped proxywasm.MetricCounter
	latency                                                     proxywasm.MetricHistogram
}

const (
	failLimit       = 3
	firstBackoff    = time.Second
	maxBackoff      = 30 * time.Second
	maxReplaces     = 2
	maxCalls        = 6    // per transaction: grant, create, two replaces, and a retry of each kind
	maxRefreshes    = 4096 // queued refreshes per worker; more are dropped
	refreshesAtOnce = 32
)

func newFleet(p *pluginContext, c *lbcore.Persistence, rootID string) *fleet {
	f := &fleet{p: p, cfg: c.Fleet, prefix: c.Fleet.Prefix, expire: c.Expire, slot: lbcore.FleetSlot(c.Expire),
		pending: map[string]*fleetOp{}, queued: map[string]bool{}}
	if f.prefix == "" {
		f.prefix = "/hashlb/" + rootID + "/"
	}
	def := func(n string) proxywasm.MetricCounter {
		return proxywasm.DefineCounterMetric("hashlb.persistence_fleet_" + n)
	}
	f.m = fleetMetrics{hit: def("hit"), created: def("created"), replaced: def("replaced"),
		refreshed: def("refreshed"), timeout: def("timeout"), errors: def("error"), skipped: def("skipped"),
		latency: proxywasm.DefineHistogramMetric("hashlb.persistence_fleet_latency_ms")}
	return f
}

// ask starts (or joins) the transaction for the key of the decision just
// made (Balancer.AskKey), proposing service proposal. It reports false when
// the request must be decided locally now: etcd is in backoff or the call
// could not be sent.
func (f *fleet) ask(h *httpContext, proposal int, now time.Time) bool {
	if f.fails >= failLimit && now.Before(f.retryAt) {
		f.m.skipped.Increment(1)
		return false
	}
	key := lbcore.FleetKey(f.prefix, f.p.bal.AskKey())
	if op := f.pending[key]; op != nil {
		op.waiters = append(op.waiters, h)
		h.wait = op
		return true
	}
	op := &fleetOp{key: key, local: append([]byte(nil), f.p.bal.AskKey()...), proposal: proposal, caller: h, waiters: []*httpContext{h},
		start: now, deadline: now.Add(f.cfg.Timeout)}
	if !f.send(op, now) {
		return false
	}
	f.pending[key] = op
	h.wait = op
	return true
}

// send dispatches op's next call: a lease grant when this slot has none,
// else the create-or-read transaction.
func (f *fleet) send(op *fleetOp, now time.Time) bool {
	slot := f.slotOf(now.Unix())
	if f.leaseFor(slot) == 0 {
		ttl := lbcore.FleetLeaseTTL(slot, now.Unix(), f.expire)
		return f.call(op, "/v3/lease/grant", lbcore.EtcdLeaseGrant(ttl), now, func(body []byte, err error) {
			var id int64
			if err == nil {
				id, err = lbcore.ParseEtcdLease(body)
			}
			if err != nil {
				f.failed(op, err)
				return
			}
			f.setLease(slot, id)
			f.retry(op)
		})
	}
	value := lbcore.FleetRecord{Stamp: now.Unix(), Service: f.svcKey(op.proposal)}.String()
	op.creates++
	return f.call(op, "/v3/kv/txn", lbcore.EtcdCreateOrGet(op.key, value, f.leaseFor(slot)), now, func(body []byte, err error) {
		f.onTxn(op, body, err, f.m.created)
	})
}

// retry sends op's next call after an answer, if its deadline allows.
func (f *fleet) retry(op *fleetOp) {
	if now := time.Now(); now.Before(op.deadline) && f.send(op, now) {
		return
	}
	f.failed(op, nil)
}

// onTxn reads the answer of a create-or-read or replace transaction: the
// service stored fleet-wide wins; a stale or unselectable one is replaced.
func (f *fleet) onTxn(op *fleetOp, body []byte, err error, wrote proxywasm.MetricCounter) {
	now := time.Now()
	var put, found bool
	var kv lbcore.EtcdKV
	if err == nil {
		put, kv, found, err = lbcore.ParseEtcdTxn(body)
	}
	switch {
	case err == lbcore.ErrEtcdLeaseNotFound:
		// Expired or revoked (etcd lost it): grant again.
		f.setLease(f.slotOf(now.Unix()), 0)
		f.retry(op)
		return
	case err != nil:
		f.failed(op, err)
		return
	case put:
		wrote.Increment(1)
		f.done(op, op.proposal, true)
		return
	case !found:
		// Gone between the compare and the read (its lease ended): create.
		if op.creates < 2 {
			f.retry(op)
		} else {
			f.failed(op, nil)
		}
		return
	}
	rec, ok := lbcore.ParseFleetRecord(kv.Value)
	i, known := -1, false
	if ok {
		i, known = f.p.bal.ServiceByKey(rec.Service)
	}
	if ok && known && f.p.bal.Selectable(i) && rec.Alive(now, f.expire) {
		f.m.hit.Increment(1)
		f.done(op, i, true)
		if f.slotOf(rec.Stamp) < f.slotOf(now.Unix()) {
			f.queueRefresh(op.key, op.local, i) // the fleet keeps it alive from now
		}
		return
	}
	// Stale, unknown here or not selectable: move the key for the whole
	// fleet, unless another proxy moves it first (compare mod_revision).
	if op.replaces >= maxReplaces || !now.Before(op.deadline) {
		f.failed(op, nil)
		return
	}
	op.replaces++
	slot := f.slotOf(now.Unix())
	value := lbcore.FleetRecord{Stamp: now.Unix(), Service: f.svcKey(op.proposal)}.String()
	if !f.call(op, "/v3/kv/txn", lbcore.EtcdReplace(op.key, kv.ModRevision, value, f.leaseFor(slot)), now,
		func(body []byte, err error) { f.onTxn(op, body, err, f.m.replaced) }) {
		f.failed(op, nil)
	}
}

// call sends one request of op to etcd, with what remains of op's time as
// its timeout. The answer goes to handle, from the stream op answers to.
func (f *fleet) call(op *fleetOp, path string, body []byte, now time.Time, handle answer) bool {
	left := op.deadline.Sub(now)
	if left < time.Millisecond || op.calls >= maxCalls {
		return false
	}
	op.calls++
	return f.dispatch(path, body, left, "fleet answer", func(b []byte, err error) {
		if f.pending[op.key] == op { // else already settled (its caller was reset)
			handle(b, err)
		}
	}, func() { f.failed(op, nil) }) == nil
}

// answer receives an etcd answer's body, or why there is none.
type answer func(body []byte, err error)

// dispatch sends one call to etcd's gateway on the fleet's cluster. A panic
// in handle is recovered, counted as an internal error in where, and then
// onPanic (if any) runs.
func (f *fleet) dispatch(path string, body []byte, timeout time.Duration, where string, handle answer, onPanic func()) error {
	headers := [][2]string{{":method", "POST"}, {":path", path}, {":authority", f.cfg.CallAuthority()},
		{":scheme", "http"}, {"content-type", "application/json"}}
	_, err := proxywasm.DispatchHttpCall(f.cfg.Cluster, headers, body, nil, uint32(timeout/time.Millisecond),
		func(numHeaders, bodySize, _ int) {
			defer func() {
				if r := recover(); r != nil {
					f.p.m.recovered(where, r)
					if onPanic != nil {
						onPanic()
					}
				}
			}()
			handle(callAnswer(numHeaders, bodySize))
		})
	return err
}

// callAnswer reads the answer of the running callout: its body, or an error
// when there is none (timeout, reset, no such cluster), its status is not
// 200, or it is etcd's error answer.
func callAnswer(numHeaders, bodySize int) ([]byte, error) {
	if numHeaders == 0 {
		return nil, callError("no answer (timeout, connection failure or unknown cluster)")
	}
	status := 0
	if hs, err := proxywasm.GetHttpCallResponseHeaders(); err == nil {
		for _, kv := range hs {
			if kv[0] == ":status" {
				status, _ = strconv.Atoi(kv[1])
			}
		}
	}
	if bodySize > lbcore.MaxEtcdAnswerBytes {
		return nil, lbcore.ErrEtcdAnswerTooLarge // never read
	}
	var body []byte
	if bodySize > 0 {
		body, _ = proxywasm.GetHttpCallResponseBody(0, bodySize)
	}
	if status != 200 {
		if err := lbcore.EtcdAnswerError(body); err != nil {
			return nil, err
		}
		return nil, callError("status " + strconv.Itoa(status))
	}
	return body, nil
}

// callError describes a failed call in logs.
type callError string

func (e callError) Error() string { return string(e) }

// done settles op with service i for every waiting request and records the
// transaction's latency; ok says the fleet answered.
func (f *fleet) done(op *fleetOp, i int, ok bool) {
	if f.pending[op.key] == op {
		delete(f.pending, op.key)
	}
	now := time.Now()
	f.m.latency.Record(uint64(now.Sub(op.start) / time.Millisecond))
	if ok {
		f.succeeded()
	}
	for _, h := range op.waiters {
		if h.wait == op {
			h.wait = nil
			h.resume(i, ok, now)
		}
	}
	op.waiters = nil
}

// failed settles op locally: every waiting request is decided as without
// the fleet. err == nil means the deadline passed or retries ran out.
func (f *fleet) failed(op *fleetOp, err error) {
	if f.pending[op.key] != op {
		return
	}
	now := time.Now()
	if err == nil || now.Sub(op.start) >= f.cfg.Timeout {
		f.m.timeout.Increment(1)
	} else {
		f.m.errors.Increment(1)
	}
	if (err == lbcore.ErrEtcdAnswerTooLarge || err == lbcore.ErrEtcdAnswerTooDeep) && !f.refusedLogged {
		f.refusedLogged = true // once per worker: one hostile etcd reaches every worker of the fleet
		proxywasm.LogWarnf("hashlb: fleet: an answer of etcd on cluster %q was refused unread (%v); such answers are failed calls, and this is logged once", f.cfg.Cluster, err)
	}
	f.fails++
	if f.fails == failLimit || (f.fails > failLimit && !now.Before(f.retryAt)) {
		f.backoff = min(max(2*f.backoff, firstBackoff), maxBackoff)
		f.retryAt = now.Add(f.backoff)
		why := "timeout"
		if err != nil {
			why = err.Error()
		}
		proxywasm.LogWarnf("hashlb: fleet: etcd on cluster %q failed %d times in a row (last: %s); new keys are decided locally for %s",
			f.cfg.Cluster, f.fails, why, lbcore.FormatDuration(f.backoff))
	}
	f.done(op, -1, false)
}

// succeeded ends a backoff.
func (f *fleet) succeeded() {
	if f.fails >= failLimit {
		proxywasm.LogInfof("hashlb: fleet: etcd on cluster %q answers again; new keys are decided fleet-wide", f.cfg.Cluster)
	}
	f.fails, f.backoff = 0, 0
}

// forget drops h from the transaction it waits on: its stream ended. If
// the callout answers to h, the SDK will not deliver the answer, so the
// other waiters are decided locally now rather than wait for nothing.
func (f *fleet) forget(h *httpContext) {
	op := h.wait
	h.wait = nil
	for k, w := range op.waiters {
		if w == h {
			op.waiters = append(op.waiters[:k], op.waiters[k+1:]...)
			break
		}
	}
	if op.caller == h && f.pending[op.key] == op {
		delete(f.pending, op.key)
		now := time.Now()
		for _, w := range op.waiters {
			if w.wait == op {
				w.wait = nil
				w.resume(-1, false, now)
			}
		}
		op.waiters = nil
	}
}

// svcKey is service i's identity in fleet records.
func (f *fleet) svcKey(i int) string { return f.p.cfg.Services[i].ServiceKey() }

// leaseFor is the lease of slot, 0 when this worker has none.
func (f *fleet) leaseFor(slot int64) int64 {
	if l := f.leases[slot&1]; l.slot == slot {
		return l.id
	}
	return 0
}

// setLease records the lease of slot (id 0 forgets it).
func (f *fleet) setLease(slot, id int64) { f.leases[slot&1] = struct{ slot, id int64 }{slot, id} }

// queueRefresh asks the tick to renew key's stamp (and lease): a hit saw it
// written in an older slot.
func (f *fleet) queueRefresh(key string, local []byte, svc int) {
	if f.queued[key] || len(f.refresh) >= maxRefreshes {
		return
	}
	f.queued[key] = true
	f.refresh = append(f.refresh, refreshItem{key: key, local: append([]byte(nil), local...), svc: svc,
		stamp: time.Now().Unix()})
}

// hit is called for a local hit: the first hit of a slot renews the
// fleet entry, so that it lives expire after its last use anywhere.
func (f *fleet) hit(d *lbcore.Decision, now time.Time) {
	prev := int64(d.Persist.PrevUse)
	if f.slotOf(prev) < f.slotOf(now.Unix()) {
		f.queueRefresh(lbcore.FleetKey(f.prefix, f.p.bal.AskKey()), f.p.bal.AskKey(), d.At(0))
	}
}

// tick grants leases ahead and sends queued refreshes, from the root context.
func (f *fleet) tick(now time.Time) {
	slot := f.slotOf(now.Unix())
	if f.fails >= failLimit && now.Before(f.retryAt) {
		return
	}
	if !f.granting {
		switch {
		case f.leaseFor(slot) == 0:
			f.grant(slot, now)
		case f.leaseFor(slot+1) == 0 && f.slotLeft(now) < f.slot/4:
			f.grant(slot+1, now)
		}
	}
	f.sendRefreshes(now)
}

// sendRefreshes sends queued refreshes once this slot has a lease.
func (f *fleet) sendRefreshes(now time.Time) {
	slot := f.slotOf(now.Unix())
	for len(f.refresh) > 0 && f.refreshing < refreshesAtOnce && f.leaseFor(slot) != 0 {
		it := f.refresh[0]
		f.refresh = f.refresh[1:]
		delete(f.queued, it.key)
		f.sendRefresh(it, slot)
	}
}

// slotOf numbers the slot of Unix second t (lbcore.FleetSlotOf, with the
// slot's length computed once).
func (f *fleet) slotOf(t int64) int64 { return t / int64(f.slot/time.Second) }

func (f *fleet) slotLeft(now time.Time) time.Duration {
	s := f.slot
	return s - time.Duration(now.Unix()%int64(s/time.Second))*time.Second
}

// grant asks for the lease of slot (from the root context, so the answer
// arrives whatever happens to requests).
func (f *fleet) grant(slot int64, now time.Time) {
	ttl := lbcore.FleetLeaseTTL(slot, now.Unix(), f.expire)
	err := f.dispatch("/v3/lease/grant", lbcore.EtcdLeaseGrant(ttl), f.cfg.Timeout, "fleet lease", func(body []byte, err error) {
		f.granting = false
		if err == nil {
			var id int64
			if id, err = lbcore.ParseEtcdLease(body); err == nil {
				f.setLease(slot, id)
				f.sendRefreshes(time.Now())
			}
		}
	}, func() { f.granting = false })
	f.granting = err == nil
}

// sendRefresh renews one entry: read it, then (same service, compare
// mod_revision) write a new stamp on this slot's lease. An entry that names
// another service corrects the local table; one that is gone is created.
func (f *fleet) sendRefresh(it refreshItem, slot int64) {
	value := lbcore.FleetRecord{Stamp: it.stamp, Service: f.svcKey(it.svc)}.String()
	end := func() { f.refreshing-- }
	send := func(path string, body []byte, then answer) {
		if f.dispatch(path, body, f.cfg.Timeout, "fleet refresh", then, end) != nil {
			end()
		}
	}
	f.refreshing++
	send("/v3/kv/range", lbcore.EtcdRange(it.key), func(body []byte, err error) {
		var kv lbcore.EtcdKV
		found := false
		if err == nil {
			kv, found, err = lbcore.ParseEtcdRange(body)
		}
		if err != nil {
			end()
			return
		}
		if found {
			rec, ok := lbcore.ParseFleetRecord(kv.Value)
			if i, known := f.p.bal.ServiceByKey(rec.Service); ok && known && i != it.svc && rec.Alive(time.Now(), f.expire) {
				// Another proxy moved the key: follow the fleet.
				f.p.bal.Remember(it.local, time.Now(), i)
				end()
				return
			}
			body = lbcore.EtcdReplace(it.key, kv.ModRevision, value, f.leaseFor(slot))
		} else {
			body = lbcore.EtcdCreateOrGet(it.key, value, f.leaseFor(slot))
		}
		send("/v3/kv/txn", body, func(body []byte, err error) {
			if err == nil {
				if put, _, _, err := lbcore.ParseEtcdTxn(body); err == nil && put {
					f.m.refreshed.Increment(1)
				}
			}
			end()
		})
	})
}

// resume finishes a request that waited for the fleet: service i (the
// fleet's answer), or a local decision when ok is false or i is not
// selectable here. It runs in a callback of another context, so it makes
// h's stream the effective one first.
func (h *httpContext) resume(i int, ok bool, now time.Time) {
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
	var d lbcore.Decision
	if ok {
		d = p.bal.DecideFleet(req, now, i)
	} else {
		d = p.bal.DecideLocal(req, now)
	}
	secondRead(&d)
	if h.decided(&d) == types.ActionContinue {
		_ = proxywasm.ResumeHttpRequest()
	}
}
