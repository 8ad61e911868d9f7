package fleet

import "time"

// roots is what a worker's calls need from its own calls to etcd (root
// calls): the token of /v3/auth/authenticate, when it has credentials,
// and a lease for each slot that puts name. At most one authenticate and
// one grant are in flight; the transactions that need them wait (waitRoot)
// in authWait and grantWait.
type roots struct {
	user, password string
	token          string
	leases         [2]slotLease // at index slot%2: this slot's and the next

	authing, granting bool      // in flight
	authEnd, grantEnd time.Time // when the one in flight ends at the latest (monotonic)
	authWait          []uint32  // transactions waiting on the authenticate
	grantWait         []uint32  // and on the grant
	spareWait         []uint32  // a list given back, for the next wait
}

// slotLease is the lease granted for slot.
type slotLease struct{ slot, id int64 }

func (r *roots) needAuth() bool { return r.user != "" && r.token == "" }

// leaseFor is the lease of slot, 0 when this worker has none.
func (r *roots) leaseFor(slot int64) int64 {
	if l := r.leases[slot&1]; l.slot == slot {
		return l.id
	}
	return 0
}

func (r *roots) setLease(slot, id int64) { r.leases[slot&1] = slotLease{slot, id} }

// granted reports whether lease id is one this worker was granted.
func (r *roots) granted(id int64) bool {
	return id != 0 && (r.leases[0].id == id || r.leases[1].id == id)
}

// inFlight reports whether the root call of kind (callAuth, callGrant) is
// in flight, and when it ends at the latest.
func (r *roots) inFlight(kind callKind) (bool, time.Time) {
	if kind == callGrant {
		return r.granting, r.grantEnd
	}
	return r.authing, r.authEnd
}

// wait adds transaction op to those waiting on the root call of kind.
func (r *roots) wait(kind callKind, op uint32) {
	if kind == callGrant {
		r.grantWait = append(r.grantWait, op)
	} else {
		r.authWait = append(r.authWait, op)
	}
}

// waiting returns, and forgets, the transactions waiting on the root call
// of kind; done gives the list back once it is read.
func (r *roots) waiting(kind callKind) []uint32 {
	list := &r.authWait
	if kind == callGrant {
		list = &r.grantWait
	}
	ids := *list
	*list = r.spareWait[:0]
	return ids
}

func (r *roots) done(ids []uint32) { r.spareWait = ids[:0] }

// grantIn sends the worker's one lease grant, for slot, to answer within
// timeout; authIn its one authenticate. Transactions and syncs that need
// them wait (waitRoot, pump): a worker never has two of either in flight.
func (c *Client) grantIn(slot int64, now time.Time, timeout time.Duration) {
	c.root.granting, c.root.grantEnd = true, c.clk.mono.Add(timeout)
	body := c.out.grantBody(LeaseTTL(slot, now.Unix(), c.expire))
	c.reg.calls[c.send(callGrant, nil, "/v3/lease/grant", body, timeout, 0)].slot = slot
}

func (c *Client) authIn(timeout time.Duration) *fleetCall {
	c.root.authing, c.root.authEnd = true, c.clk.mono.Add(timeout)
	return c.reg.calls[c.send(callAuth, nil, "/v3/auth/authenticate", c.out.authBody(c.root.user, c.root.password), timeout, 0)]
}

// grantAhead grants the next slot's lease in the last quarter of this one.
func (c *Client) grantAhead(now time.Time) {
	slot := c.slotOf(now.Unix())
	if !c.root.granting && !c.root.needAuth() && c.root.leaseFor(slot) != 0 && c.root.leaseFor(slot+1) == 0 &&
		(slot+1)*c.slotSecs()-now.Unix() < c.slotSecs()/4+1 {
		c.grantIn(slot+1, now, c.cfg.Timeout)
	}
}

// waitRoot makes o wait for the worker's authenticate (kind callAuth) or
// lease grant (callGrant), sending it when none is in flight, with what
// remains of o's time. A transaction whose time ends before the call in
// flight can answer is settled locally at once: it cannot wait that long,
// and etcd did not fail (nothing is counted).
func (c *Client) waitRoot(o *fleetOp, kind callKind, now time.Time) {
	left := o.deadline.Sub(c.clk.mono)
	if left < time.Millisecond || o.calls >= fleetMaxCalls {
		c.outOfTime(o, now)
		return
	}
	inFlight, end := c.root.inFlight(kind)
	if inFlight && end.After(o.deadline) {
		c.settleLocal(o, now)
		return
	}
	o.waiting, o.call = kind, 0
	c.root.wait(kind, o.id)
	if inFlight {
		return
	}
	o.calls++
	if kind == callGrant {
		c.grantIn(c.slotOf(now.Unix()), now, left)
	} else {
		c.authIn(left)
	}
}

// resumeWaiting goes on with the transactions that waited for the root
// call of kind: each takes its next step (err nil), or, when the call
// failed, is settled locally (its failure was counted once, for the call).
func (c *Client) resumeWaiting(kind callKind, now time.Time, err error) {
	ids := c.root.waiting(kind)
	for _, id := range ids {
		o := c.reg.byID[id]
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
	c.root.done(ids)
}

// onRoot reads the answer (or err) of an authenticate or a grant.
func (c *Client) onRoot(cl *fleetCall, now time.Time, body []byte, err error) {
	switch cl.kind {
	case callAuth:
		c.root.authing = false
		if cl.probe {
			c.health.probing = false
		}
		if err == nil {
			var tok string
			if tok, err = parseAuth(body); err == nil {
				c.root.token = tok
			}
		}
		c.after(now, cl.sent, err)
		c.resumeWaiting(callAuth, now, err)
	case callGrant:
		c.root.granting = false
		var id int64
		if err == nil {
			id, err = parseLease(body)
		}
		if err == nil {
			c.root.setLease(cl.slot, id)
		}
		c.after(now, cl.sent, err)
		if retryable(err) {
			err = nil // the waiting transactions renew the token first
		}
		c.resumeWaiting(callGrant, now, err)
	}
}
