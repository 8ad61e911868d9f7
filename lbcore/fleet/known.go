package fleet

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// The keys a Client placed, and what it does when etcd loses them.
//
// etcd restarted on an empty data directory (or restored from an old
// snapshot) answers again but no longer holds the keys the fleet agreed on.
// A proxy that sees such a key for the first time then places it anew, maybe
// on another service than the one the other proxies hold locally; waiting
// for each of their next hits (the recovery check of Hit) makes agreement
// depend on traffic. So each worker keeps the keys it placed (the most
// recent KnownMax), and when it sees that etcd lost its data it queues
// every one still alive for reconciliation from the tick: create-if-absent
// with the service it holds, following the fleet where another proxy was
// first. Loss shows in three ways: an answer's header.revision far below the
// highest one seen (etcd's revision only grows with its data; answers that
// overtake each other differ by a few), a header.cluster_id that changed
// (another cluster), and a lease it granted that it no longer knows: "lease
// not found" on a put, or TTL -1 from the heartbeat (HeartbeatEvery),
// which asks after the current slot's lease (or the last one's), busy or
// idle.
//
// What none of them shows: a restore to a snapshot that still holds the
// worker's lease and a revision at least half the highest seen, with the
// same cluster_id: the keys written after the snapshot are gone without a
// signal. Each comes back when a proxy that holds it refreshes it (its
// first hit in a later slot creates it again) or meets it as a miss.

const (
	// KnownMax bounds the keys a worker keeps for a resync.
	KnownMax = 16384
	// fleetResyncEvery is the least time between two resyncs.
	fleetResyncEvery = 5 * time.Second
)

// knownKeys is the ring of the keys a worker placed (the most recent
// KnownMax), indexed by key, and what tells that etcd lost them: the
// highest revision etcd answered with, and its cluster_id.
//
// The ring and its index are made whole at the first key (per key, 16
// bytes in the ring and two 4-byte index slots: 384 KiB), so that
// recording a key allocates nothing however many come.
type knownKeys struct {
	ring  []fleetKnown
	index []int32 // the ring's index by key: 1 + its index in ring, 0 for none
	at    int     // the oldest of ring, once full

	maxRev    int64     // the highest header.revision etcd answered with
	maxRevAt  time.Time // when it did (monotonic)
	clusterID string    // header.cluster_id of its answers
	resyncAt  time.Time // the last resync (monotonic)
	deferred  string    // why etcd lost its data again within fleetResyncEvery of the last resync: the next one is due
}

// fleetKnown is a key the worker placed or followed (of lbcore.PersistKeyHash h):
// its service, last used at Unix second used.
type fleetKnown struct {
	h    uint64
	used uint32
	svc  int32
}

// put records that the key of hash h holds service svc, used at Unix
// second used. Past KnownMax keys the oldest recorded is forgotten.
func (k *knownKeys) put(h uint64, svc int, used int64) {
	if k.index == nil {
		k.ring = make([]fleetKnown, 0, KnownMax)
		k.index = make([]int32, 2*KnownMax)
	}
	e := fleetKnown{h: h, used: uint32(used), svc: int32(svc)}
	s, found := k.slot(h)
	if found {
		k.ring[k.index[s]-1] = e
		return
	}
	if len(k.ring) < KnownMax {
		k.ring = append(k.ring, e)
		k.index[s] = int32(len(k.ring))
		return
	}
	old, _ := k.slot(k.ring[k.at].h)
	k.unindex(old)
	k.ring[k.at] = e
	s, _ = k.slot(h) // the removal may have moved the free slot
	k.index[s] = int32(k.at + 1)
	k.at = (k.at + 1) % KnownMax
}

// slot finds h in the ring's index (open addressing, linear probing, at
// most half full): its slot, or the free slot where it would go.
func (k *knownKeys) slot(h uint64) (slot int, found bool) {
	mask := len(k.index) - 1
	for s := int(h) & mask; ; s = (s + 1) & mask {
		switch e := k.index[s]; {
		case e == 0:
			return s, false
		case k.ring[e-1].h == h:
			return s, true
		}
	}
}

// unindex empties slot s of the index, moving back the entries after it
// that their probe would no longer reach.
func (k *knownKeys) unindex(s int) {
	mask := len(k.index) - 1
	k.index[s] = 0
	for j := (s + 1) & mask; k.index[j] != 0; j = (j + 1) & mask {
		home := int(k.ring[k.index[j]-1].h) & mask
		// The entry at j stays when its home lies cyclically in (s, j].
		if (s < j && s < home && home <= j) || (j < s && (s < home || home <= j)) {
			continue
		}
		k.index[s], k.index[j] = k.index[j], 0
		s = j
	}
}

// has reports whether the key of hash h is recorded.
func (k *knownKeys) has(h uint64) bool {
	if k.index == nil {
		return false
	}
	_, found := k.slot(h)
	return found
}

