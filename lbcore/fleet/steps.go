package fleet

import (
	"strconv"
	"time"
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
	case c.root.needAuth():
		c.waitRoot(o, callAuth, now)
	case !o.readOnly && !c.svcs.Selectable(o.proposal):
		// Never write a service not selectable here: read, follow the
		// fleet if it holds one, else decide locally.
		o.readOnly = true
		c.budget.refund(&o.held)
		c.next(o, now)
	case o.readOnly:
		c.opCall(o, callRange, "/v3/kv/range", c.out.rangeBody(c.opKey(o)), now, 0)
	case c.root.leaseFor(slot) == 0:
		c.waitRoot(o, callGrant, now)
	default:
		lease := c.root.leaseFor(slot)
		if o.rev == 0 {
			o.creates++
		}
		c.opCall(o, callTxn, "/v3/kv/txn", c.out.txnBody(c.opKey(o), o.rev, now.Unix(), c.svcs.FleetService(o.proposal), lease), now, lease)
	}
}

// opCall sends one call of o with what remains of o's time; with too little
// left, or too many calls sent, o is settled as timed out (nil).
func (c *Client) opCall(o *fleetOp, kind callKind, path string, body []byte, now time.Time, lease int64) *fleetCall {
	left := o.deadline.Sub(c.clk.mono)
	if left < time.Millisecond || o.calls >= fleetMaxCalls {
		c.outOfTime(o, now)
		return nil
	}
	o.calls++
	o.call = c.send(kind, o, path, body, left, lease)
	return c.reg.calls[o.call]
}

// send asks for a call of kind, of transaction o (nil: the worker's own),
// to answer within timeout, and records it.
func (c *Client) send(kind callKind, o *fleetOp, path string, body []byte, timeout time.Duration, lease int64) uint32 {
	id := c.reg.newID()
	var cl *fleetCall
	if kind == callAlive {
		cl = &c.health.beatCall // at most one in flight (health.probing): made once
	} else {
		cl = c.reg.newCall()
	}
	*cl = fleetCall{kind: kind, op: o, lease: lease, sent: c.clk.mono, timeout: timeout}
	c.reg.calls[id] = cl
	var op uint32
	if o != nil {
		op = o.id
	}
	tok := c.root.token
	if kind == callAuth {
		tok = ""
	}
	c.out.Calls = append(c.out.Calls, Call{ID: id, Op: op, Path: path, Body: body, Timeout: timeout, Token: tok})
	return id
}

// rootCall sends a call of the worker's own, within the configured timeout.
func (c *Client) rootCall(kind callKind, path string, body []byte) *fleetCall {
	return c.reg.calls[c.send(kind, nil, path, body, c.cfg.Timeout, 0)]
}

// freeCall gives back the record of a call answered or given up.
func (c *Client) freeCall(cl *fleetCall) {
	if cl != &c.health.beatCall {
		c.reg.freeCall(cl)
	}
}

// opKey is the etcd key o works on: its key's, or its second choice's
// (AltSuffix), in the key's buffer.
func (c *Client) opKey(o *fleetOp) []byte {
	if o.alt {
		return c.out.altKey(o.h)
	}
	return c.out.fleetKey(o.h)
}

// handle reads the answer (or err) of call cl.
func (c *Client) handle(cl *fleetCall, now time.Time, body []byte, err error) {
	if o := cl.op; o != nil {
		if c.reg.byID[o.id] != o || o.call == 0 {
			return // settled meanwhile
		}
		o.call = 0
		c.onOp(o, cl, now, body, err)
		return
	}
	switch cl.kind {
	case callAuth, callGrant:
		c.onRoot(cl, now, body, err)
	case callProbe, callAlive:
		c.onProbe(cl, now, body, err)
	case callTxn, callRange:
		c.syncs.syncing--
		c.onSync(cl, now, body, err)
	}
	if !c.health.down {
		c.pump(now)
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
			kv, found, err = parseRange(body, &c.out.decodeBuf)
		}
		if err != nil {
			c.retryOrFail(o, cl, now, err)
			return
		}
		c.after(now, cl.sent, nil)
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
		put, kv, found, err = parseTxn(body, &c.out.decodeBuf)
	}
	if err != nil {
		if err == errLeaseNotFound {
			c.lostLease(cl.lease, now)
		}
		c.retryOrFail(o, cl, now, err)
		return
	}
	c.after(now, cl.sent, nil)
	if found && !put {
		c.budget.refund(&o.held) // the key exists: no create of this transaction grows etcd
	}
	if put && o.rev == 0 {
		c.budget.consume(&o.held)
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

// retryOrFail retries o after an error that another call can cure (a lost
// lease, a refused token), else settles it locally.
func (c *Client) retryOrFail(o *fleetOp, cl *fleetCall, now time.Time, err error) {
	switch {
	case err == errLeaseNotFound:
		c.next(o, now)
	case err == errAuthToken && o.auths < 1:
		o.auths++
		c.root.token = ""
		c.next(o, now)
	default:
		c.failOp(o, cl.sent, now, err)
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
func (c *Client) failOp(o *fleetOp, sent, now time.Time, err error) {
	if err == errNoAnswer && !c.clk.mono.Before(o.deadline.Add(-time.Millisecond)) {
		err = errTimeout
	}
	c.after(now, sent, err)
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
	c.budget.drop(&o.held)
	delete(c.reg.ops, o.h)
	delete(c.reg.byID, o.id)
	if o.call != 0 {
		if cl := c.reg.calls[o.call]; cl != nil {
			delete(c.reg.calls, o.call) // its answer, if one comes, is for nobody
			c.freeCall(cl)
		}
	}
	c.out.Settled = append(c.out.Settled, Settled{Op: o.id, Service: svc, Fleet: fleet, Waited: c.clk.mono.Sub(o.start)})
	*o = fleetOp{}
	c.reg.freeOp(o)
}
