package e2e

// Hash persistence (docs/persistence.md) end to end: the module built from
// source runs under hostsim with four workers sharing one shared-data store,
// as the workers of one Envoy process do. Requests carry their persistence
// key in x-client-id; the service is read from the x-hashlb-service and
// x-envoy-original-dst-host request headers and the decision's reason from
// the debug response header x-hashlb-decision.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// TestPersistSameKeyAnyWorker: with persistence a key goes to one service
// whichever worker takes it; round robin alone would send it wherever each
// worker's rotation stands.
func TestPersistSameKeyAnyWorker(t *testing.T) {
	const keys = 200
	tests := []struct {
		name       string
		p          map[string]any
		concurrent bool
		agree      bool
	}{
		{"persistence", persistence(nil), false, true},
		{"persistence, workers concurrent", persistence(nil), true, true},
		{"round robin alone", nil, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := lbHost(t, lbConfig(t, "ROUNDROBIN", tc.p, fourServices()), 4)
			if tc.p == nil {
				offsetRoundRobin(t, h)
			} else {
				desyncWorkers(t, h)
			}
			got := make([][4]persistReply, keys) // key → worker → reply
			run := func(w int) error {
				for i := 0; i < keys; i++ {
					// Each worker walks the keys from its own starting point.
					k := (i + w*keys/4) % keys
					var err error
					if got[k][w], err = roundTrip(h, w, persistReq{id: clientID(k)}); err != nil {
						return err
					}
				}
				return nil
			}
			errs := make([]error, 4)
			if tc.concurrent {
				var wg sync.WaitGroup
				for w := 0; w < 4; w++ {
					wg.Add(1)
					go func() { defer wg.Done(); errs[w] = run(w) }()
				}
				wg.Wait()
			} else {
				for w := 0; w < 4; w++ {
					errs[w] = run(w)
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			disagree := 0
			for k, rs := range got {
				for w := 1; w < 4; w++ {
					if rs[w].service != rs[0].service {
						disagree++
						if tc.agree {
							t.Errorf("key %s: worker 0 → %s, worker %d → %s", clientID(k), rs[0].service, w, rs[w].service)
						}
						break
					}
				}
			}
			if !tc.agree && disagree < keys/2 {
				t.Fatalf("round robin alone: %d of %d keys had workers disagree, want most (else this test proves nothing)", disagree, keys)
			}
			if tc.p == nil {
				return
			}
			// Every key: one miss (first worker to see it), three hits. With
			// concurrent workers a worker may lose the insert race to another;
			// it then serves the stored mapping and counts its own miss.
			m := persistMetrics(h)
			if m["hit"]+m["miss"] != 4*keys || m["miss"] < keys || m["empty_key"] != 3*2 {
				t.Errorf("persistence metrics = %v, want hit+miss = %d, miss ≥ %d, empty_key = 6 (the desync requests)", m, 4*keys, keys)
			}
			if !tc.concurrent && (m["hit"] != 3*keys || m["miss"] != keys) {
				t.Errorf("persistence metrics = %v, want hit %d, miss %d", m, 3*keys, keys)
			}
			if m["cas_giveup"] != 0 {
				t.Errorf("persistence_cas_giveup = %d, want 0", m["cas_giveup"])
			}
			if n := persistMetric(h, "hashlb.decision.persistence"); !tc.concurrent && n != 3*keys {
				t.Errorf("hashlb.decision.persistence = %d, want %d", n, 3*keys)
			}
		})
	}
}

// TestPersistLeastConnectionKeepsClients: LEASTCONNECTION with persistence
// keeps 1,000 clients on their first service even when that service is the
// most loaded, while new clients go to the least loaded. The virtual clock
// does not move, so no tick shares active requests between workers (the
// filter publishes them once a tick): each worker balances on its own, and
// every worker gets the same load.
func TestPersistLeastConnectionKeepsClients(t *testing.T) {
	const clients, fresh = 1000, 300
	h := lbHost(t, lbConfig(t, "LEASTCONNECTION", persistence(nil), fourServices()), 4)
	first := make([]string, clients)
	byService := map[string][]int{}
	for i := range clients {
		rep := mustRoundTrip(t, h, i%4, persistReq{id: clientID(i)})
		if rep.reason != "least_connection" {
			t.Fatalf("first request of %s: reason %s, want least_connection", clientID(i), rep.reason)
		}
		first[i] = rep.service
		byService[rep.service] = append(byService[rep.service], i)
	}
	// Load every worker with 30 open requests on b1 and 15 on b2, made by
	// clients already mapped there (persistence hits).
	load := map[string]int{"b1": 30, "b2": 15}
	var held []*hostsim.Stream
	for svc, per := range load {
		if len(byService[svc]) < 4*per {
			t.Fatalf("only %d clients on %s, need %d to load it", len(byService[svc]), svc, 4*per)
		}
		for k, i := range byService[svc][:4*per] {
			s, got := holdStream(t, h, k%4, persistReq{id: clientID(i)})
			if got != svc {
				t.Fatalf("load request of %s went to %s, want %s", clientID(i), got, svc)
			}
			held = append(held, s)
		}
	}
	// The 1,000 clients again, each from another worker: all stay, b1 and b2
	// included, although least connection alone would now avoid them.
	// (Their hits are counted in the checkMetrics at the end: reading the
	// counters here would tick, and a tick shares the workers' loads, which
	// changes what least connection sees below.)
	for i := range clients {
		rep := mustRoundTrip(t, h, (i+1)%4, persistReq{id: clientID(i)})
		if rep.service != first[i] || rep.reason != "persistence" {
			t.Errorf("%s under load: %s (%s), want %s (persistence)", clientID(i), rep.service, rep.reason, first[i])
		}
	}
	// New clients, held open, fill the least loaded services first: 300 new
	// requests (75 a worker) bring b2, b3 and b4 up to b1's load, so b1
	// gets none, b2 60 and b3, b4 120 each. (The same totals hold whether
	// a worker sees its own active requests or the whole proxy's.)
	got := map[string]int{}
	for j := range fresh {
		s, svc := holdStream(t, h, j%4, persistReq{id: "new-" + strconv.Itoa(j)})
		got[svc]++
		held = append(held, s)
	}
	if want := map[string]int{"b2": 60, "b3": 120, "b4": 120}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("new clients per service = %v, want %v", got, want)
	}
	releaseStreams(t, held)
	checkMetrics(t, h, map[string]int64{"miss": clients + fresh, "hit": 2*clients - clients + 4*(30+15), "empty_key": 0, "cas_giveup": 0})
}

