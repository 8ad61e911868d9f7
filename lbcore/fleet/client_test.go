package fleet

import (
	"cmp"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// fakeServices are services a..z by name; off ones are not selectable.
type fakeServices struct {
	names []string
	off   map[int]bool
}

func newFakeServices(n int) *fakeServices {
	s := &fakeServices{off: map[int]bool{}}
	for i := range n {
		s.names = append(s.names, string(rune('a'+i)))
	}
	return s
}

func (s *fakeServices) ServiceByKey(k string) (int, bool) {
	for i, n := range s.names {
		if n == k {
			return i, true
		}
	}
	return 0, false
}
func (s *fakeServices) FleetService(i int) string { return s.names[i] }
func (s *fakeServices) Selectable(i int) bool     { return !s.off[i] }

// rig drives one Client against a fakeEtcd, collecting what it asks.
type rig struct {
	t        *testing.T
	c        *Client
	e        *fakeEtcd
	svcs     *fakeServices
	now      time.Time
	pending  []Call
	settled  map[uint32]Settled
	remember []Remember
	logs     []string
}

var rigStart = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

func newRig(t *testing.T, creates int, user, password string) *rig {
	p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: &lbcore.Fleet{Cluster: "etcd", Timeout: 200 * time.Millisecond, CreatesPerSecond: creates}}
	r := &rig{t: t, e: newFakeEtcd(), svcs: newFakeServices(3), now: rigStart, settled: map[uint32]Settled{}}
	r.c = NewClient(p, "/t/", r.svcs, user, password, r.now)
	return r
}

func (r *rig) take() {
	out := r.c.Take()
	r.pending = append(r.pending, out.Calls...)
	for _, s := range out.Settled {
		r.settled[s.Op] = s
	}
	r.remember = append(r.remember, out.Remember...)
	for _, l := range out.Logs {
		r.logs = append(r.logs, l.Msg)
	}
}

// miss is a local miss of key with proposal; op 0 means decided at once.
func (r *rig) miss(key string, proposal int) uint32 {
	op, wait := r.c.Miss(r.now, []byte(key), proposal)
	r.take()
	if !wait {
		return 0
	}
	return op
}

// answer lets etcd answer the oldest pending call; fail instead delivers
// no answer; applied (with fail) applies it in etcd first.
func (r *rig) next() Call {
	r.t.Helper()
	if len(r.pending) == 0 {
		r.t.Fatalf("no call pending; logs %q", r.logs)
	}
	c := r.pending[0]
	r.pending = r.pending[1:]
	return c
}

func (r *rig) answer() string {
	c := r.next()
	status, body := r.e.handle(c)
	r.c.Answer(r.now, c.ID, status, body, len(body))
	r.take()
	return c.Path
}

func (r *rig) answerWith(status int, body string) string {
	c := r.next()
	r.c.Answer(r.now, c.ID, status, []byte(body), len(body))
	r.take()
	return c.Path
}

func (r *rig) noAnswer(applied bool) string {
	c := r.next()
	if applied {
		r.e.handle(c)
	}
	r.c.NoAnswer(r.now, c.ID)
	r.take()
	return c.Path
}

// drain answers every call, also those the answers lead to.
func (r *rig) drain() {
	for len(r.pending) > 0 {
		r.answer()
	}
}

func (r *rig) tick(d time.Duration) {
	r.now = r.now.Add(d)
	r.c.Tick(r.now)
	r.take()
}

func (r *rig) key(k string) string { return Key("/t/", []byte(k)) }

// put stores key's record as another proxy would have.
func (r *rig) put(k, svc string, stamp time.Time) {
	r.e.rev++
	r.e.kv[r.key(k)] = fakeKV{value: Record{Stamp: stamp.Unix(), Service: svc}.String(), create: r.e.rev, mod: r.e.rev}
}

func (r *rig) wantSettled(op uint32, svc int, fleet bool) {
	r.t.Helper()
	s, ok := r.settled[op]
	if !ok || s.Service != svc || s.Fleet != fleet {
		r.t.Fatalf("transaction %d settled %+v (%v), want service %d, fleet %v; logs %q", op, s, ok, svc, fleet, r.logs)
	}
}

