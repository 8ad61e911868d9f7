package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// The fleet protocol under churn: sequences that once multiplied calls to
// etcd, marked it down while it answered, or lost budget to a clock.

// pendingPath counts the pending calls to path.
func (r *rig) pendingPath(path string) int {
	n := 0
	for _, c := range r.pending {
		if c.Path == path {
			n++
		}
	}
	return n
}

// answerAll answers every pending call (not those the answers lead to),
// counting the calls to each path.
func (r *rig) answerAll() map[string]int {
	n := map[string]int{}
	for range len(r.pending) {
		n[r.answer()]++
	}
	return n
}

// drainCount answers every call, also those the answers lead to, counting
// them by path.
func (r *rig) drainCount() map[string]int {
	n := map[string]int{}
	for len(r.pending) > 0 {
		n[r.answer()]++
	}
	return n
}

// wantOneGrant: what is pending (after what) asks etcd for one lease, and
// once answered etcd holds exactly one.
func (r *rig) wantOneGrant(what string) {
	r.t.Helper()
	if n := r.pendingPath("/v3/lease/grant"); n != 1 {
		r.t.Fatalf("%s sent %d grants, want 1", what, n)
	}
	r.drain()
	if n := len(r.e.leases); n != 1 {
		r.t.Errorf("etcd holds %d leases, want 1", n)
	}
}

func TestFleetChurn(t *testing.T) {
	const auth, grant = "/v3/auth/authenticate", "/v3/lease/grant"
	for _, tt := range []struct {
		name string
		user string
		run  func(t *testing.T, r *rig)
	}{
		{"50 misses before the first token: one authenticate, one grant", "hashlb", func(t *testing.T, r *rig) {
			var ops []uint32
			for i := range 50 {
				ops = append(ops, r.miss("k"+itoa(i), i%3))
			}
			if n := r.pendingPath(auth); n != 1 || len(r.pending) != 1 {
				t.Fatalf("50 misses without a token sent %d authenticates (%d calls), want 1", n, len(r.pending))
			}
			n := r.drainCount()
			if n[auth] != 1 || n[grant] != 1 || n["/v3/kv/txn"] != 50 {
				t.Errorf("calls %v, want 1 authenticate, 1 grant and 50 txns", n)
			}
			for i, op := range ops {
				r.wantSettled(op, i%3, true)
			}
		}},
		{"a token expiring under 20 transactions in flight: one authenticate", "hashlb", func(t *testing.T, r *rig) {
			r.drainMiss("first", 0)
			var ops []uint32
			for i := range 20 {
				ops = append(ops, r.miss("k"+itoa(i), 1))
			}
			r.e.tokens = map[string]bool{} // expired
			r.answerAll()                  // 20 × "invalid auth token"
			if n := r.pendingPath(auth); n != 1 {
				t.Fatalf("20 refused tokens sent %d authenticates, want 1", n)
			}
			r.drain()
			for _, op := range ops {
				r.wantSettled(op, 1, true)
			}
			if r.c.Down() {
				t.Error("etcd marked down after refused tokens")
			}
		}},
		{"50 misses in a slot without a lease: one grant, one lease in etcd", "", func(t *testing.T, r *rig) {
			for i := range 50 {
				r.miss("k"+itoa(i), 0)
			}
			r.wantOneGrant("50 misses")
		}},
		{"etcd loses its leases under 50 misses: one grant again", "", func(t *testing.T, r *rig) {
			r.drainMiss("first", 0)
			for i := range 50 {
				r.miss("k"+itoa(i), 0)
			}
			r.e.leases = map[int64]bool{}
			r.answerAll() // 50 × "lease not found"
			r.wantOneGrant("50 lost leases")
		}},
		{"three syncs answered 'invalid auth token': etcd stays up", "hashlb", func(t *testing.T, r *rig) {
			r.syncsInFlight()
			r.e.tokens = map[string]bool{}
			r.answerAll()
			if r.c.Down() {
				t.Fatalf("etcd marked down while it answers; logs %q", r.logs)
			}
			r.drain()
			for _, k := range []string{"k1", "k2", "k3"} {
				r.wantEtcd(k, "a")
			}
		}},
		{"three syncs answered 'lease not found': etcd stays up", "", func(t *testing.T, r *rig) {
			r.syncsInFlight()
			r.e.leases = map[int64]bool{}
			r.answerAll()
			if r.c.Down() {
				t.Fatalf("etcd marked down while it answers; logs %q", r.logs)
			}
			r.drain()
			r.wantCount("Error", r.c.Counts().Error, 0, "etcd answered every call")
		}},
		{"a grant answered 'invalid auth token' three times: etcd stays up", "hashlb", func(t *testing.T, r *rig) {
			r.drainMiss("first", 0)
			for range 3 {
				r.now = r.now.Add(2 * Slot(10*time.Minute)) // a slot without a lease
				r.e.tokens = map[string]bool{}
				r.miss("k"+itoa(int(r.c.Counts().Created)), 0)
				r.drain()
			}
			if r.c.Down() || r.c.Counts().Error != 0 {
				t.Errorf("down %v, Error %d after refused tokens, want up and 0", r.c.Down(), r.c.Counts().Error)
			}
		}},
		{"the wall clock steps back 30 s: 100 new keys at half the budget are all created", "", func(t *testing.T, r *rig) {
			r.c.cfg.CreatesPerSecond, r.c.budget.rate = 20, 20
			r.drainMiss("first", 0)
			r.now = r.now.Add(-30 * time.Second)
			for i := range 100 {
				r.now = r.now.Add(100 * time.Millisecond)
				r.drainMiss("k"+itoa(i), 0)
			}
			r.wantCount("Throttled", r.c.Counts().Throttled, 0, "")
		}},
		{"the wall clock steps back 30 s while etcd is down: it is probed every second", "", func(t *testing.T, r *rig) {
			r.downEtcd()
			r.now = r.now.Add(-30 * time.Second)
			probes := 0
			for range 10 {
				r.tick(ProbeEvery + time.Millisecond)
				for len(r.pending) > 0 {
					probes++
					r.noAnswer(false)
				}
			}
			if probes < 9 {
				t.Errorf("%d probes in 10 s, want one a second", probes)
			}
		}},
		{"the wall clock steps forward 1 h: the budget holds one second's worth", "", func(t *testing.T, r *rig) {
			r.c.cfg.CreatesPerSecond, r.c.budget.rate = 10, 10
			r.now = r.now.Add(time.Hour)
			for i := range 20 {
				r.drainMiss("k"+itoa(i), 0)
			}
			r.wantCount("Throttled", r.c.Counts().Throttled, 10, "a burst of one second's worth")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 100, tt.user, "pw")
			if tt.user != "" {
				r.e.users = map[string]string{tt.user: "pw"}
			}
			tt.run(t, r)
		})
	}
}