// TestPersistExpiry: an entry idle longer than expire is gone, the method
// chooses again and the new mapping is kept; an entry used within expire
// lives on.
func TestPersistExpiry(t *testing.T) {
	const n = 100
	h := lbHost(t, lbConfig(t, "ROUNDROBIN", persistence(map[string]any{"expire": "10m"}), fourServices()), 4)
	idle := func(i int) persistReq { return persistReq{id: "idle-" + strconv.Itoa(i)} }
	busy := func(i int) persistReq { return persistReq{id: "busy-" + strconv.Itoa(i)} }
	busyFirst := make([]string, n)
	for i := range n {
		mustRoundTrip(t, h, i%4, idle(i))
		busyFirst[i] = mustRoundTrip(t, h, i%4, busy(i)).service
	}
	checkMetrics(t, h, map[string]int64{"miss": 2 * n, "hit": 0, "expired": 0})

	h.Advance(6 * time.Minute) // busy keys used at 6m
	for i := range n {
		if rep := mustRoundTrip(t, h, (i+1)%4, busy(i)); rep.service != busyFirst[i] || rep.reason != "persistence" {
			t.Errorf("%s at 6m: %+v, want %s by persistence", busy(i).id, rep, busyFirst[i])
		}
	}
	h.Advance(5 * time.Minute) // 11m: idle keys idle 11m > 10m, busy keys 5m
	rebuilt := make([]string, n)
	for i := range n {
		rep := mustRoundTrip(t, h, (i+2)%4, idle(i))
		if rep.reason != "round_robin" {
			t.Errorf("%s idle 11m: reason %s, want round_robin (the mapping chosen again)", idle(i).id, rep.reason)
		}
		rebuilt[i] = rep.service
		if rep := mustRoundTrip(t, h, (i+2)%4, busy(i)); rep.service != busyFirst[i] || rep.reason != "persistence" {
			t.Errorf("%s at 11m: %+v, want %s by persistence", busy(i).id, rep, busyFirst[i])
		}
	}
	checkMetrics(t, h, map[string]int64{"miss": 2 * n, "hit": 2 * n, "expired": n})
	for i := range n { // the rebuilt mapping is stored
		if rep := mustRoundTrip(t, h, (i+3)%4, idle(i)); rep.service != rebuilt[i] || rep.reason != "persistence" {
			t.Errorf("%s after rebuild: %+v, want %s by persistence", idle(i).id, rep, rebuilt[i])
		}
	}
	checkMetrics(t, h, map[string]int64{"hit": 3 * n, "expired": n, "cas_giveup": 0})
}