func (k *knownKeys) len() int { return len(k.ring) }

// oldestFirst is the keys recorded, the oldest first.
func (k *knownKeys) oldestFirst() []fleetKnown {
	out := make([]fleetKnown, len(k.ring))
	for i := range k.ring {
		out[i] = k.ring[(k.at+i)%len(k.ring)]
	}
	return out
}

// saw reads an answer's header (revision rev, cluster_id id, "" when
// absent) to a call sent at mono sent, at mono: lost is why etcd no longer
// holds the fleet's data, "" when nothing says so. A cluster_id that
// changed, or a revision far below the highest seen, is an etcd without
// the fleet's data. A low revision counts only in the answer to a call sent
// after the highest was seen: answers to calls under way at the same time
// arrive in any order (seen in Envoy, on a fresh etcd: revision 9, then 2,
// from calls sent together), and etcd answered that one before.
func (k *knownKeys) saw(mono, sent time.Time, rev int64, id string) (lost string) {
	if id != "" && k.clusterID != "" && id != k.clusterID {
		old := k.clusterID
		k.clusterID, k.maxRev = strings.Clone(id), rev
		return "its cluster_id changed from " + old + " to " + id
	}
	if id != "" && k.clusterID == "" {
		k.clusterID = strings.Clone(id)
	}
	if rev <= 0 {
		return ""
	}
	if top := k.maxRev; rev*2 < top {
		if sent.Before(k.maxRevAt) {
			return "" // sent before etcd said top: an older answer, not a loss
		}
		k.maxRev, k.maxRevAt = rev, mono
		return "its revision went back from " + strconv.FormatInt(top, 10) + " to " + strconv.FormatInt(rev, 10)
	}
	if rev > k.maxRev {
		k.maxRev, k.maxRevAt = rev, mono
	}
	return ""
}

// resyncDue reports whether a resync may run at mono (at most one every
// fleetResyncEvery), and marks it run.
func (k *knownKeys) resyncDue(mono time.Time) bool {
	if !k.resyncAt.IsZero() && mono.Sub(k.resyncAt) < fleetResyncEvery {
		return false
	}
	k.resyncAt = mono
	return true
}

// lost notes a loss of etcd's data (why) at mono: it reports whether the
// resync runs now; else it is deferred (deferred names why) until
// fleetResyncEvery after the last one (resyncDeferred). Keys placed since
// the last resync are then placed again too: a second loss within
// fleetResyncEvery loses them as the first lost the others.
func (k *knownKeys) lost(mono time.Time, why string) bool {
	if k.resyncDue(mono) {
		k.deferred = ""
		return true
	}
	k.deferred = why
	return false
}

// resyncDeferred is why a deferred resync is due at mono, "" when none is.
func (k *knownKeys) resyncDeferred(mono time.Time) string {
	if k.deferred == "" || !k.resyncDue(mono) {
		return ""
	}
	why := k.deferred
	k.deferred = ""
	return why
}

// know records that the key of hash h holds service svc, used at Unix
// second used (knownKeys.put); a stopped client passes it on.
func (c *Client) know(h uint64, svc int, used int64) {
	if c.stopped {
		if i, ok := c.remap(svc); ok {
			c.succ.know(h, i, used)
		}
		return
	}
	c.known.put(h, svc, used)
}

// Known is how many keys the worker would place again after a data loss.
func (c *Client) Known() int { return c.known.len() }

// sawHeader checks an answer's header against what etcd said before
// (knownKeys.saw).
func (c *Client) sawHeader(now, sent time.Time, body []byte) {
	h := gjson.Get(bytesString(body), "header") // in place: id is copied when kept
	// etcd 3.4's gateway writes the proto names (cluster_id, measured on
	// 3.4.23); a gateway marshalling proto3 JSON names writes clusterId.
	rev, id := h.Get("revision").Int(), pick(h, "cluster_id", "clusterId").String()
	if why := c.known.saw(c.clk.mono, sent, rev, id); why != "" {
		c.dataLost(now, why)
	}
}

// lostLease handles "lease not found" for lease id. Its TTL outlives every
// slot it is used in (LeaseTTL), so etcd lost it with its data, or an
// operator revoked it: keys used before now may be gone from etcd too.
func (c *Client) lostLease(id int64, now time.Time) {
	c.health.recovered = now.Unix() + 1
	if c.root.granted(id) {
		c.dataLost(now, "it does not know the lease it granted")
	}
}

// dataLost queues every known key that is still alive and selectable for
// reconciliation (resync), at most once every fleetResyncEvery: a loss seen
// again within it is resynced from the tick once it passed. Leases and
// keys are gone, so hits of entries used before now ask etcd too (Hit).
func (c *Client) dataLost(now time.Time, why string) {
	c.root.leases = [2]slotLease{}
	c.health.recovered = now.Unix() + 1
	if c.known.lost(c.clk.mono, why) {
		c.resync(now, why)
	}
}