// syncsInFlight places k1..k3, then hits them in a later slot: three
// refresh syncs are pending, the slot's lease granted.
func (r *rig) syncsInFlight() {
	r.t.Helper()
	for _, k := range []string{"k1", "k2", "k3"} {
		r.drainMiss(k, 0)
	}
	r.now = r.now.Add(2 * Slot(10*time.Minute))
	for _, k := range []string{"k1", "k2", "k3"} {
		r.c.Hit(r.now, []byte(k), 0, rigStart.Unix())
		r.take()
	}
	r.tick(0)
	for len(r.pending) > 0 && r.pending[0].Path != "/v3/kv/txn" {
		r.answer() // authenticate, grant
	}
	if n := r.pendingPath("/v3/kv/txn"); n != 3 {
		r.t.Fatalf("%d syncs pending, want 3; logs %q", n, strings.Join(r.logs, "\n"))
	}
}

func TestFleetBudget(t *testing.T) {
	for _, tt := range []struct {
		name    string
		creates int
		run     func(t *testing.T, r *rig)
	}{
		{"a slot boundary with more keys in use than the budget: a new key is created", 5, func(t *testing.T, r *rig) {
			for i := range 10 {
				r.now = r.now.Add(time.Second)
				r.drainMiss("k"+itoa(i), 0)
			}
			r.now = r.now.Add(Slot(10 * time.Minute))
			for i := range 10 {
				r.c.Hit(r.now, []byte("k"+itoa(i)), 0, r.now.Add(-Slot(10*time.Minute)).Unix())
				r.take()
			}
			op := r.miss("new", 1)
			r.drain()
			r.wantSettled(op, 1, true)
			r.wantEtcd("new", "b")
			r.wantCount("Throttled", r.c.Counts().Throttled, 0, "refreshes spend no create")
		}},
		{"a replace whose answer is lost, then reconciled: the token is given back once", 3, func(t *testing.T, r *rig) {
			r.drainMiss("x", 0) // 3 → 2
			r.put("ada", "c", r.now.Add(-time.Hour))
			op := r.miss("ada", 0) // 2 → 1
			r.answer()             // found, stale: given back (2); the replace is sent
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(true) // applied, its answer lost: decided locally, queued
			r.wantSettled(op, 0, false)
			r.tick(0)
			r.drain() // the sync finds ada on a: nothing more to give back
			if want := 2 + 0.2*3; r.c.budget.tokens > want+1e-9 {
				t.Errorf("tokens = %v, want %v: one spent on x, ada's given back once", r.c.budget.tokens, want)
			}
		}},
		{"etcd loses its data under 500 keys placed: they are placed again within the create budget", 50, func(t *testing.T, r *rig) {
			for i := range 500 {
				if i%50 == 0 {
					r.now = r.now.Add(time.Second)
				}
				r.drainMiss("k"+itoa(i), 0)
			}
			r.e.lose()
			r.tick(HeartbeatEvery)
			r.drain()
			if n := len(r.e.kv); n > 50 {
				t.Errorf("etcd holds %d keys at once after the resync began, want at most the budget (50)", n)
			}
			for range 25 { // at half the budget: misses keep the other half
				r.tick(time.Second)
				r.drain()
			}
			if n := len(r.e.kv); n < 500 {
				t.Errorf("etcd holds %d keys 25 s after the loss, want the 500 placed again", n)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newRig(t, tt.creates, "", "")) })
	}
}