// clientIPs are n distinct client addresses.
func clientIPs(n int) []persistReq {
	rs := make([]persistReq, n)
	for i := range rs {
		rs[i] = persistReq{src: fmt.Sprintf("10.%d.%d.%d:40000", 1+i/62500, i/250%250, 1+i%250)}
	}
	return rs
}

func withDisabled(services []svcDef, name string) []svcDef {
	f := false
	out := append([]svcDef(nil), services...)
	for i := range out {
		if out[i].Name == name {
			out[i].Enabled = &f
		}
	}
	return out
}

// TestPersistDisabledServiceReturns: SOURCEIPHASH with persistence keyed by
// client IP. Disabling a service moves only its keys; when it is enabled
// again they stay where they moved, although the hash alone would send them
// back (persistence wins over hash order).
func TestPersistDisabledServiceReturns(t *testing.T) {
	const n = 400
	clients := clientIPs(n)
	p := persistence(map[string]any{"keys": []string{"${client.ip}"}})
	all := fourServices()
	h := lbHost(t, lbConfig(t, "SOURCEIPHASH", p, all), 4)
	hashOnly := lbHost(t, lbConfig(t, "SOURCEIPHASH", nil, all), 1)

	first := make([]string, n)
	onB2 := 0
	for i, r := range clients {
		rep := mustRoundTrip(t, h, i%4, r)
		want := mustRoundTrip(t, hashOnly, 0, r).service
		if rep.service != want || rep.reason != "hash" {
			t.Fatalf("first request from %s: %+v, want %s by hash", r.src, rep, want)
		}
		first[i] = rep.service
		if rep.service == "b2" {
			onB2++
		}
	}
	if onB2 < n/8 {
		t.Fatalf("only %d of %d clients hash to b2", onB2, n)
	}

	if err := h.Configure(lbConfig(t, "SOURCEIPHASH", p, withDisabled(all, "b2"))); err != nil {
		t.Fatalf("Configure (b2 disabled): %v", err)
	}
	moved := make([]string, n)
	for i, r := range clients {
		rep := mustRoundTrip(t, h, (i+1)%4, r)
		moved[i] = rep.service
		switch {
		case first[i] == "b2" && (rep.service == "b2" || rep.reason != "hash"):
			t.Errorf("%s (was b2) with b2 disabled: %+v, want another service chosen by hash", r.src, rep)
		case first[i] != "b2" && (rep.service != first[i] || rep.reason != "persistence"):
			t.Errorf("%s (was %s) with b2 disabled: %+v, want %s by persistence", r.src, first[i], rep, first[i])
		}
	}

	if err := h.Configure(lbConfig(t, "SOURCEIPHASH", p, all)); err != nil {
		t.Fatalf("Configure (b2 enabled again): %v", err)
	}
	for i, r := range clients {
		rep := mustRoundTrip(t, h, (i+2)%4, r)
		if rep.service != moved[i] || rep.reason != "persistence" {
			t.Errorf("%s after b2 returned: %+v, want %s by persistence", r.src, rep, moved[i])
		}
		if hash := mustRoundTrip(t, hashOnly, 0, r).service; hash != first[i] {
			t.Errorf("%s: hash alone now gives %s, want %s as at first", r.src, hash, first[i])
		}
	}
	checkMetrics(t, h, map[string]int64{"miss": n, "hit": 2*n - int64(onB2), "rechosen": int64(onB2), "cas_giveup": 0})
	if got := persistMetric(h, "hashlb.decision.hash"); got != n+int64(onB2) {
		t.Errorf("hashlb.decision.hash = %d, want %d (first requests and b2's keys once)", got, n+onB2)
	}
}