// wantCount checks the client's counter name, got (from r.c.Counts()),
// against want; why, when given, says what the figure means.
func (r *rig) wantCount(name string, got, want uint64, why string) {
	r.t.Helper()
	if got != want {
		if why != "" {
			why = " (" + why + ")"
		}
		r.t.Errorf("%s = %d, want %d%s", name, got, want, why)
	}
}

func (r *rig) wantEtcd(k, svc string) {
	r.t.Helper()
	if got := r.e.service(r.key(k)); got != svc {
		r.t.Fatalf("etcd holds %q for %s, want %q", got, k, svc)
	}
}

func (r *rig) wantRemember(k string, svc int) {
	r.t.Helper()
	for _, m := range r.remember {
		if m.Hash == lbcore.PersistKeyHash([]byte(k)) && m.Service == svc {
			return
		}
	}
	r.t.Fatalf("local entry of %s not switched to %d; remembered %+v", k, svc, r.remember)
}

// downEtcd makes three misses fail, so that etcd is down.
func (r *rig) downEtcd() {
	r.t.Helper()
	for _, k := range []string{"f1", "f2", "f3"} {
		r.miss(k, 0)
		for len(r.pending) > 0 {
			r.noAnswer(false)
		}
	}
	if !r.c.Down() {
		r.t.Fatalf("after 3 failed misses etcd is not down; logs %q", r.logs)
	}
}