// TestFleetHandOverAge: after the ring of known keys wrapped, a hand-over
// keeps its age order: the new client forgets the oldest keys first.
func TestFleetHandOverAge(t *testing.T) {
	r := newRig(t, 100, "", "")
	h := func(i int) uint64 { return lbcore.PersistKeyHash([]byte("k" + itoa(i))) }
	for i := range KnownMax + 100 {
		r.c.know(h(i), 0, r.now.Unix())
	}
	p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: r.c.cfg}
	n := NewClient(p, "/t/", r.svcs, "", "", r.now)
	r.c.HandOver(n)
	for i := range 100 { // n places 100 keys of its own
		n.know(h(-1-i), 0, r.now.Unix())
	}
	for _, i := range []int{KnownMax + 99, KnownMax + 50, 300} {
		if !n.known.has(h(i)) {
			t.Errorf("after the hand-over and 100 new keys, k%d (among the newest kept) is forgotten", i)
		}
	}
	for _, i := range []int{100, 199} {
		if n.known.has(h(i)) {
			t.Errorf("k%d, among the oldest, is still known; want the oldest forgotten first", i)
		}
	}
}

// peer is another proxy's client on r's etcd, with its own view of the
// services.
func (r *rig) peer(off ...int) (*Client, *fakeServices) {
	svcs := newFakeServices(3)
	for _, i := range off {
		svcs.off[i] = true
	}
	p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: r.c.cfg}
	return NewClient(p, "/t/", svcs, "", "", r.now), svcs
}

// on runs f with r driving client c (services svcs), then switches back.
func (r *rig) on(c *Client, svcs *fakeServices, f func()) {
	oc, os := r.c, r.svcs
	r.c, r.svcs = c, svcs
	defer func() { r.c, r.svcs = oc, os }()
	f()
}

