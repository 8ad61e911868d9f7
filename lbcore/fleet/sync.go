package fleet

import (
	"strings"
	"time"
)

// The sync queue of Client: keys decided locally (reconciled) and hits
// in a new slot (refreshed), sent from the tick.

// enqueue adds a key to sync; a key already queued keeps its place.
func (c *Client) enqueue(j fleetJob) { c.enqueueIn(&c.queue, j) }

// enqueueBudgeted adds a key to create once the budget allows (pump): one
// placed again after a loss of etcd's data, or one decided locally over the
// budget.
func (c *Client) enqueueBudgeted(j fleetJob) { c.enqueueIn(&c.budgetQ, j) }

func (c *Client) enqueueIn(q *jobQueue, j fleetJob) {
	if c.stopped {
		c.drop(&j.held) // spent here: the successor's ledger never held it
		if i, ok := c.remap(j.svc); ok {
			j.svc = i
			if q == &c.budgetQ {
				c.succ.enqueueBudgeted(j)
			} else {
				c.succ.enqueue(j)
			}
		}
		return
	}
	if _, ok := c.queued[j.h]; ok {
		c.drop(&j.held)
		return
	}
	if c.queue.n+c.budgetQ.n >= QueueMax {
		c.counts.QueueFull++
		c.drop(&j.held)
		return
	}
	if q == &c.budgetQ && len(q.jobs) == 0 {
		c.wholeBudgetQueue()
	}
	c.queued[j.h] = struct{}{}
	q.push(j)
}

// wholeBudgetQueue makes the budget queue, and the set of queued keys,
// whole at its first key (about 1.2 MB of heap per worker). Keys enter it faster
// than they leave whenever new keys come faster than the create budget
// (its backlog grows until QueueMax), and a data loss queues every known
// key at once: a queue grown by doubling would leave garbage all along
// that climb, while one made whole allocates nothing after its first key.
func (c *Client) wholeBudgetQueue() {
	c.budgetQ.jobs, c.budgetQ.head = make([]fleetJob, QueueMax+SyncAtOnce), 0
	m := make(map[uint64]struct{}, QueueMax+SyncAtOnce)
	for h := range c.queued {
		m[h] = struct{}{}
	}
	c.queued = m
}

// pump sends queued syncs while etcd is up, authenticated and this slot has
// a lease (asking for what is missing).
func (c *Client) pump(now time.Time) {
	slot := c.slotOf(now.Unix())
	switch {
	case c.down, c.stopped:
		return
	case c.needAuth():
		if !c.authing {
			c.authIn(now, c.cfg.Timeout)
		}
		return
	case c.leaseFor(slot) == 0:
		if !c.granting {
			c.grantIn(slot, now, c.cfg.Timeout)
		}
		return
	}
	for c.queue.n > 0 && c.syncing < SyncAtOnce {
		j := c.queue.pop()
		delete(c.queued, j.h)
		c.sendSync(j, now)
	}
	// Syncs that create leave half the budget to misses.
	c.refill()
	for c.budgetQ.n > 0 && c.syncing < SyncAtOnce && c.tokens >= 1+float64(c.cfg.CreatesPerSecond)/2 && c.spend(now) {
		j := c.budgetQ.pop()
		delete(c.queued, j.h)
		j.held = true
		c.sendSync(j, now)
	}
}

// grantIn sends the worker's one lease grant, for slot, to answer within
// timeout; authIn its one authenticate. Transactions and syncs that need
// them wait (waitRoot, pump): a worker never has two of either in flight.
func (c *Client) grantIn(slot int64, now time.Time, timeout time.Duration) {
	c.granting, c.grantEnd = true, c.mono.Add(timeout)
	c.calls[c.send(callGrant, nil, "/v3/lease/grant", c.grantBody(leaseTTL(slot, now.Unix(), c.expire)), timeout, now, 0)].slot = slot
}

func (c *Client) authIn(now time.Time, timeout time.Duration) *fleetCall {
	c.authing, c.authEnd = true, c.mono.Add(timeout)
	return c.calls[c.send(callAuth, nil, "/v3/auth/authenticate", c.authBody(), timeout, now, 0)]
}

// sendSync sends create-if-absent (or, with j.rev, a replace) of j's key
// with j's service.
func (c *Client) sendSync(j fleetJob, now time.Time) {
	if (!j.readOnly || j.rev != 0) && !c.svcs.Selectable(j.svc) {
		// Never write a service not selectable here (it may have gone
		// down, or out of the configuration, since j was queued).
		c.refund(&j.held)
		if j.rev != 0 {
			return
		}
		j.readOnly = true // read: the local entry follows a live service the fleet holds
	}
	c.syncing++
	if j.readOnly && j.rev == 0 {
		c.rootCall(callRange, "/v3/kv/range", c.rangeBody(c.fleetKey(j.h)), now).job = j
		return
	}
	lease := c.leaseFor(c.slotOf(now.Unix()))
	cl := c.rootCall(callTxn, "/v3/kv/txn", c.txnBody(j.h, j.rev, j.stamp, j.svc, lease), now)
	cl.job, cl.lease = j, lease
}