// TestFleetClientFaults drives the protocol through each fault sequence of
// issue 19 without a host.
func TestFleetClientFaults(t *testing.T) {
	for _, tt := range []struct {
		name    string
		creates int // the create budget; 0 is 100
		run     func(t *testing.T, r *rig)
	}{
		{"first writer: lease, create, the proposal wins", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			if p := r.answer(); p != "/v3/lease/grant" {
				t.Fatalf("first call %s, want the lease grant", p)
			}
			r.answer()
			r.wantSettled(op, 1, true)
			r.wantEtcd("ada", "b")
			r.wantCount("Created", r.c.Counts().Created, 1, "")
		}},
		{"another proxy was first: its service wins", 0, func(t *testing.T, r *rig) {
			r.put("ada", "c", r.now)
			op := r.miss("ada", 0)
			r.drain()
			r.wantSettled(op, 2, true)
		}},
		{"requests for one key share one transaction", 0, func(t *testing.T, r *rig) {
			a, b := r.miss("ada", 0), r.miss("ada", 1)
			if a != b || len(r.pending) != 1 {
				t.Fatalf("two misses of one key: ops %d, %d with %d calls, want one transaction", a, b, len(r.pending))
			}
		}},
		{"a stale entry is replaced on its mod_revision", 0, func(t *testing.T, r *rig) {
			r.put("ada", "c", r.now.Add(-time.Hour))
			op := r.miss("ada", 0)
			r.drain()
			r.wantSettled(op, 0, true)
			r.wantEtcd("ada", "a")
			r.wantCount("Replaced", r.c.Counts().Replaced, 1, "")
		}},
		{"an entry on a service not selectable here: the second choice is served, the record kept", 0, func(t *testing.T, r *rig) {
			r.svcs.off[2] = true
			r.put("ada", "c", r.now)
			op := r.miss("ada", 1)
			r.drain()
			r.wantSettled(op, 1, true)
			r.wantEtcd("ada", "c")
			if got := r.e.service(r.key("ada") + AltSuffix); got != "b" {
				t.Errorf("the second choice of ada is %q, want b", got)
			}
		}},
		{"timeout: decided with the proposal, reconciled from the tick (applied: kept)", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.answer() // lease
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(true) // applied by etcd, answer lost
			r.wantSettled(op, 1, false)
			r.wantCount("Timeout", r.c.Counts().Timeout, 1, "")
			r.tick(time.Second)
			r.drain()
			r.wantEtcd("ada", "b")
			if len(r.remember) != 0 {
				t.Errorf("the applied create named the proposal; remembered %+v, want nothing", r.remember)
			}
		}},
		{"timeout, another proxy placed the key: the local entry follows", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.answer()
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(false)
			r.wantSettled(op, 1, false)
			r.put("ada", "c", r.now)
			r.tick(time.Second)
			r.drain()
			r.wantRemember("ada", 2)
			r.wantEtcd("ada", "c")
			r.wantCount("Followed", r.c.Counts().Followed, 1, "")
		}},
		{"etcd down: misses decided at once, queued; the tick probe ends it and reconciles", 0, func(t *testing.T, r *rig) {
			r.downEtcd()
			if !strings.Contains(strings.Join(r.logs, "\n"), "failed 3 times in a row") {
				t.Errorf("logs %q, want the down line", r.logs)
			}
			if op := r.miss("bob", 2); op != 0 || len(r.pending) != 0 {
				t.Fatalf("a miss while down: op %d with %d calls, want decided at once", op, len(r.pending))
			}
			r.tick(500 * time.Millisecond)
			if len(r.pending) != 0 {
				t.Fatalf("probe sent before ProbeEvery: %+v", r.pending)
			}
			r.tick(600 * time.Millisecond)
			if p := r.answer(); p != "/v3/kv/range" {
				t.Fatalf("probe %s, want a range", p)
			}
			if r.c.Down() {
				t.Fatal("etcd still down after the probe's answer")
			}
			r.drain()
			r.wantEtcd("bob", "c")
			for _, k := range []string{"f1", "f2", "f3"} {
				r.wantEtcd(k, "a")
			}
		}},
		{"etcd down as Envoy reports it (its own 503 and 504, not etcd's JSON): no answer, the keys outlive the outage", 0, func(t *testing.T, r *rig) {
			// What Envoy's async client answers a callout to a dead etcd
			// (measured in Envoy 1.36.4 and 1.40.0, docs/envoy-host.md#http-callouts).
			refused := "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure"
			for _, k := range []string{"f1", "f2", "f3"} {
				r.miss(k, 0)
				for len(r.pending) > 0 {
					r.answerWith(503, refused)
				}
			}
			if !r.c.Down() {
				t.Fatalf("after 3 misses answered by Envoy's 503 etcd is not down; logs %q", r.logs)
			}
			for range 3 * fleetMaxTries { // a long outage: probes answered by Envoy alone
				r.tick(ProbeEvery + time.Millisecond)
				for len(r.pending) > 0 {
					r.answerWith(504, "upstream request timeout")
				}
			}
			if !r.c.Down() {
				t.Fatal("etcd up after probes that only Envoy answered")
			}
			r.tick(ProbeEvery + time.Millisecond)
			r.drain()
			for _, k := range []string{"f1", "f2", "f3"} {
				r.wantEtcd(k, "a")
			}
			if n := r.c.Counts().Timeout; n != 0 {
				// Envoy's 503s came before any deadline: failures, not timeouts.
				t.Logf("Timeout = %d", n)
			}
		}},
		{"etcd dead behind Envoy (its own 503s): no answer, logged as such; the key reaches etcd when it is back", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.answer() // lease
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(false) // the create times out: decided locally, queued
			r.wantSettled(op, 1, false)
			// etcd is gone: every call is answered by Envoy itself until it
			// is marked down, and its probes after that.
			for i := 0; i < 6; i++ {
				r.tick(ProbeEvery + time.Millisecond)
				for len(r.pending) > 0 {
					r.answerWith(503, "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure")
				}
			}
			if !r.c.Down() {
				t.Fatalf("etcd not down after calls only Envoy answered; logs %q", r.logs)
			}
			// The operator reads that etcd did not answer, not that it
			// answered something else than JSON.
			if logs := strings.Join(r.logs, "\n"); !strings.Contains(logs, string(errNoAnswer)) || strings.Contains(logs, "not JSON") {
				t.Errorf("logs %q, want etcd's failures logged as %q", r.logs, errNoAnswer)
			}
			r.tick(ProbeEvery + time.Millisecond)
			r.drain() // etcd is back
			r.tick(time.Second)
			r.drain()
			r.wantEtcd("ada", "b")
		}},
		{"a sync refused by etcd's elections past fleetMaxTries: kept, it follows the fleet once etcd decides", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.answer() // lease
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(false) // decided locally, queued
			r.wantSettled(op, 1, false)
			r.put("ada", "c", r.now) // another proxy placed it meanwhile
			// A member removed and added back, leaders elected: etcd
			// refuses the sync, with its own JSON, tick after tick, while
			// other calls (the misses of other keys) go through.
			refusals := 0
			for i, msg := range []string{"etcdserver: no leader", "etcdserver: leader changed", "etcdserver: request timed out"} {
				for k := range fleetMaxTries {
					r.tick(time.Second)
					for len(r.pending) > 0 {
						if p := r.answerWith(503, `{"error":"`+msg+`","code":14,"message":"`+msg+`"}`); p == "/v3/kv/txn" {
							refusals++
						}
					}
					r.drainMiss("other"+itoa(i*fleetMaxTries+k), 0)
				}
			}
			if refusals < 2*fleetMaxTries {
				t.Fatalf("the sync was refused %d times, want at least %d", refusals, 2*fleetMaxTries)
			}
			r.tick(time.Second)
			r.drain() // etcd decides again
			r.wantRemember("ada", 2)
			r.wantEtcd("ada", "c")
		}},
		{"a sync answered with what no retry changes (not etcd's answer) is dropped after fleetMaxTries", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.answer() // lease
			r.now = r.now.Add(200 * time.Millisecond)
			r.noAnswer(false)
			r.wantSettled(op, 1, false)
			syncs := 0
			for range 3 * fleetMaxTries {
				r.tick(time.Second)
				for len(r.pending) > 0 {
					if p := r.answerWith(200, `{}`); p == "/v3/kv/txn" {
						syncs++
					}
				}
			}
			if syncs != fleetMaxTries {
				t.Errorf("a sync answered {} was sent %d times, want %d", syncs, fleetMaxTries)
			}
		}},
		{"a refresh that loses follows the winner", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 0)
			r.drain()
			r.wantSettled(op, 0, true)
			r.now = r.now.Add(2 * Slot(10*time.Minute))
			r.c.Hit(r.now, []byte("ada"), 0, rigStart.Unix())
			r.tick(0)
			if len(r.pending) > 1 && r.pending[0].Path == "/v3/kv/range" {
				r.answer() // the heartbeat (no lease in this slot or the last: a read)
			}
			if p := r.answer(); p != "/v3/lease/grant" {
				t.Fatalf("first call of a new slot %s, want its lease", p)
			}
			r.answer()               // create-if-absent: the entry, stamped in an older slot
			r.put("ada", "c", r.now) // another proxy moves the key meanwhile
			r.answer()               // the replace loses: the range names c
			r.wantRemember("ada", 2)
		}},
		{"lease not found on a miss: granted again, retried", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.e.lose()
			op := r.miss("bob", 1)
			r.drain()
			r.wantSettled(op, 1, true)
			r.wantEtcd("bob", "b")
		}},
		{"lease not found on a sync: granted again, and hits resync", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.e.lose()
			r.now = r.now.Add(2 * Slot(10*time.Minute))
			r.c.Hit(r.now, []byte("ada"), 0, rigStart.Unix())
			r.tick(0)
			r.drain()
			r.wantEtcd("ada", "a")
		}},
		{"over the create budget: read, decided locally, created from the tick once the budget allows", 2, func(t *testing.T, r *rig) {
			r.drainMiss("k1", 0)
			r.drainMiss("k2", 0)
			op := r.miss("k3", 1)
			if p := r.answer(); p != "/v3/kv/range" {
				t.Fatalf("third new key within a second: %s, want a read", p)
			}
			r.wantSettled(op, 1, false)
			r.wantEtcd("k3", "")
			r.wantCount("Throttled", r.c.Counts().Throttled, 1, "")
			r.tick(time.Second)
			r.drain()
			r.wantEtcd("k3", "b") // queued: created within the budget
			r.put("k4", "c", r.now)
			r.drainMiss("k5", 0)
			r.drainMiss("k6", 0)
			op = r.miss("k4", 0) // over budget, but etcd has it: followed
			r.drain()
			r.wantSettled(op, 2, true)
		}},
		{"recovery: another proxy placed the key meanwhile: the hit follows", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.downEtcd()
			r.put("ada", "c", r.now)
			r.tick(1100 * time.Millisecond)
			r.drain()
			op, wait := r.c.Hit(r.now.Add(time.Second), []byte("ada"), 0, rigStart.Unix())
			r.take()
			r.drain()
			if !wait {
				t.Fatal("first hit after the recovery served at once")
			}
			r.wantSettled(op, 2, true)
		}},
		{"keys that exist give their create back", 2, func(t *testing.T, r *rig) {
			for _, k := range []string{"old1", "old2", "old3"} {
				r.put(k, "c", r.now)
				r.drainMiss(k, 0)
			}
			op := r.miss("new", 1)
			r.drain()
			r.wantSettled(op, 1, true)
			r.wantEtcd("new", "b")
		}},
		{"the caller reset: settled locally, reconciled", 0, func(t *testing.T, r *rig) {
			op := r.miss("ada", 1)
			r.c.Abandon(r.now, op)
			r.take()
			r.wantSettled(op, 1, false)
			r.pending = nil // the answer will never come
			r.tick(time.Second)
			r.tick(3 * time.Second) // the lost call is given up
			r.drain()
			r.wantEtcd("ada", "b")
		}},
		{"answers nested 10^4 deep or 1 MiB: failed calls, logged once", 0, func(t *testing.T, r *rig) {
			for _, body := range []string{strings.Repeat("[", 10000), strings.Repeat(`{"a":`, 10000), strings.Repeat(" ", 1<<20)} {
				op := r.miss("k"+itoa(len(body)), 0)
				r.answerWith(200, body)
				r.wantSettled(op, 0, false)
			}
			n := 0
			for _, l := range r.logs {
				if strings.Contains(l, "refused unread") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d refusal lines, want 1; logs %q", n, r.logs)
			}
		}},
		{"queue full: counted", 0, func(t *testing.T, r *rig) {
			r.downEtcd()
			for i := range QueueMax + 10 {
				r.now = r.now.Add(time.Second / 50) // within the create budget
				r.miss("q"+itoa(i), 0)
			}
			if n := r.c.Counts().QueueFull; n == 0 {
				t.Errorf("QueueFull = 0 after %d keys queued while down, want the overflow counted", QueueMax+10)
			}
		}},
		{"recovery: the first hit of a key used before it asks etcd", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.downEtcd()
			r.e.lose()
			r.tick(1100 * time.Millisecond)
			r.drain() // probe, then the queued f1..f3
			r.now = r.now.Add(time.Second)
			op, wait := r.c.Hit(r.now, []byte("ada"), 0, rigStart.Unix())
			if !wait {
				t.Fatal("the first hit after a recovery of a key used before it: served at once, want it to wait for the fleet")
			}
			r.take()
			r.drain()
			r.wantSettled(op, 0, true)
			r.wantEtcd("ada", "a")
		}},
		{"etcd loses its data, the worker only has hits: its revision went back, every key placed is placed again", 0, func(t *testing.T, r *rig) {
			for i, k := range []string{"ada", "bob", "cy"} {
				r.drainMiss(k, i)
			}
			r.e.lose()
			r.tick(HeartbeatEvery)
			if p := r.answer(); p != "/v3/lease/timetolive" {
				t.Fatalf("the idle worker's tick sent %s, want the heartbeat /v3/lease/timetolive", p)
			}
			r.drain()
			for i, k := range []string{"ada", "bob", "cy"} {
				r.wantEtcd(k, r.svcs.names[i])
			}
			r.wantCount("Resynced", r.c.Counts().Resynced, 3, "")
			if !strings.Contains(strings.Join(r.logs, "\n"), "lost its data (its revision went back") {
				t.Errorf("logs %q, want the data-loss line", r.logs)
			}
		}},
		{"etcd loses its data, another proxy places a key first: the heartbeat finds the lease gone, the entry follows", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.drainMiss("bob", 1)
			r.e.lose()
			r.put("ada", "c", r.now)
			r.e.rev = 50 // the others wrote much meanwhile: the revision does not show the loss
			r.tick(HeartbeatEvery)
			r.drain()
			r.wantRemember("ada", 2)
			r.wantEtcd("ada", "c")
			r.wantEtcd("bob", "b")
			if !strings.Contains(strings.Join(r.logs, "\n"), "does not know the lease") {
				t.Errorf("logs %q, want the lost-lease line", r.logs)
			}
		}},
		{"one heartbeat per HeartbeatEvery", 0, func(t *testing.T, r *rig) {
			r.drainMiss("ada", 0)
			r.tick(HeartbeatEvery / 2)
			if len(r.pending) != 0 {
				t.Fatalf("tick %v after an answer sent %d calls, want none", HeartbeatEvery/2, len(r.pending))
			}
			r.tick(HeartbeatEvery / 2)
			r.answer()
			r.tick(time.Second)
			if len(r.pending) != 0 {
				t.Fatalf("tick a second after the heartbeat sent %d calls, want none", len(r.pending))
			}
			if n := r.c.Counts().Resynced; n != 0 {
				t.Errorf("Resynced = %d with etcd whole, want 0", n)
			}
		}},
		{"a resync ignores keys expired or on a service no longer selectable", 0, func(t *testing.T, r *rig) {
			r.drainMiss("old", 0)
			r.now = r.now.Add(11*time.Minute + Slot(10*time.Minute))
			r.drainMiss("ada", 1)
			r.drainMiss("bob", 2)
			r.svcs.off[2] = true
			r.e.lose()
			r.tick(HeartbeatEvery)
			r.drain()
			r.wantCount("Resynced", r.c.Counts().Resynced, 1, "ada; old expired, bob's service is down")
			r.wantEtcd("ada", "b")
			r.wantEtcd("old", "")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newRig(t, cmp.Or(tt.creates, 100), "", "")) })
	}
}

