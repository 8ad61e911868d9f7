package fleet

import "time"

// The sync queue of Client: keys decided locally (reconciled) and hits
// in a new slot (refreshed), sent from the tick, and keys to create once
// the create budget allows (placed again after a loss of etcd's data, or
// decided locally over the budget).

// syncQueue holds the keys to sync: queue, sent as soon as etcd is up;
// budgetQ, sent while over half the create budget is left; queued, the
// keys in either (a key is queued once); and syncing, the syncs in flight.
// After a sync etcd did not answer, the queue rests until the next tick:
// the syncs it retries go at the tick's pace, not as fast as they fail
// (right after a restart, a worker's queue of keys decided meanwhile would
// else keep a slow etcd busy, time out again and again, and mark it down
// for the new keys too).
type syncQueue struct {
	queue   jobQueue
	budgetQ jobQueue
	queued  map[uint64]struct{}
	syncing int
	resting bool
}

func newSyncQueue() syncQueue { return syncQueue{queued: map[uint64]struct{}{}} }

// len is how many keys wait.
func (s *syncQueue) len() int { return s.queue.n + s.budgetQ.n }

// add queues j in q (s.queue or s.budgetQ); false when its key is already
// queued or the queues hold QueueMax keys (full).
func (s *syncQueue) add(q *jobQueue, j fleetJob) (added, full bool) {
	if _, ok := s.queued[j.h]; ok {
		return false, false
	}
	if s.len() >= QueueMax {
		return false, true
	}
	if q == &s.budgetQ && len(q.jobs) == 0 {
		s.wholeBudgetQueue()
	}
	s.queued[j.h] = struct{}{}
	q.push(j)
	return true, false
}

// requeue puts j back at the front of the queue; false when its key is
// queued already.
func (s *syncQueue) requeue(j fleetJob) bool {
	if _, ok := s.queued[j.h]; ok {
		return false
	}
	s.queued[j.h] = struct{}{}
	s.queue.pushFront(j)
	return true
}

// pop takes the first key of q, which is then no longer queued.
func (s *syncQueue) pop(q *jobQueue) fleetJob {
	j := q.pop()
	delete(s.queued, j.h)
	return j
}

// wholeBudgetQueue makes the budget queue, and the set of queued keys,
// whole at its first key (about 1.2 MB of heap per worker). Keys enter it faster
// than they leave whenever new keys come faster than the create budget
// (its backlog grows until QueueMax), and a data loss queues every known
// key at once: a queue grown by doubling would leave garbage all along
// that climb, while one made whole allocates nothing after its first key.
func (s *syncQueue) wholeBudgetQueue() {
	s.budgetQ.jobs, s.budgetQ.head = make([]fleetJob, QueueMax+SyncAtOnce), 0
	m := make(map[uint64]struct{}, QueueMax+SyncAtOnce)
	for h := range s.queued {
		m[h] = struct{}{}
	}
	s.queued = m
}

// enqueue adds a key to sync; a key already queued keeps its place.
func (c *Client) enqueue(j fleetJob) { c.enqueueIn(false, j) }

// enqueueBudgeted adds a key to create once the budget allows (pump): one
// placed again after a loss of etcd's data, or one decided locally over the
// budget.
func (c *Client) enqueueBudgeted(j fleetJob) { c.enqueueIn(true, j) }

func (c *Client) enqueueIn(budgeted bool, j fleetJob) {
	if c.stopped {
		c.budget.drop(&j.held) // spent here: the successor's ledger never held it
		if i, ok := c.remap(j.svc); ok {
			j.svc = i
			c.succ.enqueueIn(budgeted, j)
		}
		return
	}
	q := &c.syncs.queue
	if budgeted {
		q = &c.syncs.budgetQ
	}
	if added, full := c.syncs.add(q, j); !added {
		if full {
			c.counts.QueueFull++
		}
		c.budget.drop(&j.held)
	}
}

// pump sends queued syncs while etcd is up, authenticated and this slot has
// a lease (asking for what is missing).
func (c *Client) pump(now time.Time) {
	slot := c.slotOf(now.Unix())
	switch {
	case c.health.down, c.stopped:
		return
	case c.root.needAuth():
		if !c.root.authing {
			c.authIn(c.cfg.Timeout)
		}
		return
	case c.root.leaseFor(slot) == 0:
		if !c.root.granting {
			c.grantIn(slot, now, c.cfg.Timeout)
		}
		return
	}
	q := &c.syncs
	if q.resting {
		return
	}
	for q.queue.n > 0 && q.syncing < SyncAtOnce {
		c.sendSync(q.pop(&q.queue), now)
	}
	// Syncs that create leave half the budget to misses.
	for q.budgetQ.n > 0 && q.syncing < SyncAtOnce && c.budget.overHalf(c.clk.mono) && c.budget.spend(c.clk.mono) {
		j := q.pop(&q.budgetQ)
		j.held = true
		c.sendSync(j, now)
	}
}