// TestPersistReloadKeepsEntries: a reload that removes or reorders services
// keeps every entry of the services it keeps (entries name services by
// address, not position); only the removed service's keys are chosen again.
// Shared data survives the reload untouched.
func TestPersistReloadKeepsEntries(t *testing.T) {
	const n = 400
	all := fourServices()
	tests := []struct {
		name     string
		services []svcDef
		gone     string // the removed service, if any
	}{
		{"b3 removed", []svcDef{all[0], all[1], all[3]}, "b3"},
		{"reordered", []svcDef{all[3], all[2], all[1], all[0]}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := persistence(nil)
			h := lbHost(t, lbConfig(t, "ROUNDROBIN", p, all), 4)
			first := make([]string, n)
			for i := range n {
				first[i] = mustRoundTrip(t, h, i%4, persistReq{id: clientID(i)}).service
			}
			keys, bytes := h.SharedData().Len(), h.SharedData().Bytes()
			if err := h.Configure(lbConfig(t, "ROUNDROBIN", p, tc.services)); err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if k, b := h.SharedData().Len(), h.SharedData().Bytes(); k != keys || b != bytes {
				t.Fatalf("shared data after Configure: %d keys, %d bytes; want %d, %d as before", k, b, keys, bytes)
			}
			rechosen := 0
			for i := range n {
				rep := mustRoundTrip(t, h, (i+1)%4, persistReq{id: clientID(i)})
				if first[i] == tc.gone {
					rechosen++
					if rep.service == tc.gone || rep.reason != "round_robin" {
						t.Errorf("%s (was %s, removed): %+v, want another service by round_robin", clientID(i), first[i], rep)
					}
				} else if rep.service != first[i] || rep.reason != "persistence" {
					t.Errorf("%s after reload: %+v, want %s by persistence", clientID(i), rep, first[i])
				}
			}
			if tc.gone != "" && rechosen < n/8 {
				t.Fatalf("only %d clients were on %s", rechosen, tc.gone)
			}
			// A removed service's identity is unknown: its entries read as
			// not selectable and are overwritten, not counted as hits.
			checkMetrics(t, h, map[string]int64{"miss": n, "hit": n - int64(rechosen), "rechosen": int64(rechosen), "cas_giveup": 0})
		})
	}
}

// TestPersistEmptyKey: emptyKey "skip" balances key-less requests without
// persisting them; "shared" (TR7) pins them all to one entry.
func TestPersistEmptyKey(t *testing.T) {
	const n = 40
	tests := []struct {
		emptyKey string
		services int // distinct services the key-less requests reach
		metrics  map[string]int64
	}{
		{"skip", 4, map[string]int64{"empty_key": n, "hit": 0, "miss": 0}},
		{"shared", 1, map[string]int64{"empty_key": n, "hit": n - 1, "miss": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.emptyKey, func(t *testing.T) {
			h := lbHost(t, lbConfig(t, "ROUNDROBIN", persistence(map[string]any{"emptyKey": tc.emptyKey}), fourServices()), 4)
			seen := map[string]int{}
			for i := range n {
				seen[mustRoundTrip(t, h, i%4, persistReq{}).service]++
			}
			if len(seen) != tc.services {
				t.Errorf("key-less requests went to %v, want %d distinct services", seen, tc.services)
			}
			checkMetrics(t, h, tc.metrics)
			if tc.emptyKey != "skip" {
				return
			}
			for _, k := range h.SharedData().Keys() {
				if strings.HasPrefix(k, persistNamespace+"/p/") {
					t.Errorf("shared data has table key %q, want none: skipped keys are not stored", k)
				}
			}
		})
	}
}
