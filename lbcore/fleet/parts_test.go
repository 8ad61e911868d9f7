package fleet

import (
	"strings"
	"testing"
	"time"
)

// The Client's parts, each on its own: the budget, health, roots, the sync
// queue, the known keys, the divert set, the registry and the outbox.

var t0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func TestBudget(t *testing.T) {
	b := newBudget(4, t0)
	for i := range 4 {
		if !b.spend(t0) {
			t.Fatalf("spend %d of a full budget of 4 refused", i+1)
		}
	}
	if b.spend(t0) {
		t.Fatal("a fifth spend within the same instant granted, want the burst of one second's worth")
	}
	if !b.spend(t0.Add(250 * time.Millisecond)) {
		t.Fatal("no token 250 ms later at 4 per second")
	}
	b.refill(t0.Add(time.Hour))
	if b.tokens != 4 {
		t.Fatalf("tokens after an hour = %v, want the burst 4", b.tokens)
	}
	if !b.overHalf(t0.Add(time.Hour)) {
		t.Fatal("a full budget is not over half")
	}
	b.tokens = 2.5
	if b.overHalf(t0.Add(time.Hour)) {
		t.Fatal("2.5 of 4 tokens is over 1 + half, want not")
	}
	// Each token held ends exactly once.
	b = newBudget(4, t0)
	held := [4]bool{}
	for i := range held {
		held[i] = b.spend(t0)
	}
	b.refund(&held[0])
	b.refund(&held[0]) // twice: once
	b.consume(&held[1])
	b.drop(&held[2])
	if l := b.ledger; l.spent != 4 || l.refunded != 1 || l.consumed != 1 || l.dropped != 1 || !held[3] {
		t.Fatalf("ledger %+v, held %v; want 4 spent, 1 refunded, 1 consumed, 1 dropped, 1 held", l, held)
	}
	if b.tokens != 1 {
		t.Fatalf("tokens = %v after one refund of an empty budget, want 1", b.tokens)
	}
}

func TestHealth(t *testing.T) {
	var h health
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Ten calls sent together, all timing out: one failure.
	for range 10 {
		if h.failed(at(200), at(0)) {
			t.Fatal("a burst of calls sent together marked etcd down")
		}
	}
	if h.fails != 1 {
		t.Fatalf("fails = %d after one burst, want 1", h.fails)
	}
	// Calls sent after it fail too: in a row.
	if h.failed(at(400), at(200)) || !h.failed(at(600), at(400)) {
		t.Fatalf("three failures in a row: down %v, fails %d; want down at the third", h.down, h.fails)
	}
	if !h.down || h.probeAt != at(600).Add(ProbeEvery) {
		t.Fatalf("down %v, probe at %v; want down, probed %v later", h.down, h.probeAt, ProbeEvery)
	}
	if h.probeDue(at(1000)) || !h.probeDue(at(1600)) {
		t.Fatal("a down etcd is probed before ProbeEvery, or not after it")
	}
	h.probing = true
	if h.probeDue(at(1600)) {
		t.Fatal("a second probe while one is in flight")
	}
	h.probing = false
	if !h.answered(at(1700)) || h.down || h.fails != 0 || h.recovered != at(1700).Unix()+1 {
		t.Fatalf("an answer to a down etcd: back false, or %+v", h)
	}
	if h.answered(at(1800)) {
		t.Fatal("an answer to an etcd that is up reported it back")
	}
	h.beatAt = at(1800)
	if h.beatDue(at(1800)) || !h.beatDue(at(1800).Add(HeartbeatEvery)) {
		t.Fatal("the heartbeat is due before HeartbeatEvery, or not after it")
	}
	if body := h.beatFor(7); !strings.Contains(string(body), "7") || &h.beatFor(7)[0] != &body[0] {
		t.Fatalf("heartbeat body %q: not of lease 7, or made again for the same lease", body)
	}
}

