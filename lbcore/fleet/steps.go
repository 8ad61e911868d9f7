package fleet

import (
	"strconv"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// The steps of Client: what each answer leads to.

// next sends transaction o's next call: authenticate, grant this slot's
// lease, then the transaction itself (or a read over the create budget).
// The token and the lease are the worker's, not the transaction's: while
// there is none, o waits on the one authenticate (or grant) in flight,
// sending it if none is (waitRoot).
func (c *Client) next(o *fleetOp, now time.Time) {
	slot := c.slotOf(now.Unix())
	switch {
	case c.needAuth():
		c.waitRoot(o, callAuth, now)
	case !o.readOnly && !c.svcs.Selectable(o.proposal):
		// Never write a service not selectable here: read, follow the
		// fleet if it holds one, else decide locally.
		o.readOnly = true
		c.refund(&o.held)
		c.next(o, now)
	case o.readOnly:
		c.opCall(o, callRange, "/v3/kv/range", c.rangeBody(c.opKey(o)), now, 0)
	case c.leaseFor(slot) == 0:
		c.waitRoot(o, callGrant, now)
	default:
		lease := c.leaseFor(slot)
		if o.rev == 0 {
			o.creates++
		}
		c.opCall(o, callTxn, "/v3/kv/txn", c.txnBodyAt(c.opKey(o), o.rev, now.Unix(), o.proposal, lease), now, lease)
	}
}

// waitRoot makes o wait for the worker's authenticate (kind callAuth) or
// lease grant (callGrant), sending it when none is in flight, with what
// remains of o's time. A transaction whose time ends before the call in
// flight can answer is settled locally at once: it cannot wait that long,
// and etcd did not fail (nothing is counted).
func (c *Client) waitRoot(o *fleetOp, kind callKind, now time.Time) {
	left := o.deadline.Sub(c.mono)
	if left < time.Millisecond || o.calls >= fleetMaxCalls {
		c.outOfTime(o, now)
		return
	}
	inFlight, end := c.authing, c.authEnd
	if kind == callGrant {
		inFlight, end = c.granting, c.grantEnd
	}
	if inFlight && end.After(o.deadline) {
		c.settleLocal(o, now)
		return
	}
	o.waiting, o.call = kind, 0
	if kind == callGrant {
		c.grantWait = append(c.grantWait, o.id)
	} else {
		c.authWait = append(c.authWait, o.id)
	}
	if inFlight {
		return
	}
	o.calls++
	if kind == callGrant {
		c.grantIn(c.slotOf(now.Unix()), now, left)
	} else {
		c.authIn(now, left)
	}
}

// resumeWaiting goes on with the transactions that waited for the root
// call of kind: each takes its next step (err nil), or, when the call
// failed, is settled locally (its failure was counted once, for the call).
func (c *Client) resumeWaiting(kind callKind, now time.Time, err error) {
	list := &c.authWait
	if kind == callGrant {
		list = &c.grantWait
	}
	ids := *list
	*list = c.spareWait[:0]
	for _, id := range ids {
		o := c.byID[id]
		if o == nil || o.waiting != kind {
			continue // settled meanwhile (Abandon), or waiting on another call
		}
		o.waiting = 0
		if err != nil {
			c.settleLocal(o, now)
		} else {
			c.next(o, now)
		}
	}
	c.spareWait = ids[:0]
}

// opCall sends one call of o with what remains of o's time; with too little
// left, or too many calls sent, o is settled as timed out (nil).
func (c *Client) opCall(o *fleetOp, kind callKind, path string, body []byte, now time.Time, lease int64) *fleetCall {
	left := o.deadline.Sub(c.mono)
	if left < time.Millisecond || o.calls >= fleetMaxCalls {
		c.outOfTime(o, now)
		return nil
	}
	o.calls++
	o.call = c.send(kind, o, path, body, left, now, lease)
	return c.calls[o.call]
}

func (c *Client) send(kind callKind, o *fleetOp, path string, body []byte, timeout time.Duration, now time.Time, lease int64) uint32 {
	id := c.newID()
	var cl *fleetCall
	if kind == callAlive {
		cl = &c.aliveCall // at most one in flight (c.probe): made once
	} else {
		cl = c.newCall()
	}
	*cl = fleetCall{kind: kind, op: o, lease: lease, sent: c.mono, timeout: timeout}
	c.calls[id] = cl
	var op uint32
	if o != nil {
		op = o.id
	}
	tok := c.token
	if kind == callAuth {
		tok = ""
	}
	c.out.Calls = append(c.out.Calls, Call{ID: id, Op: op, Path: path, Body: body, Timeout: timeout, Token: tok})
	return id
}

func (c *Client) rootCall(kind callKind, path string, body []byte, now time.Time) *fleetCall {
	return c.calls[c.send(kind, nil, path, body, c.cfg.Timeout, now, 0)]
}

// handle reads the answer (or err) of call cl.
func (c *Client) handle(cl *fleetCall, now time.Time, body []byte, err error) {
	if o := cl.op; o != nil {
		if c.byID[o.id] != o || o.call == 0 {
			return // settled meanwhile
		}
		o.call = 0
		c.onOp(o, cl, now, body, err)
		return
	}
	switch cl.kind {
	case callAuth:
		c.authing = false
		if cl.probe {
			c.probe = false
		}
		if err == nil {
			err = c.authenticated(body)
		}
		c.after(now, err)
		c.resumeWaiting(callAuth, now, err)
	case callGrant:
		c.granting = false
		var id int64
		if err == nil {
			id, err = parseLease(body)
		}
		if err == nil {
			c.setLease(cl.slot, id)
		}
		c.after(now, err)
		if retryable(err) {
			err = nil // the waiting transactions renew the token first
		}
		c.resumeWaiting(callGrant, now, err)
	case callProbe:
		c.probe = false
		if err == nil {
			_, _, err = parseRange(body, &c.decodeBuf)
		}
		c.after(now, err)
	case callAlive:
		c.probe = false
		var known bool
		if err == nil {
			known, err = parseTimeToLive(body)
		}
		c.after(now, err)
		if err == nil && !known {
			c.lostLease(cl.lease, now)
		}
	case callTxn, callRange:
		c.syncing--
		c.onSync(cl, now, body, err)
	}
	if !c.down {
		c.pump(now)
	}
}

func (c *Client) authenticated(body []byte) error {
	tok, err := parseAuth(body)
	if err == nil {
		c.token = tok
	}
	return err
}

// retryable reports whether err is an answer of etcd that another call
// cures: a token it no longer accepts (authenticate again), a lease it no
// longer knows (grant another). etcd answered: such an answer is never a
// failure of etcd, on any path (transactions, syncs, grants, probes,
// heartbeats), and the call is tried again once the cure is in.
func retryable(err error) bool { return err == errAuthToken || err == errLeaseNotFound }

// after counts a call's outcome: a success, or an answer that asks for a
// retry (retryable), ends a run of failures (and a down etcd); a failure
// adds to it.
func (c *Client) after(now time.Time, err error) {
	if retryable(err) {
		if err == errAuthToken {
			c.token = ""
		}
		err = nil
	}
	switch err {
	case nil:
		c.fails = 0
		if c.down {
			c.down = false
			c.recovered = now.Unix() + 1
			c.out.Logs = append(c.out.Logs, Log{Msg: "hashlb: fleet: etcd on cluster " + c.cluster() +
				" answers again; new keys are decided fleet-wide, and keys decided locally meanwhile are reconciled"})
		}
		return
	case errAuthFailed:
		c.counts.Auth++
		c.logOnce(err, true, "hashlb: fleet: etcd on cluster "+c.cluster()+
			" refused the user "+quoteUser(c.user)+": wrong user or password (HASHLB_ETCD_USER, HASHLB_ETCD_PASSWORD); keys are decided locally")
	case errPermission:
		c.logOnce(err, true, "hashlb: fleet: etcd on cluster "+c.cluster()+": "+err.Error())
	case errAnswerTooLarge, errAnswerTooDeep:
		c.logOnce(errAnswerTooDeep, true, "hashlb: fleet: an answer of etcd on cluster "+c.cluster()+" was refused unread ("+
			err.Error()+"); such answers are failed calls, and this is logged once")
	}
	if err == errTimeout {
		c.counts.Timeout++
	} else {
		c.counts.Error++
	}
	c.fails++
	if c.down {
		c.probeAt = c.mono.Add(ProbeEvery)
		return
	}
	if c.fails >= FailLimit {
		c.down, c.probeAt = true, c.mono.Add(ProbeEvery)
		c.out.Logs = append(c.out.Logs, Log{Warn: true, Msg: "hashlb: fleet: etcd on cluster " + c.cluster() +
			" failed " + itoa(c.fails) + " times in a row (last: " + err.Error() +
			"); new keys are decided locally until it answers again (asked every " + lbcore.FormatDuration(ProbeEvery) + ")"})
	}
}

func quoteUser(u string) string { return string(appendJSONQuoted(nil, u)) }

func itoa(n int) string { return strconv.Itoa(n) }

// onOp reads an answer of transaction o.
func (c *Client) onOp(o *fleetOp, cl *fleetCall, now time.Time, body []byte, err error) {
	if cl.kind == callRange {
		var kv etcdKV
		var found bool
		if err == nil {
			kv, found, err = parseRange(body, &c.decodeBuf)
		}
		if err != nil {
			c.retryOrFail(o, now, err)
			return
		}
		c.after(now, nil)
		switch i, st := c.classify(kv, found, now); {
		case st == recUsable:
			c.fleetHit(o, i, kv, now)
		case st == recUnusable && !o.alt:
			c.divert(o, kv, now)
		default: // over budget: decided locally, created when the budget allows
			c.counts.Throttled++
			if st != recUsable && !o.alt {
				c.enqueueBudgeted(fleetJob{h: o.h, svc: o.proposal, stamp: now.Unix()})
			}
			c.settle(o, o.proposal, false, now)
		}
		return
	}
	put, kv, found := false, etcdKV{}, false
	if err == nil {
		put, kv, found, err = parseTxn(body, &c.decodeBuf)
	}
	if err != nil {
		if err == errLeaseNotFound {
			c.lostLease(cl.lease, now)
		}
		c.retryOrFail(o, now, err)
		return
	}
	c.after(now, nil)
	if found && !put {
		c.refund(&o.held) // the key exists: no create of this transaction grows etcd
	}
	if put && o.rev == 0 {
		c.consume(&o.held)
	}
	switch i, st := c.classify(kv, found, now); {
	case put:
		switch {
		case o.alt: // counted as Diverted
		case o.rev != 0:
			c.counts.Replaced++
		default:
			c.counts.Created++
		}
		c.settle(o, o.proposal, true, now)
	case st == recUsable:
		c.fleetHit(o, i, kv, now)
	case st == recUnusable && !o.alt:
		c.divert(o, kv, now)
	case !found && o.creates < 2:
		o.rev = 0 // gone between the compare and the read: create
		c.next(o, now)
	case found && o.replaces < fleetMaxReplaces:
		o.replaces++ // stale (or, for the second choice, not usable here): move it
		o.rev = kv.ModRevision
		c.next(o, now)
	default:
		c.settleLocal(o, now)
	}
}

// divert goes on with o, whose key the fleet holds on a live service this
// proxy cannot use (not selectable here, or not in its configuration),
// with the key's second choice (its alt key): the fleet's record is left
// as it is, for the proxies that can use its service, and this proxy
// serves the second choice, created with its proposal by the first proxy
// that could not use the first. A worker over the create budget only reads
// it. The key is remembered as diverted: once the fleet's service is
// selectable here again, the tick moves the local entry back to it
// (undivert).
func (c *Client) divert(o *fleetOp, kv etcdKV, now time.Time) {
	rec, _ := ParseRecord(kv.Value)
	c.noteDiverted(o.h, rec.Service, rec.Stamp)
	c.counts.Diverted++
	o.alt, o.rev, o.creates, o.replaces = true, 0, 0, 0
	c.next(o, now)
}

// retryOrFail retries o after an error that another call can cure (a lost
// lease, a refused token), else settles it locally.
func (c *Client) retryOrFail(o *fleetOp, now time.Time, err error) {
	switch {
	case err == errLeaseNotFound:
		c.next(o, now)
	case err == errAuthToken && o.auths < 1:
		o.auths++
		c.token = ""
		c.next(o, now)
	default:
		c.failOp(o, now, err)
	}
}

// What a record read from etcd is to this proxy.
type recState uint8

const (
	recAbsent   recState = iota
	recStale             // expired, or not a record: to replace
	recUnusable          // alive, on a service not selectable here or unknown here
	recUsable            // alive, on service i, selectable here
)

// classify reads a found entry: its state, and its service when usable.
func (c *Client) classify(kv etcdKV, found bool, now time.Time) (int, recState) {
	if !found {
		return 0, recAbsent
	}
	rec, ok := ParseRecord(kv.Value)
	if !ok || !rec.Alive(now, c.expire) {
		return 0, recStale
	}
	i, known := c.svcs.ServiceByKey(rec.Service)
	if !known || !c.svcs.Selectable(i) {
		return 0, recUnusable
	}
	return i, recUsable
}

// fleetHit settles o with the fleet's service i; a stamp of an older slot
// is refreshed from the tick.
func (c *Client) fleetHit(o *fleetOp, i int, kv etcdKV, now time.Time) {
	c.counts.Hit++
	if rec, _ := ParseRecord(kv.Value); !o.alt && c.slotOf(rec.Stamp) < c.slotOf(now.Unix()) {
		c.enqueue(fleetJob{h: o.h, svc: i, stamp: now.Unix()})
	}
	c.settle(o, i, true, now)
}

// outOfTime settles o locally when its time (or its calls) ran out before
// its next call: a timeout of the transaction, not a failure of etcd,
// which answered every call so far.
func (c *Client) outOfTime(o *fleetOp, now time.Time) {
	c.counts.Timeout++
	c.settleLocal(o, now)
}

// failOp settles o locally after a failed call, counting it: a call
// without an answer at o's deadline is a timeout.
func (c *Client) failOp(o *fleetOp, now time.Time, err error) {
	if err == errNoAnswer && !c.mono.Before(o.deadline.Add(-time.Millisecond)) {
		err = errTimeout
	}
	c.after(now, err)
	c.settleLocal(o, now)
}

// settleLocal decides o with its proposal and queues its key: its create
// may have been applied, or etcd may answer later. Over the create budget
// the key is only read later (followed if another proxy placed it).
func (c *Client) settleLocal(o *fleetOp, now time.Time) {
	if o.readOnly {
		c.counts.Throttled++
	}
	if o.readOnly {
		c.enqueueBudgeted(fleetJob{h: o.h, svc: o.proposal, stamp: now.Unix()})
	} else {
		c.enqueue(fleetJob{h: o.h, svc: o.proposal, stamp: now.Unix(), held: o.held})
		o.held = false // the sync holds it now
	}
	c.settle(o, o.proposal, false, now)
}

// settle ends o, which is then reused: it is o's last use.
func (c *Client) settle(o *fleetOp, svc int, fleet bool, now time.Time) {
	if (fleet || !o.readOnly) && !o.alt { // over the budget, a key etcd does not hold stays local
		c.know(o.h, svc, now.Unix())
	}
	c.drop(&o.held)
	delete(c.ops, o.h)
	delete(c.byID, o.id)
	if o.call != 0 {
		if cl := c.calls[o.call]; cl != nil {
			delete(c.calls, o.call) // its answer, if one comes, is for nobody
			c.freeCall(cl)
		}
	}
	c.out.Settled = append(c.out.Settled, Settled{Op: o.id, Service: svc, Fleet: fleet, Waited: c.mono.Sub(o.start)})
	*o = fleetOp{}
	c.freeOp(o)
}