// drainMiss is a miss answered in full.
func (r *rig) drainMiss(k string, proposal int) {
	r.t.Helper()
	op := r.miss(k, proposal)
	r.drain()
	if _, ok := r.settled[op]; !ok {
		r.t.Fatalf("miss of %s not settled", k)
	}
}

// TestFleetClientAuth: with a user, the client authenticates first and
// sends the token; a token etcd refuses is renewed; a wrong password is one
// log line and a count, and the password is in no line.
func TestFleetClientAuth(t *testing.T) {
	for _, tt := range []struct {
		name     string
		password string
		ok       bool
	}{
		{"right password", "s3cret\"pw", true},
		{"wrong password", "nope-nope", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 100, "hashlb", tt.password)
			r.e.users = map[string]string{"hashlb": "s3cret\"pw"}
			op := r.miss("ada", 1)
			if p := r.answer(); p != "/v3/auth/authenticate" {
				t.Fatalf("first call %s, want authenticate", p)
			}
			if !tt.ok {
				r.wantSettled(op, 1, false)
				for i := range 4 {
					r.miss("k"+itoa(i), 0)
					r.drain()
				}
				r.tick(2 * time.Second)
				r.drain()
				lines := 0
				for _, l := range r.logs {
					if strings.Contains(l, tt.password) {
						t.Errorf("log line %q shows the password", l)
					}
					if strings.Contains(l, "refused the user") {
						lines++
					}
				}
				if lines != 1 || r.c.Counts().Auth == 0 {
					t.Errorf("%d log lines about the password and Auth = %d, want 1 and > 0; logs %q", lines, r.c.Counts().Auth, r.logs)
				}
				return
			}
			r.drain()
			r.wantSettled(op, 1, true)
			r.wantEtcd("ada", "b")
			r.e.tokens = map[string]bool{} // etcd restarted: the token is gone
			op = r.miss("bob", 2)
			r.drain()
			r.wantSettled(op, 2, true)
			r.wantEtcd("bob", "c")
			for _, l := range r.logs {
				if strings.Contains(l, tt.password) || strings.Contains(l, "tok.") {
					t.Errorf("log line %q shows a secret", l)
				}
			}
		})
	}
}