// onSync reads the answer of a sync: created or refreshed; the fleet holds
// the same live service (refreshed if its stamp is of an older slot), or
// another (the local entry follows it), or a stale one (replaced).
func (c *Client) onSync(cl *fleetCall, now time.Time, body []byte, err error) {
	j := cl.job
	put, kv, found := false, etcdKV{}, false
	if err == nil && cl.kind == callRange {
		kv, found, err = parseRange(body, &c.decodeBuf)
	} else if err == nil {
		put, kv, found, err = parseTxn(body, &c.decodeBuf)
	}
	if err != nil {
		if err == errLeaseNotFound {
			c.lostLease(cl.lease, now)
		}
		c.after(now, err)
		// A call without an answer says nothing of the key: it is tried
		// again, however often, while it lives (a run of them marks etcd
		// down, which pauses the queue). An answer that asks for a retry
		// (retryable) is tried again once its cure is in (the pump
		// authenticates or grants first), fleetMaxTries times before it
		// counts as a try; another error answer counts.
		switch {
		case retryable(err):
			if j.retries++; j.retries > fleetMaxTries {
				j.tries++
			}
		case err != errNoAnswer && err != errTimeout:
			j.tries++
		}
		if j.tries < fleetMaxTries && c.alive(j.stamp, now) {
			j.rev = 0
			c.requeue(j)
		} else {
			c.drop(&j.held)
		}
		return
	}
	c.after(now, nil)
	if found && !put {
		c.refund(&j.held)
	}
	if put && j.rev == 0 {
		c.consume(&j.held)
	}
	defer c.drop(&j.held) // a token j still holds when it ends (resend passes it on)
	i, st := c.classify(kv, found, now)
	switch {
	case put && j.rev != 0:
		c.counts.Refreshed++
		c.know(j.h, j.svc, j.stamp)
	case put:
		c.counts.Reconciled++
		c.know(j.h, j.svc, j.stamp)
		if j.resync { // the local entry may have moved since it was known: etcd holds j.svc now
			c.out.Remember = append(c.out.Remember, Remember{Hash: j.h, Service: j.svc})
		}
	case st == recUsable && i != j.svc:
		c.counts.Followed++
		c.know(j.h, i, now.Unix())
		c.out.Remember = append(c.out.Remember, Remember{Hash: j.h, Service: i})
	case st == recUsable:
		if rec, _ := ParseRecord(kv.Value); j.rev == 0 && c.slotOf(rec.Stamp) < c.slotOf(j.stamp) {
			j.rev = kv.ModRevision // the same service, stamped in an older slot: refresh it
			c.resend(&j, now)
		}
	case st == recUnusable:
		// The fleet's service is alive but not usable here: the record
		// stays for the proxies that can use it (divert); the local entry
		// goes back to it once it is selectable here.
		rec, _ := ParseRecord(kv.Value)
		c.noteDiverted(j.h, rec.Service, rec.Stamp)
	case found && j.replaces < fleetMaxReplaces:
		j.replaces++
		j.rev = kv.ModRevision
		c.resend(&j, now)
	case !found && !j.readOnly && j.tries < fleetMaxTries:
		j.tries++
		j.rev = 0
		c.resend(&j, now)
	}
}

// resend sends j's next call, which then holds j's token.
func (c *Client) resend(j *fleetJob, now time.Time) {
	c.sendSync(*j, now)
	j.held = false
}

// requeue puts j back at the front of the queue.
func (c *Client) requeue(j fleetJob) {
	if c.stopped {
		c.enqueue(j)
		return
	}
	if _, ok := c.queued[j.h]; ok {
		c.drop(&j.held)
		return
	}
	c.queued[j.h] = struct{}{}
	c.queue.pushFront(j)
}

// DivertMax bounds the keys a worker remembers as diverted (divert): past
// it, a key served on its second choice goes back to the fleet's service
// at its next refresh (the first hit in a later slot) instead of the next
// tick.
const DivertMax = 4096

// diverted is a key served on its second choice: the fleet's service for
// it (its identity), in a record stamped at Unix second stamp.
type diverted struct {
	id    string
	stamp int64
}

// noteDiverted remembers the key of hash h as served off the fleet's
// service id (identity, from a record stamped stamp).
func (c *Client) noteDiverted(h uint64, id string, stamp int64) {
	if c.stopped {
		if c.succ != nil {
			c.succ.noteDiverted(h, id, stamp)
		}
		return
	}
	if d, ok := c.diverted[h]; ok && d.id == id {
		c.diverted[h] = diverted{d.id, stamp}
		return
	}
	if len(c.diverted) >= DivertMax {
		return
	}
	if c.diverted == nil {
		c.diverted = map[uint64]diverted{}
	}
	c.diverted[h] = diverted{strings.Clone(id), stamp}
}

// undivert moves back the local entries of diverted keys whose fleet
// service is selectable here again (Remember), and forgets those whose
// record has expired. The tick runs it: after a service comes back on this
// proxy (its configuration or its health view), its keys agree with the
// fleet within one tick.
func (c *Client) undivert(now time.Time) {
	for h, d := range c.diverted {
		if !c.alive(d.stamp, now) {
			delete(c.diverted, h)
			continue
		}
		if i, ok := c.svcs.ServiceByKey(d.id); ok && c.svcs.Selectable(i) {
			delete(c.diverted, h)
			c.know(h, i, now.Unix())
			c.out.Remember = append(c.out.Remember, Remember{Hash: h, Service: i})
		}
	}
}

// Diverted is how many keys the worker serves on their second choice.
func (c *Client) Diverted() int { return len(c.diverted) }
