package fleet

import (
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

// fleetKnown is a key the worker placed or followed (of lbcore.PersistKeyHash h):
// its service, last used at Unix second used.
type fleetKnown struct {
	h    uint64
	used uint32
	svc  int32
}

// know records that the key of hash h holds service svc, used at Unix
// second used. Past KnownMax keys the oldest recorded is forgotten.
//
// The ring and its index are made whole at the first key (per key, 16
// bytes in the ring and two 4-byte index slots: 384 KiB), so that
// recording a key allocates nothing however many come.
func (c *Client) know(h uint64, svc int, used int64) {
	if c.stopped {
		if i, ok := c.remap(svc); ok {
			c.succ.know(h, i, used)
		}
		return
	}
	if c.known == nil {
		c.ring = make([]fleetKnown, 0, KnownMax)
		c.known = make([]int32, 2*KnownMax)
	}
	e := fleetKnown{h: h, used: uint32(used), svc: int32(svc)}
	s, found := c.knownSlot(h)
	if found {
		c.ring[c.known[s]-1] = e
		return
	}
	if len(c.ring) < KnownMax {
		c.ring = append(c.ring, e)
		c.known[s] = int32(len(c.ring))
		return
	}
	old, _ := c.knownSlot(c.ring[c.ringAt].h)
	c.unindex(old)
	c.ring[c.ringAt] = e
	s, _ = c.knownSlot(h) // the removal may have moved the free slot
	c.known[s] = int32(c.ringAt + 1)
	c.ringAt = (c.ringAt + 1) % KnownMax
}

// knownSlot finds h in the ring's index (open addressing, linear probing,
// at most half full): its slot, or the free slot where it would go.
func (c *Client) knownSlot(h uint64) (slot int, found bool) {
	mask := len(c.known) - 1
	for s := int(h) & mask; ; s = (s + 1) & mask {
		switch e := c.known[s]; {
		case e == 0:
			return s, false
		case c.ring[e-1].h == h:
			return s, true
		}
	}
}

// unindex empties slot s of the index, moving back the entries after it
// that their probe would no longer reach.
func (c *Client) unindex(s int) {
	mask := len(c.known) - 1
	c.known[s] = 0
	for j := (s + 1) & mask; c.known[j] != 0; j = (j + 1) & mask {
		home := int(c.ring[c.known[j]-1].h) & mask
		// The entry at j stays when its home lies cyclically in (s, j].
		if (s < j && s < home && home <= j) || (j < s && (s < home || home <= j)) {
			continue
		}
		c.known[s], c.known[j] = c.known[j], 0
		s = j
	}
}

// knows reports whether the key of hash h is recorded.
func (c *Client) knows(h uint64) bool {
	if c.known == nil {
		return false
	}
	_, found := c.knownSlot(h)
	return found
}

// Known is how many keys the worker would place again after a data loss.
func (c *Client) Known() int { return len(c.ring) }

// sawHeader checks an answer's header against what etcd said before: a
// cluster_id that changed, or a revision far below the highest seen, is an
// etcd without the fleet's data. A low revision counts only in the answer to
// a call sent after the highest was seen: answers to calls under way at the
// same time arrive in any order (seen in Envoy, on a fresh etcd: revision 9,
// then 2, from calls sent together), and etcd answered that one before.
func (c *Client) sawHeader(now, sent time.Time, body []byte) {
	h := gjson.Get(bytesString(body), "header") // in place: id is copied when kept
	// etcd 3.4's gateway writes the proto names (cluster_id, measured on
	// 3.4.23); a gateway marshalling proto3 JSON names writes clusterId.
	rev, id := h.Get("revision").Int(), pick(h, "cluster_id", "clusterId").String()
	if id != "" && c.clusterID != "" && id != c.clusterID {
		old := c.clusterID
		c.clusterID, c.maxRev = strings.Clone(id), rev
		c.dataLost(now, "its cluster_id changed from "+old+" to "+id)
		return
	}
	if id != "" && c.clusterID == "" {
		c.clusterID = strings.Clone(id)
	}
	if rev <= 0 {
		return
	}
	if top := c.maxRev; rev*2 < top {
		if sent.Before(c.maxRevAt) {
			return // sent before etcd said top: an older answer, not a loss
		}
		c.maxRev, c.maxRevAt = rev, c.mono
		c.dataLost(now, "its revision went back from "+strconv.FormatInt(top, 10)+" to "+strconv.FormatInt(rev, 10))
		return
	}
	if rev > c.maxRev {
		c.maxRev, c.maxRevAt = rev, c.mono
	}
}

// dataLost queues every known key that is still alive and selectable for
// reconciliation, at most once every fleetResyncEvery: leases and keys are
// gone, so hits of entries used before now ask etcd too (Hit).
func (c *Client) dataLost(now time.Time, why string) {
	c.leases = [2]struct{ slot, id int64 }{}
	c.recovered = now.Unix() + 1
	if !c.resyncAt.IsZero() && c.mono.Sub(c.resyncAt) < fleetResyncEvery {
		return
	}
	c.resyncAt = c.mono
	n := 0
	for _, e := range c.ring {
		if !c.alive(int64(e.used), now) || !c.svcs.Selectable(int(e.svc)) {
			continue
		}
		c.enqueueBudgeted(fleetJob{h: e.h, svc: int(e.svc), stamp: int64(e.used), resync: true})
		n++
	}
	c.counts.Resynced += uint64(n)
	c.out.Logs = append(c.out.Logs, Log{Warn: true, Msg: "hashlb: fleet: etcd on cluster " + c.cluster() +
		" lost its data (" + why + "); the " + itoa(n) + " keys this worker placed are placed again"})
}

// alive reports whether a key used at Unix second used has not expired.
func (c *Client) alive(used int64, now time.Time) bool {
	return Record{Stamp: used}.Alive(now, c.expire)
}

// HandOver gives n, the client of a new configuration of the same plugin,
// what c knows that n would otherwise learn slowly or never: the keys
// queued for reconciliation or refresh, the keys placed (for a resync),
// whether etcd is down, its lease, token and revision, and the create
// budget left. Services are matched by identity (FleetService); a key on a
// service the new configuration lacks is dropped (its local entry fails
// over at its next hit). Nothing is handed over when the two talk to
// another cluster, prefix, expiry or user. Either way c stops its own work:
// its transactions in flight still settle (their answers come to it), and
// the keys they leave to reconcile go to n, but its tick no longer probes,
// grants or syncs.
func (c *Client) HandOver(n *Client) {
	queue, resync, ring, oldest := c.queue.all(), c.budgetQ.all(), c.ring, c.ringAt
	for _, js := range [][]fleetJob{queue, resync} {
		for i := range js {
			js[i].held = false // Stop drops the queued tokens
		}
	}
	c.Stop()
	if c.cfg.Cluster != n.cfg.Cluster || c.prefix != n.prefix || c.expire != n.expire ||
		c.user != n.user || c.password != n.password {
		return
	}
	c.succ = n
	for _, j := range queue {
		c.enqueue(j)
	}
	for _, j := range resync {
		c.enqueueBudgeted(j)
	}
	for i := range ring { // oldest first, so that n forgets them first too
		e := ring[(oldest+i)%len(ring)]
		c.know(e.h, int(e.svc), int64(e.used))
	}
	n.token, n.leases = c.token, c.leases
	n.fails, n.down, n.probeAt, n.recovered = c.fails, c.down, c.probeAt, c.recovered
	n.lastOK, n.maxRev, n.maxRevAt, n.clusterID, n.resyncAt = c.lastOK, c.maxRev, c.maxRevAt, c.clusterID, c.resyncAt
	n.tokens, n.budgetAt = c.tokens, c.budgetAt
	n.wall, n.mono = c.wall, c.mono // n goes on on c's monotonic clock
	n.logged, n.aliveAt = c.logged, c.aliveAt
	for h, d := range c.diverted {
		n.noteDiverted(h, d.id, d.stamp)
	}
	c.diverted = nil
}

// Stop ends c's own work, as HandOver does, when the new configuration
// has no fleet level.
func (c *Client) Stop() {
	for _, q := range []*jobQueue{&c.queue, &c.budgetQ} {
		for q.n > 0 {
			j := q.pop()
			c.drop(&j.held)
		}
	}
	c.stopped, c.queue, c.budgetQ, c.queued, c.ring, c.known = true, jobQueue{}, jobQueue{}, map[uint64]struct{}{}, nil, nil
}

// remap is service i of a stopped client as its successor numbers it.
func (c *Client) remap(i int) (int, bool) {
	if c.succ == nil {
		return 0, false
	}
	return c.succ.svcs.ServiceByKey(c.svcs.FleetService(i))
}