func TestFleetDivert(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, r *rig)
	}{
		{"one proxy restarted with a service disabled, then with the fleet's configuration: no key split", func(t *testing.T, r *rig) {
			for i := range 10 { // the fleet places ten keys on c
				r.drainMiss("k"+itoa(i), 2)
			}
			skewed, svcs := r.peer(2)
			r.on(skewed, svcs, func() {
				for i := range 10 {
					op := r.miss("k"+itoa(i), i%2)
					r.drain()
					r.wantSettled(op, i%2, true) // served off c, on its second choice
				}
			})
			for i := range 10 {
				r.wantEtcd("k"+itoa(i), "c") // the record the others serve stays
			}
			restarted, svcs := r.peer()
			r.on(restarted, svcs, func() {
				for i := range 10 {
					op := r.miss("k"+itoa(i), 0)
					r.drain()
					r.wantSettled(op, 2, true)
				}
			})
		}},
		{"one proxy sees a service DOWN for a while: its entries go back to it one tick after it is up", func(t *testing.T, r *rig) {
			r.drainMiss("ada", 2)
			p, svcs := r.peer()
			r.on(p, svcs, func() {
				op := r.miss("ada", 0)
				r.drain()
				r.wantSettled(op, 2, true)
				svcs.off[2] = true // DOWN on this proxy only
				op = r.miss("ada", 1)
				r.drain()
				r.wantSettled(op, 1, true)
				r.tick(time.Second)
				if len(r.remember) != 0 {
					t.Fatalf("remembered %+v while c is down here, want nothing", r.remember)
				}
				delete(svcs.off, 2)
				r.tick(time.Second)
				r.wantRemember("ada", 2)
			})
			r.wantEtcd("ada", "c")
		}},
		{"two proxies that cannot use the fleet's service agree on its second choice", func(t *testing.T, r *rig) {
			r.drainMiss("ada", 2)
			a, sa := r.peer(2)
			b, sb := r.peer(2)
			var opA, opB uint32
			r.on(a, sa, func() { opA = r.miss("ada", 0); r.drain(); r.wantSettled(opA, 0, true) })
			r.on(b, sb, func() { opB = r.miss("ada", 1); r.drain(); r.wantSettled(opB, 0, true) })
			r.wantEtcd("ada", "c")
		}},
		{"a key decided locally while etcd was down, its service then disabled: etcd never holds it", func(t *testing.T, r *rig) {
			r.downEtcd()
			r.miss("ada", 1)
			r.svcs.off[1] = true
			r.tick(ProbeEvery + time.Millisecond)
			r.drain()
			r.tick(time.Second)
			r.drain()
			r.wantEtcd("ada", "")
		}},
		{"a stale hit's service disabled before its refresh: etcd keeps the fleet's", func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.now = r.now.Add(2 * Slot(10*time.Minute))
			r.put("ada", "c", r.now.Add(-time.Hour)) // stale: a refresh would replace it
			r.c.Hit(r.now, []byte("ada"), 0, rigStart.Unix())
			r.take()
			r.svcs.off[0] = true
			r.tick(0)
			r.drain()
			if got := r.e.service(r.key("ada")); got == "a" {
				t.Errorf("etcd holds a for ada, a service not selectable on the proxy that wrote it")
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newRig(t, 100, "", "")) })
	}
}

func TestFleetDataLoss(t *testing.T) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, r *rig)
	}{
		{"a gateway writing clusterId: another cluster is a loss", func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			for i, id := range []string{"1", "2"} {
				r.now = r.now.Add(time.Second)
				r.c.sawHeader(r.now, r.now, []byte(`{"header":{"clusterId":"`+id+`","revision":"`+itoa(100+i)+`"}}`))
			}
			if n := r.c.Counts().Resynced; n != 1 {
				t.Errorf("Resynced = %d after clusterId changed, want 1", n)
			}
		}},
		{"etcd wiped with its cluster_id, written past its revision by others, under a busy worker: the loss is seen", func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.drainMiss("bob", 1)
			r.e.lose()
			r.e.rev = 500 // the other proxies wrote much meanwhile
			for range 8 { // busy: a read of a key others placed every 500 ms, always one in flight
				k := "x" + itoa(int(r.e.rev))
				r.put(k, "c", r.now)
				r.miss(k, 2)
				r.tick(500 * time.Millisecond)
				r.drain()
			}
			if n := r.c.Counts().Resynced; n < 2 {
				t.Errorf("Resynced = %d, want ada and bob (and the keys followed) placed again; logs %q", n, r.logs)
			}
			r.wantEtcd("ada", "a")
			r.wantEtcd("bob", "b")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newRig(t, 100, "", "")) })
	}
}