// resync queues every known key that is still alive and selectable to be
// placed again (enqueueBudgeted).
func (c *Client) resync(now time.Time, why string) {
	n := 0
	for _, e := range c.known.ring {
		if !c.alive(int64(e.used), now) || !c.svcs.Selectable(int(e.svc)) {
			continue
		}
		c.enqueueBudgeted(fleetJob{h: e.h, svc: int(e.svc), stamp: int64(e.used), resync: true})
		n++
	}
	c.counts.Resynced += uint64(n)
	c.out.log(true, "hashlb: fleet: etcd on cluster "+c.cluster()+
		" lost its data ("+why+"); the "+itoa(n)+" keys this worker placed are placed again")
}

// HandOver gives n, the client of a new configuration of the same plugin,
// what c knows that n would otherwise learn slowly or never: the keys
// queued for reconciliation or refresh, and those whose sync is in flight,
// the keys placed (for a resync), whether etcd is down, its lease, token
// and revision, and the create budget left. Services are matched by
// identity (FleetService); a key on a service the new configuration lacks
// is dropped (its local entry fails over at its next hit). Nothing is
// handed over when the two talk to another cluster, prefix, expiry or
// user. Either way c stops its own work: its transactions in flight still
// settle while its root context lives (a request waiting on one keeps it),
// and the keys they leave to reconcile go to n, but its tick no longer
// probes, grants or syncs.
//
// A sync in flight goes to n too because its answer may never come: the
// host deletes c's root context once its last stream ends, and cancels the
// calls it has in flight (Envoy's Context destructor,
// source/extensions/common/wasm/context.cc; hostsim drops their answers).
// Without n's copy, a key decided locally while etcd was down would then
// never be reconciled. When the answer does come to c, n's copy is a
// create-if-absent of the same service, which finds it.
func (c *Client) HandOver(n *Client) {
	queue, resync, known := append(c.syncs.queue.all(), c.syncsInFlight()...), c.syncs.budgetQ.all(), c.known.oldestFirst()
	for _, js := range [][]fleetJob{queue, resync} {
		for i := range js {
			js[i].held = false // Stop drops the queued tokens
		}
	}
	c.Stop()
	if c.cfg.Cluster != n.cfg.Cluster || c.out.prefix != n.out.prefix || c.expire != n.expire ||
		c.root.user != n.root.user || c.root.password != n.root.password {
		return
	}
	c.succ = n
	for _, j := range queue {
		c.enqueue(j)
	}
	for _, j := range resync {
		c.enqueueBudgeted(j)
	}
	for _, e := range known { // oldest first, so that n forgets them first too
		c.know(e.h, int(e.svc), int64(e.used))
	}
	n.root.token, n.root.leases = c.root.token, c.root.leases
	n.health.fails, n.health.down, n.health.probeAt, n.health.recovered = c.health.fails, c.health.down, c.health.probeAt, c.health.recovered
	n.health.beatAt = c.health.beatAt
	n.known.maxRev, n.known.maxRevAt, n.known.clusterID, n.known.resyncAt = c.known.maxRev, c.known.maxRevAt, c.known.clusterID, c.known.resyncAt
	n.known.deferred = c.known.deferred
	n.budget.tokens, n.budget.at = c.budget.tokens, c.budget.at
	n.clk = c.clk // n goes on on c's monotonic clock
	n.out.logged = c.out.logged
	for h, d := range c.diverted {
		n.noteDiverted(h, d.id, d.stamp)
	}
	c.diverted = nil
}

// syncsInFlight is the jobs of the syncs in flight, in the order they
// were sent, each to send again as create-if-absent (as requeue does).
func (c *Client) syncsInFlight() []fleetJob {
	var ids []uint32
	for id, cl := range c.reg.calls {
		if cl.op == nil && (cl.kind == callTxn || cl.kind == callRange) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids) // deterministic
	jobs := make([]fleetJob, len(ids))
	for i, id := range ids {
		jobs[i] = c.reg.calls[id].job
		jobs[i].rev = 0
	}
	return jobs
}

// Stop ends c's own work, as HandOver does, when the new configuration
// has no fleet level.
func (c *Client) Stop() {
	for _, q := range []*jobQueue{&c.syncs.queue, &c.syncs.budgetQ} {
		for q.n > 0 {
			j := q.pop()
			c.budget.drop(&j.held)
		}
	}
	syncing := c.syncs.syncing // still in flight: they settle here
	c.stopped, c.syncs, c.known.ring, c.known.index = true, newSyncQueue(), nil, nil
	c.syncs.syncing = syncing
}

// remap is service i of a stopped client as its successor numbers it.
func (c *Client) remap(i int) (int, bool) {
	if c.succ == nil {
		return 0, false
	}
	return c.succ.svcs.ServiceByKey(c.svcs.FleetService(i))
}
