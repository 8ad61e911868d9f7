package e2e

// Hash persistence (docs/persistence.md, issue 4) end to end: the module built from
// source runs under hostsim with four workers sharing one shared-data store,
// as the workers of one Envoy process do. Requests carry their persistence
// key in x-client-id; the service is read from the x-hashlb-service and
// x-envoy-original-dst-host request headers and the decision's reason from
// the debug response header x-hashlb-decision.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// persistRootID is the plugin_root_id of the hosts below; the module keeps
// its table under "hashlb/" + root id.
const persistRootID = "hashlb"

var persistNamespace = "hashlb/" + persistRootID

// svcDef is one service of a test configuration.
type svcDef struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Enabled *bool  `json:"enabled,omitempty"`
}

// fourServices are b1…b4 on 10.0.0.11…14:8080.
func fourServices() []svcDef {
	var s []svcDef
	for i := 1; i <= 4; i++ {
		s = append(s, svcDef{Name: "b" + strconv.Itoa(i), Address: fmt.Sprintf("10.0.0.1%d:8080", i)})
	}
	return s
}

// persistence is the usual persistence block: the x-client-id header as the
// key; extra fields (tableSize, expire, emptyKey, keys) override.
func persistence(extra map[string]any) map[string]any {
	p := map[string]any{"keys": []string{"${request.header.x-client-id}"}}
	for k, v := range extra {
		p[k] = v
	}
	return p
}

// lbConfig returns a plugin configuration; p == nil leaves persistence off.
func lbConfig(t testing.TB, method string, p map[string]any, services []svcDef) []byte {
	t.Helper()
	c := map[string]any{"lbMethod": method, "debugHeader": true, "services": services}
	if p != nil {
		c["persistence"] = p
	}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lbHost runs the module in workers VMs with plugin configuration cfg.
func lbHost(t testing.TB, cfg []byte, workers int) *hostsim.Host {
	t.Helper()
	h, err := hostsim.New(context.Background(), module(t), hostsim.Config{
		Workers: workers, PluginConfig: cfg, RootID: persistRootID})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	t.Cleanup(func() { h.Close(context.Background()) })
	return h
}

// persistReply is what the filter did with one request.
type persistReply struct {
	service string // x-hashlb-service
	reason  string // reason= of x-hashlb-decision
}

// persistReq is one request: its x-client-id (none when "") and source address.
type persistReq struct {
	id, src string
}

func (r persistReq) headers() [][2]string {
	hs := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "lb.example"}, {":scheme", "http"}}
	if r.id != "" {
		hs = append(hs, [2]string{"x-client-id", r.id})
	}
	return hs
}

func (r persistReq) props() map[string][]byte {
	src := r.src
	if src == "" {
		src = "10.0.0.1:1234"
	}
	return map[string][]byte{"source.address": hostsim.PropString(src),
		"destination.address": hostsim.PropString("10.0.0.100:80")}
}

// openStream sends r's request headers on worker w and returns the open stream and
// the chosen service; the stream counts as an active request until finishStream.
func openStream(h *hostsim.Host, w int, r persistReq) (*hostsim.Stream, string, error) {
	s := h.Stream(w)
	res := s.RequestHeaders(r.headers(), r.props())
	if res.Err != nil || res.LocalReply != nil {
		return nil, "", fmt.Errorf("worker %d: RequestHeaders(%+v) = err %v, local persistReply %+v", w, r, res.Err, res.LocalReply)
	}
	svc, ok := res.Header("x-hashlb-service")
	if !ok {
		return nil, "", fmt.Errorf("worker %d: request %+v has no x-hashlb-service", w, r)
	}
	dst, _ := res.Header("x-envoy-original-dst-host")
	if want := "10.0.0.1" + strings.TrimPrefix(svc, "b") + ":8080"; dst != want {
		return nil, "", fmt.Errorf("worker %d: x-envoy-original-dst-host = %q for service %s, want %q", w, dst, svc, want)
	}
	return s, svc, nil
}