// TestFleetDataLossSignals: the answers that show an etcd without the
// fleet's data, and those that do not.
func TestFleetDataLossSignals(t *testing.T) {
	hdr := func(cluster string, rev int) []byte {
		return []byte(`{"header":{"cluster_id":"` + cluster + `","revision":"` + itoa(rev) + `"}}`)
	}
	for _, tt := range []struct {
		name    string
		answers [][]byte
		lost    bool
		// sentEarly: the last answer's call was sent before the first
		// answer came (calls under way together).
		sentEarly bool
	}{
		{"the revision grows", [][]byte{hdr("1", 100), hdr("1", 150)}, false, false},
		{"answers overtake each other", [][]byte{hdr("1", 100), hdr("1", 97)}, false, false},
		{"the revision restarts", [][]byte{hdr("1", 100), hdr("1", 3)}, true, false},
		{"a fresh etcd's answers overtake each other", [][]byte{hdr("1", 9), hdr("1", 2)}, false, true},
		{"a fresh etcd restarts", [][]byte{hdr("1", 9), hdr("1", 2)}, true, false},
		{"another cluster", [][]byte{hdr("1", 100), hdr("2", 400)}, true, false},
		{"no header", [][]byte{hdr("1", 100), []byte(`{"ID":"5"}`)}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 100, "", "")
			r.drainMiss("ada", 0)
			start := r.now
			for i, a := range tt.answers {
				r.now = r.now.Add(time.Second)
				r.c.clock(r.now)
				sent := r.now
				if tt.sentEarly && i == len(tt.answers)-1 {
					sent = start
				}
				r.c.sawHeader(r.now, sent, a)
			}
			r.take()
			if lost := r.c.Counts().Resynced == 1; lost != tt.lost {
				t.Errorf("after headers %q: resynced %v, want %v; logs %q", tt.answers, lost, tt.lost, r.logs)
			}
		})
	}
}