func TestRoots(t *testing.T) {
	r := roots{user: "u"}
	if !r.needAuth() {
		t.Fatal("a user without a token does not need to authenticate")
	}
	r.token = "tok"
	if r.needAuth() || (&roots{}).needAuth() {
		t.Fatal("a token, or no user, still needs to authenticate")
	}
	r.setLease(10, 100)
	r.setLease(11, 110)
	if r.leaseFor(10) != 100 || r.leaseFor(11) != 110 || r.leaseFor(12) != 0 {
		t.Fatalf("leases %+v: want 100 for slot 10, 110 for 11, none for 12", r.leases)
	}
	r.setLease(12, 120) // replaces slot 10's
	if r.leaseFor(10) != 0 || !r.granted(110) || !r.granted(120) || r.granted(100) || r.granted(0) {
		t.Fatalf("leases %+v after slot 12's grant", r.leases)
	}
	r.authing, r.authEnd = true, t0
	if in, end := r.inFlight(callAuth); !in || end != t0 {
		t.Fatal("the authenticate in flight is not reported")
	}
	if in, _ := r.inFlight(callGrant); in {
		t.Fatal("a grant reported in flight")
	}
	r.wait(callAuth, 1)
	r.wait(callGrant, 2)
	r.wait(callAuth, 3)
	ids := r.waiting(callAuth)
	if len(ids) != 2 || ids[0] != 1 || ids[1] != 3 || len(r.authWait) != 0 || len(r.grantWait) != 1 {
		t.Fatalf("waiting on the authenticate: %v (auth %v, grant %v), want [1 3] and the grant's kept", ids, r.authWait, r.grantWait)
	}
	r.done(ids)
	r.waiting(callAuth) // none: the authenticate's list is now the one given back
	r.wait(callAuth, 4)
	if &r.authWait[0] != &ids[0] {
		t.Fatal("the list given back is not reused")
	}
}

func TestSyncQueue(t *testing.T) {
	s := newSyncQueue()
	if added, _ := s.add(&s.queue, fleetJob{h: 1}); !added {
		t.Fatal("a first key not queued")
	}
	if added, full := s.add(&s.budgetQ, fleetJob{h: 1}); added || full {
		t.Fatal("a key queued twice")
	}
	s.add(&s.budgetQ, fleetJob{h: 2})
	if len(s.budgetQ.jobs) != QueueMax+SyncAtOnce {
		t.Fatalf("the budget queue holds %d jobs at its first key, want it whole (%d)", len(s.budgetQ.jobs), QueueMax+SyncAtOnce)
	}
	if !s.requeue(fleetJob{h: 3}) || s.requeue(fleetJob{h: 2}) {
		t.Fatal("requeue: a new key refused, or a queued one taken")
	}
	if j := s.pop(&s.queue); j.h != 3 {
		t.Fatalf("first of the queue = %d, want the key requeued at its front", j.h)
	}
	if j := s.pop(&s.queue); j.h != 1 || s.len() != 1 {
		t.Fatalf("then %d, %d left; want 1, then 1 left", j.h, s.len())
	}
	if added, _ := s.add(&s.queue, fleetJob{h: 1}); !added {
		t.Fatal("a key popped cannot be queued again")
	}
	for h := uint64(10); s.len() < QueueMax; h++ {
		s.add(&s.queue, fleetJob{h: h})
	}
	if added, full := s.add(&s.queue, fleetJob{h: 1 << 40}); added || !full {
		t.Fatalf("a key past QueueMax: added %v, full %v", added, full)
	}
}