// sendSync sends create-if-absent (or, with j.rev, a replace) of j's key
// with j's service.
func (c *Client) sendSync(j fleetJob, now time.Time) {
	if (!j.readOnly || j.rev != 0) && !c.svcs.Selectable(j.svc) {
		// Never write a service not selectable here (it may have gone
		// down, or out of the configuration, since j was queued).
		c.budget.refund(&j.held)
		if j.rev != 0 {
			return
		}
		j.readOnly = true // read: the local entry follows a live service the fleet holds
	}
	c.syncs.syncing++
	if j.readOnly && j.rev == 0 {
		c.rootCall(callRange, "/v3/kv/range", c.out.rangeBody(c.out.fleetKey(j.h))).job = j
		return
	}
	lease := c.root.leaseFor(c.slotOf(now.Unix()))
	cl := c.rootCall(callTxn, "/v3/kv/txn", c.out.txnBody(c.out.fleetKey(j.h), j.rev, j.stamp, c.svcs.FleetService(j.svc), lease))
	cl.job, cl.lease = j, lease
}

// onSync reads the answer of a sync: created or refreshed; the fleet holds
// the same live service (refreshed if its stamp is of an older slot), or
// another (the local entry follows it), or a stale one (replaced).
func (c *Client) onSync(cl *fleetCall, now time.Time, body []byte, err error) {
	j := cl.job
	put, kv, found := false, etcdKV{}, false
	if err == nil && cl.kind == callRange {
		kv, found, err = parseRange(body, &c.out.decodeBuf)
	} else if err == nil {
		put, kv, found, err = parseTxn(body, &c.out.decodeBuf)
	}
	if err != nil {
		if err == errLeaseNotFound {
			c.lostLease(cl.lease, now)
		}
		c.after(now, cl.sent, err)
		// A call without an answer, or refused by etcd for a state of
		// the cluster (etcdRefusal: an election, a request timed out),
		// says nothing of the key: it is tried again from the next tick,
		// however often, while the key lives (a run of them marks etcd
		// down, which pauses the queue). Dropping it would leave the
		// key's local decision apart from the fleet's until it expires.
		// An answer that asks for a retry (retryable) is tried again
		// once its cure is in (the pump authenticates or grants first),
		// fleetMaxTries times before it counts as a try; an answer no
		// retry changes (not etcd's JSON, a permission denied) counts.
		switch {
		case retryable(err):
			if j.retries++; j.retries > fleetMaxTries {
				j.tries++
			}
		case againLater(err):
			c.syncs.resting = true
		default:
			j.tries++
		}
		if j.tries < fleetMaxTries && c.alive(j.stamp, now) {
			j.rev = 0
			c.requeue(j)
		} else {
			c.budget.drop(&j.held)
		}
		return
	}
	c.after(now, cl.sent, nil)
	if found && !put {
		c.budget.refund(&j.held)
	}
	if put && j.rev == 0 {
		c.budget.consume(&j.held)
	}
	defer c.budget.drop(&j.held) // a token j still holds when it ends (resend passes it on)
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

// againLater reports whether a sync that met err is tried again from the
// next tick without counting a try: no answer, or etcd's refusal of the
// moment.
func againLater(err error) bool {
	_, refused := err.(etcdRefusal)
	return refused || err == errNoAnswer || err == errTimeout
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
	if !c.syncs.requeue(j) {
		c.budget.drop(&j.held)
	}
}

// jobQueue is the sync queue: a ring of jobs that grows (doubling, up to
// QueueMax) and never shrinks, so that keys going through it allocate
// nothing once it is as large as the worker's backlog has been.
type jobQueue struct {
	jobs    []fleetJob
	head, n int
}

func (q *jobQueue) grow() {
	size := max(2*len(q.jobs), 64)
	if limit := QueueMax + SyncAtOnce; size > limit { // requeued syncs may pass QueueMax
		size = max(limit, q.n+1)
	}
	jobs := make([]fleetJob, size)
	for i := range q.n {
		jobs[i] = q.jobs[(q.head+i)%len(q.jobs)]
	}
	q.jobs, q.head = jobs, 0
}

func (q *jobQueue) push(j fleetJob) {
	if q.n == len(q.jobs) {
		q.grow()
	}
	q.jobs[(q.head+q.n)%len(q.jobs)] = j
	q.n++
}

func (q *jobQueue) pushFront(j fleetJob) {
	if q.n == len(q.jobs) {
		q.grow()
	}
	q.head = (q.head + len(q.jobs) - 1) % len(q.jobs)
	q.jobs[q.head] = j
	q.n++
}

func (q *jobQueue) pop() fleetJob {
	j := q.jobs[q.head]
	q.head = (q.head + 1) % len(q.jobs)
	q.n--
	return j
}

// all is the queue's jobs, in order.
func (q *jobQueue) all() []fleetJob {
	out := make([]fleetJob, q.n)
	for i := range out {
		out[i] = q.jobs[(q.head+i)%len(q.jobs)]
	}
	return out
}