// TestFleetKnownBounded: a worker keeps the KnownMax keys it placed
// last, and forgets the oldest.
func TestFleetKnownBounded(t *testing.T) {
	r := newRig(t, 100, "", "")
	h := func(k string) uint64 { return lbcore.PersistKeyHash([]byte(k)) }
	for i := range KnownMax + 10 {
		r.c.know(h("k"+itoa(i)), 0, r.now.Unix())
	}
	if n := r.c.Known(); n != KnownMax {
		t.Errorf("Known() = %d, want %d", n, KnownMax)
	}
	if r.c.known.has(h("k9")) {
		t.Error("k9, among the oldest, is still known")
	}
	if !r.c.known.has(h("k10")) {
		t.Error("k10 is forgotten; want only the 10 oldest gone")
	}
}

// TestFleetKnownIndex: the ring's index finds exactly the keys a map
// would hold, through a churn that wraps the ring several times, with
// hashes chosen to collide in the index's low bits (long probe runs,
// wrapping at its end) and refreshed keys.
func TestFleetKnownIndex(t *testing.T) {
	r := newRig(t, 100, "", "")
	rng := rand.New(rand.NewPCG(1, 2))
	mask := uint64(2*KnownMax - 1)
	var order []uint64 // keys in the order they were first recorded, as the ring forgets them
	want := map[uint64]int{}
	for i := range 5 * KnownMax {
		var h uint64
		switch {
		case i%7 == 0 && len(order) > 0: // a refresh of a known key
			h = order[len(order)-1-rng.IntN(min(len(order), KnownMax))]
		case i%3 == 0: // home slots near the index's end and start
			h = rng.Uint64()&^mask | (mask - uint64(rng.IntN(8)))
		case i%3 == 1:
			h = rng.Uint64()&^mask | uint64(rng.IntN(8))
		default:
			h = rng.Uint64()
		}
		svc := rng.IntN(5)
		if _, ok := want[h]; !ok {
			if len(want) == KnownMax {
				oldest := order[len(order)-KnownMax]
				delete(want, oldest)
			}
			order = append(order, h)
		}
		want[h] = svc
		r.c.know(h, svc, r.now.Unix())
	}
	if len(r.c.known.ring) != len(want) {
		t.Fatalf("the ring holds %d keys, want %d", len(r.c.known.ring), len(want))
	}
	for h, svc := range want {
		s, found := r.c.known.slot(h)
		if !found || int(r.c.known.ring[r.c.known.index[s]-1].svc) != svc {
			t.Fatalf("key %#x: found %v, want it on service %d", h, found, svc)
		}
	}
	for _, e := range r.c.known.ring {
		if _, ok := want[e.h]; !ok {
			t.Fatalf("the ring holds %#x, which was forgotten", e.h)
		}
	}
	n := 0
	for _, e := range r.c.known.index {
		if e != 0 {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("the index has %d entries, want %d", n, len(want))
	}
}

// TestFleetHandOver: a new configuration's client takes over what the old
// one queued while etcd was down, by service identity, and the old one's
// tick sends nothing more; with another prefix nothing is handed over.
func TestFleetHandOver(t *testing.T) {
	for _, tt := range []struct {
		name   string
		prefix string
		want   map[string]string // etcd's records after the new client reconciled
	}{
		{"same fleet: the queue moves, services by identity", "/t/", map[string]string{"ada": "b", "bob": "c"}},
		{"another prefix: nothing moves", "/other/", map[string]string{"ada": "", "bob": ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 100, "", "")
			r.downEtcd()
			r.miss("ada", 1) // b
			r.miss("bob", 2) // c
			r.miss("cy", 0)  // a: gone from the new configuration
			if q := r.c.Queued(); q != 6 {
				t.Fatalf("queued %d keys while etcd was down, want 6", q)
			}
			// The new configuration drops a and puts c before b.
			svcs := &fakeServices{names: []string{"c", "b", "d"}, off: map[int]bool{}}
			p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: &lbcore.Fleet{Cluster: "etcd", Timeout: 200 * time.Millisecond, CreatesPerSecond: 100}}
			n := NewClient(p, tt.prefix, svcs, "", "", r.now)
			r.c.HandOver(n)
			old := r.c
			r.c, r.svcs = n, svcs
			old.Tick(r.now.Add(5 * time.Second))
			if out := old.Take(); len(out.Calls) != 0 {
				t.Errorf("the old client's tick sent %d calls after the hand-over, want none", len(out.Calls))
			}
			if tt.prefix == "/t/" && !n.Down() {
				t.Error("the new client does not know etcd is down")
			}
			r.tick(ProbeEvery)
			r.drain()
			r.tick(time.Second)
			r.drain()
			for k, svc := range tt.want {
				r.wantEtcd(k, svc)
			}
			r.wantEtcd("cy", "")
		})
	}
}