// finishStream sends the response and ends the stream; it returns the decision's
// reason from x-hashlb-decision.
func finishStream(s *hostsim.Stream) (string, error) {
	res := s.ResponseHeaders([][2]string{{":status", "200"}})
	if res.Err != nil {
		return "", fmt.Errorf("ResponseHeaders: %w", res.Err)
	}
	dec, _ := res.Header("x-hashlb-decision")
	if err := s.Finish(); err != nil {
		return "", fmt.Errorf("Finish: %w", err)
	}
	_, reason, ok := strings.Cut(dec, "reason=")
	if !ok {
		return "", fmt.Errorf("x-hashlb-decision = %q, want a reason", dec)
	}
	return reason, nil
}

// roundTrip runs one full stream of r on worker w.
func roundTrip(h *hostsim.Host, w int, r persistReq) (persistReply, error) {
	s, svc, err := openStream(h, w, r)
	if err != nil {
		return persistReply{}, err
	}
	reason, err := finishStream(s)
	return persistReply{service: svc, reason: reason}, err
}

// mustRoundTrip is roundTrip for the test's goroutine: an error ends the test.
func mustRoundTrip(t testing.TB, h *hostsim.Host, w int, r persistReq) persistReply {
	t.Helper()
	rep, err := roundTrip(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// holdStream is openStream for the test's goroutine.
func holdStream(t testing.TB, h *hostsim.Host, w int, r persistReq) (*hostsim.Stream, string) {
	t.Helper()
	s, svc, err := openStream(h, w, r)
	if err != nil {
		t.Fatal(err)
	}
	return s, svc
}

// releaseStreams ends held streams.
func releaseStreams(t testing.TB, ss []*hostsim.Stream) {
	t.Helper()
	for _, s := range ss {
		if _, err := finishStream(s); err != nil {
			t.Fatal(err)
		}
	}
}

// persistMetric returns a counter's value (0 when the module never defined it).
func persistMetric(h *hostsim.Host, name string) int64 {
	m, _ := h.Metric(name)
	return m.Value
}

// persistMetrics reads the persistence counters by short name.
func persistMetrics(h *hostsim.Host) map[string]int64 {
	out := map[string]int64{}
	for _, n := range []string{"hit", "miss", "expired", "evicted", "empty_key", "cas_retry", "cas_giveup"} {
		out[n] = persistMetric(h, "hashlb.persistence_"+n)
	}
	return out
}

// checkMetrics compares the persistence counters named in want.
func checkMetrics(t *testing.T, h *hostsim.Host, want map[string]int64) {
	t.Helper()
	got := persistMetrics(h)
	for n, v := range want {
		if got[n] != v {
			t.Errorf("hashlb.persistence_%s = %d, want %d (all: %v)", n, got[n], v, got)
		}
	}
}

func clientID(i int) string { return "client-" + strconv.Itoa(i) }

// desyncWorkers sends w requests without a key (and without persistence effect when
// emptyKey is skip) to worker w, so the workers' round-robin positions differ.
func desyncWorkers(t *testing.T, h *hostsim.Host) {
	t.Helper()
	for w := 0; w < h.Workers(); w++ {
		for i := 0; i < w; i++ {
			mustRoundTrip(t, h, w, persistReq{})
		}
	}
}

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
			desyncWorkers(t, h)
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
	hits := persistMetric(h, "hashlb.persistence_hit")
	for i := range clients {
		rep := mustRoundTrip(t, h, (i+1)%4, persistReq{id: clientID(i)})
		if rep.service != first[i] || rep.reason != "persistence" {
			t.Errorf("%s under load: %s (%s), want %s (persistence)", clientID(i), rep.service, rep.reason, first[i])
		}
	}
	if got := persistMetric(h, "hashlb.persistence_hit") - hits; got != clients {
		t.Errorf("persistence_hit rose by %d, want %d", got, clients)
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
	checkMetrics(t, h, map[string]int64{"miss": n, "hit": 2*n - int64(onB2), "cas_giveup": 0})
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
			checkMetrics(t, h, map[string]int64{"miss": n, "hit": n - int64(rechosen), "cas_giveup": 0})
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

// bucketOf returns the bucket (of nb) and the stored fingerprint of a
// persistence key, as the table lays them out (lbcore/persist.go): the
// key's xxhash64 scaled to [0, nb), and that hash without its top bit.
func bucketOf(key []byte, nb int) (bucket int, fp uint64) {
	h := xxhash.Sum64(key)
	b, _ := bits.Mul64(h, uint64(nb))
	return int(b), max(h&^(1<<63), 1)
}

// TestPersistMemoryModule fills a 10,000-entry table through the module
// (keys chosen so that each lands in a bucket with room: exactly 10,000
// requests), checks the shared data it wrote (one key per bucket plus the
// creation marker, each bucket a version byte and 8 entries of fingerprint,
// service hash and last use) and measures bytes per entry from hostsim's
// accounting of cpp-host's shared data.
func TestPersistMemoryModule(t *testing.T) {
	const tableSize = 10000
	nb := tableSize / lbcore.Ways
	services := fourServices()
	h := lbHost(t, lbConfig(t, "ROUNDROBIN", persistence(map[string]any{"tableSize": tableSize}), services), 4)
	type key struct {
		id     string
		bucket int
		fp     uint64
	}
	count := make([]int, nb)
	var keys []key
	for i := 0; len(keys) < tableSize; i++ {
		id := "mem-" + strconv.Itoa(i)
		b, fp := bucketOf([]byte(id), nb)
		if count[b] < lbcore.Ways {
			count[b]++
			keys = append(keys, key{id, b, fp})
		}
	}
	// Four workers fill the table at once, racing to create buckets.
	svcOf := make([]string, len(keys))
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(keys) && errs[w] == nil; i += 4 {
				var rep persistReply
				rep, errs[w] = roundTrip(h, w, persistReq{id: keys[i].id})
				svcOf[i] = rep.service
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	m := persistMetrics(h)
	t.Logf("filling: %v", m)
	if m["miss"] < tableSize || m["evicted"] != 0 || m["cas_giveup"] != 0 {
		t.Errorf("metrics after the fill = %v, want %d misses, no eviction, no give-up", m, tableSize)
	}

	// The shared data: nb buckets and the marker, under the plugin's namespace.
	sd := h.SharedData()
	if got := sd.Len(); got != nb+1 {
		t.Fatalf("shared data has %d keys, want %d buckets + 1 marker", got, nb)
	}
	prefix := persistNamespace + "/p/"
	if _, _, ok := sd.Get(prefix + "c"); !ok {
		t.Errorf("no creation marker %sc", prefix)
	}
	addr := map[string]uint64{}
	for _, s := range services {
		addr[s.Name] = xxhash.Sum64String(s.Address)
	}
	now := uint32(h.Now().Unix())
	byBucket := map[int][]int{}
	for i, k := range keys {
		byBucket[k.bucket] = append(byBucket[k.bucket], i)
	}
	for b := range nb {
		val, _, ok := sd.Get(prefix + strconv.Itoa(b))
		if !ok || len(val) != 1+lbcore.Ways*lbcore.EntrySize || val[0] != 1 {
			t.Fatalf("bucket %d = %d bytes (found %v), want version 1 and %d full entries", b, len(val), ok, lbcore.Ways)
		}
		ents := map[uint64][2]uint64{} // fingerprint → service, last use
		for p := 1; p < len(val); p += lbcore.EntrySize {
			w := binary.LittleEndian.Uint64(val[p:])
			if w>>63 != 0 {
				t.Errorf("bucket %d: entry marked hot after one request", b)
			}
			ents[w&^(1<<63)] = [2]uint64{binary.LittleEndian.Uint64(val[p+8:]), uint64(binary.LittleEndian.Uint32(val[p+16:]))}
		}
		for _, i := range byBucket[b] {
			e, ok := ents[keys[i].fp]
			if !ok || e[0] != addr[svcOf[i]] || e[1] != uint64(now) {
				t.Errorf("key %s in bucket %d = %v (found %v), want service %s (%#x) last use %d",
					keys[i].id, b, e, ok, svcOf[i], addr[svcOf[i]], now)
			}
		}
	}

	bytes := sd.Bytes()
	got := float64(bytes) / tableSize
	want := lbcore.BytesPerEntry(tableSize, persistNamespace, hostsim.SharedDataEntryOverhead)
	t.Logf("tableSize %d: %d shared-data keys, %d bytes = %.2f bytes/entry (lbcore.BytesPerEntry %.2f)", tableSize, sd.Len(), bytes, got, want)
	if got != want || got > 48 {
		t.Errorf("bytes/entry = %.4f, want lbcore.BytesPerEntry's %.4f and ≤ 48", got, want)
	}

	// A new key in a full bucket evicts one entry: the table never grows.
	for i := 0; ; i++ {
		id := "more-" + strconv.Itoa(i)
		if b, _ := bucketOf([]byte(id), nb); b == keys[0].bucket {
			mustRoundTrip(t, h, 0, persistReq{id: id})
			break
		}
	}
	if sd.Len() != nb+1 || sd.Bytes() != bytes || persistMetric(h, "hashlb.persistence_evicted") != 1 {
		t.Errorf("after one more key: %d keys, %d bytes, %d evicted; want %d, %d, 1",
			sd.Len(), sd.Bytes(), persistMetric(h, "hashlb.persistence_evicted"), nb+1, bytes)
	}
}

// sharedStore is lbcore.Store over hostsim's SharedData, the store the
// module reaches through proxy_get_shared_data / proxy_set_shared_data.
type sharedStore struct{ d *hostsim.SharedData }

func (s sharedStore) Get(key string) ([]byte, uint32, error) {
	v, cas, ok := s.d.Get(key)
	if !ok {
		return nil, 0, lbcore.ErrNotFound
	}
	return v, cas, nil
}

func (s sharedStore) Set(key string, value []byte, cas uint32) error {
	// The Table's key aliases a buffer it reuses, and SharedData keeps the
	// key string it is given: copy it, as the host copies it out of the VM.
	switch st := s.d.Set(strings.Clone(key), value, cas); st {
	case 0:
		return nil
	case 8:
		return lbcore.ErrCASMismatch
	default:
		return fmt.Errorf("proxy_set_shared_data: status %d", st)
	}
}

// TestPersistMemory3M fills a 3,000,000-entry table (the default tableSize)
// through lbcore.Table on hostsim's SharedData and reports bytes per entry
// from hostsim's accounting: goal ≤ 48.
func TestPersistMemory3M(t *testing.T) {
	const tableSize = 3000000
	nb := tableSize / lbcore.Ways
	sd := hostsim.NewSharedData()
	tb := lbcore.NewTable(sharedStore{sd}, persistNamespace, tableSize, 7*24*time.Hour)
	if tb.Capacity() != tableSize {
		t.Fatalf("Capacity() = %d, want %d", tb.Capacity(), tableSize)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := []uint64{xxhash.Sum64String("10.0.0.11:8080"), xxhash.Sum64String("10.0.0.12:8080")}
	count := make([]uint8, nb)
	var key []byte
	filled := 0
	for i := 0; filled < tableSize; i++ {
		key = strconv.AppendInt(append(key[:0], "client-"...), int64(i), 10)
		b, _ := bucketOf(key, nb)
		if count[b] == lbcore.Ways {
			continue // only keys with room: the fill takes exactly tableSize inserts
		}
		count[b]++
		filled++
		svc := ids[i%2]
		_, _, out := tb.Resolve(key, now, func(uint64) bool { return true }, func() (uint64, bool) { return svc, true })
		if !out.Miss || out.Evicted != 0 || out.GaveUp {
			t.Fatalf("Resolve(%s) outcome %+v, want a plain miss", key, out)
		}
	}
	if got := sd.Len(); got != nb+1 {
		t.Fatalf("shared data has %d keys, want %d buckets + marker", got, nb+1)
	}
	bytes := sd.Bytes()
	got := float64(bytes) / tableSize
	want := lbcore.BytesPerEntry(tableSize, persistNamespace, hostsim.SharedDataEntryOverhead)
	t.Logf("tableSize %d: %d shared-data keys, %d bytes (%d per key overhead) = %.2f bytes/entry (lbcore.BytesPerEntry %.2f)",
		tableSize, sd.Len(), bytes, hostsim.SharedDataEntryOverhead, got, want)
	if got > 48 {
		t.Errorf("bytes/entry = %.2f, want ≤ 48", got)
	}
	if got != want {
		t.Errorf("bytes/entry = %.4f, lbcore.BytesPerEntry says %.4f", got, want)
	}
	// Full: one more key evicts and the memory stays the same.
	_, _, out := tb.Resolve([]byte("one-more"), now, func(uint64) bool { return true }, func() (uint64, bool) { return ids[0], true })
	if out.Evicted != 1 || sd.Len() != nb+1 || sd.Bytes() != bytes {
		t.Errorf("one more key: evicted %d, %d keys, %d bytes; want 1, %d, %d", out.Evicted, sd.Len(), sd.Bytes(), nb+1, bytes)
	}
}