func TestKnownKeys(t *testing.T) {
	var k knownKeys
	if k.has(1) || k.len() != 0 {
		t.Fatal("an empty ring knows a key")
	}
	key := func(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 }
	for i := range KnownMax + 2 {
		k.put(key(i), i%5, int64(i))
	}
	if k.len() != KnownMax || k.has(key(0)) || k.has(key(1)) || !k.has(key(2)) {
		t.Fatalf("past KnownMax: %d keys, the two oldest forgotten %v", k.len(), !k.has(key(0)))
	}
	if old := k.oldestFirst(); old[0].used != 2 || old[len(old)-1].used != KnownMax+1 {
		t.Fatalf("oldest first: from %d to %d, want 2 to %d", old[0].used, old[len(old)-1].used, KnownMax+1)
	}
	k.put(key(5), 4, 99)
	if s, ok := k.slot(key(5)); !ok || k.ring[k.index[s]-1].svc != 4 || k.len() != KnownMax {
		t.Fatal("a key put again is not updated in place")
	}
	// The signs of a data loss.
	var w knownKeys
	if why := w.saw(t0, t0, 100, "a"); why != "" {
		t.Fatalf("first answer: %q", why)
	}
	if why := w.saw(t0.Add(time.Second), t0.Add(-time.Millisecond), 10, "a"); why != "" {
		t.Fatalf("a low revision answering a call sent before the highest was seen: %q, want none", why)
	}
	if why := w.saw(t0.Add(2*time.Second), t0.Add(time.Second), 10, "a"); !strings.Contains(why, "from 100 to 10") {
		t.Fatalf("a revision back to a tenth: %q", why)
	}
	if why := w.saw(t0.Add(3*time.Second), t0.Add(3*time.Second), 11, "b"); !strings.Contains(why, "cluster_id changed from a to b") {
		t.Fatalf("another cluster_id: %q", why)
	}
	if !w.resyncDue(t0) || w.resyncDue(t0.Add(fleetResyncEvery-time.Millisecond)) || !w.resyncDue(t0.Add(fleetResyncEvery)) {
		t.Fatal("resyncs are not one per fleetResyncEvery")
	}
	var d knownKeys // a second loss within fleetResyncEvery is deferred, not dropped
	if !d.lost(t0, "a") || d.lost(t0.Add(time.Second), "b") {
		t.Fatal("the first loss not resynced at once, or the second not deferred")
	}
	if why := d.resyncDeferred(t0.Add(2 * time.Second)); why != "" {
		t.Fatalf("the deferred resync ran within fleetResyncEvery (%q)", why)
	}
	if why := d.resyncDeferred(t0.Add(fleetResyncEvery)); why != "b" {
		t.Fatalf("deferred resync at fleetResyncEvery: %q, want the second loss's", why)
	}
	if why := d.resyncDeferred(t0.Add(3 * fleetResyncEvery)); why != "" {
		t.Fatalf("a deferred resync ran twice (%q)", why)
	}
}

func TestDivertSet(t *testing.T) {
	var s divertSet
	s.note(1, "a", 10)
	s.note(1, "a", 20)
	if d := s[1]; d.id != "a" || d.stamp != 20 {
		t.Fatalf("noted again: %+v, want the newer stamp", d)
	}
	s.note(1, "z", 30) // on another service: the new one
	if s[1].id != "z" {
		t.Fatalf("a noted key on another service: %+v", s[1])
	}
	for h := uint64(2); len(s) < DivertMax; h++ {
		s.note(h, "b", 1)
	}
	s.note(1<<40, "c", 1)
	if _, ok := s[1<<40]; ok || len(s) != DivertMax {
		t.Fatalf("%d keys noted past DivertMax", len(s))
	}
}

func TestRegistryAndOutbox(t *testing.T) {
	r := newRegistry()
	r.lastID = ^uint32(0)
	if id := r.newID(); id != 1 {
		t.Fatalf("the id after the largest = %d, want 1 (never 0)", id)
	}
	o := r.newOp()
	r.freeOp(o)
	if r.newOp() != o {
		t.Fatal("a freed op is not reused")
	}
	cl := r.newCall()
	cl.kind = callTxn
	r.freeCall(cl)
	if got := r.newCall(); got != cl || got.kind != 0 {
		t.Fatal("a freed call is not reused cleared")
	}
	b := newOutbox("/p/")
	first := b.rangeBody(b.fleetKey(1))
	b.log(false, "x")
	b.logOnce(errTimeout, true, "once")
	b.logOnce(errTimeout, true, "once")
	if string(b.altKey(1)) != string(AppendKey(nil, "/p/", 1))+AltSuffix || string(b.prefixKey()) != "/p/" {
		t.Fatal("keys are not the table's")
	}
	out := b.take()
	if len(out.Logs) != 2 || len(first) == 0 || !b.Empty() {
		t.Fatalf("take: %d logs (want 2), outbox empty after it %v", len(out.Logs), b.Empty())
	}
	b.spare = out
	b.take()
	if b.rangeBody(b.fleetKey(2)); &b.bodies[0] != &out.bodies[0] {
		t.Fatal("the bodies given back are not written into")
	}
}