// TestFleetHandOverSyncsInFlight: a key decided locally while etcd was down
// whose sync is in flight when a new configuration takes over is reconciled
// by the new client. The host deletes the old root context once its last
// stream ends and cancels its calls (Envoy; hostsim drops their answers):
// the old client never learns how its syncs went, so the new one sends them
// again.
func TestFleetHandOverSyncsInFlight(t *testing.T) {
	r := newRig(t, 100, "", "")
	r.downEtcd()
	r.miss("ada", 1) // decided locally on b, queued
	enc := base64.StdEncoding.EncodeToString([]byte(r.key("ada")))
	r.tick(ProbeEvery)
	for len(r.pending) > 0 && !strings.Contains(string(r.pending[0].Body), enc) {
		r.answer() // the probe, the lease grant, the other keys' syncs
	}
	if len(r.pending) == 0 {
		t.Fatalf("no sync of ada sent once etcd answered; logs %q", r.logs)
	}
	p := &lbcore.Persistence{Expire: 10 * time.Minute, Fleet: &lbcore.Fleet{Cluster: "etcd", Timeout: 200 * time.Millisecond, CreatesPerSecond: 100}}
	n := NewClient(p, "/t/", r.svcs, "", "", r.now)
	r.c.HandOver(n)
	r.pending = nil // the old root context is gone: its calls are never answered
	r.c = n
	r.tick(time.Second)
	r.drain()
	r.wantEtcd("ada", "b")
}

// TestFleetSyncRests: a sync etcd did not answer is retried at the next
// tick, not at once: the queue of a worker goes at the tick's pace while
// etcd is slow, instead of keeping it busy with retries that time out again
// and mark it down (burst by burst) for the new keys too.
func TestFleetSyncRests(t *testing.T) {
	r := newRig(t, 100, "", "")
	r.c.Miss(r.now, []byte("k"), 1)
	r.take()
	r.noAnswer(false) // the miss's create: decided locally, its key queued
	r.tick(time.Second)
	for len(r.pending) > 0 && !strings.Contains(string(r.pending[0].Body), base64.StdEncoding.EncodeToString([]byte(r.key("k")))) {
		r.answer() // the lease grant
	}
	if len(r.pending) == 0 {
		t.Fatalf("no sync of k sent from the tick; logs %q", r.logs)
	}
	r.noAnswer(false)
	if len(r.pending) != 0 {
		t.Fatalf("a sync etcd did not answer was sent again at once (%s), want it at the next tick", r.pending[0].Path)
	}
	r.tick(time.Second)
	if len(r.pending) == 0 {
		t.Fatal("the sync was not sent again at the next tick")
	}
	r.drain()
	r.wantEtcd("k", "b")
}
