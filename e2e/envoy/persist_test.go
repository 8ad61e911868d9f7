package envoy

// Persistence in real Envoy: envoy.yaml's table (URLHASH, upstreamCount 3,
// keys on x-client-id) lives in the shared data of the vm_id, so a key one
// worker placed is served by the other three, and it outlives a new
// configuration delivered by ECDS (the file hashlb-controller -ecds-dir
// writes) or by LDS (a changed listener). lbcore, run on the same requests
// in the same order with a table of its own, is the oracle of every answer,
// including which keys move when a reconfiguration removes a service.

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/lbcore"
)

// persistOracle is lbcore with a persistence table, fed the requests Envoy
// was sent, in order.
type persistOracle struct {
	store corpus.MemStore // the oracle's persistence table
	c     *lbcore.Config
	b     *lbcore.Balancer
}

// configure makes data the oracle's configuration; the table stays, as
// Envoy's shared data does.
func (o *persistOracle) configure(t testing.TB, data []byte) {
	t.Helper()
	c, err := lbcore.ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	o.c, o.b = c, lbcore.NewBalancer(c, 0)
	o.b.EnablePersistence(&o.store, "hashlb/default")
}

// decide is the service a request for path with client id key must get.
func (o *persistOracle) decide(key, path string) (string, lbcore.Reason) {
	d := o.b.Decide(&lbcore.Request{Method: "GET", Target: path, Authority: "example.com",
		Headers: [][2]string{{"x-client-id", key}}}, time.Now())
	return o.c.Services[d.At(0)].Name, d.Reason
}

// persistConfig is envoy.yaml's plugin configuration over backends bs
// (without the one named drop), with the debug header when debug.
func persistConfig(bs []*envoyrun.Backend, debug bool, drop string) []byte {
	var svcs []map[string]any
	for _, b := range bs {
		if b.Name != drop {
			svcs = append(svcs, map[string]any{"name": b.Name, "address": b.Addr})
		}
	}
	c := map[string]any{
		"lbMethod": "URLHASH", "upstreamHeader": "x-envoy-original-dst-host", "upstreamCount": 3,
		"persistence": map[string]any{"keys": []string{"${request.header.x-client-id}"}},
		"services":    svcs,
	}
	if debug {
		c["debugHeader"] = true
	}
	out, _ := json.Marshal(c)
	return out
}

// keyClient sends keyed requests to one listener, one fresh connection
// each, and learns which worker accepted each connection from Envoy's
// per-worker listener counters (listener.<stat_prefix>.worker_<n>.downstream_cx_total).
type keyClient struct {
	e        *envoyrun.Envoy
	addr     string
	listener string // its stat_prefix
	counts   map[int]int64
	o        *persistOracle
}

var workerStatRE = regexp.MustCompile(`worker_([0-9]+)\.downstream_cx_total: ([0-9]+)`)

func (k *keyClient) workerCounts() (map[int]int64, error) {
	prefix := "listener." + k.listener + "."
	body, _, err := k.e.Get("/stats?filter=" + url.QueryEscape("^"+regexp.QuoteMeta(prefix)+`worker_[0-9]+\.downstream_cx_total$`))
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, m := range workerStatRE.FindAllStringSubmatch(body, -1) {
		w, _ := strconv.Atoi(m[1])
		n, _ := strconv.ParseInt(m[2], 10, 64)
		out[w] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no per-worker counters for %s in /stats: %q", prefix, body)
	}
	return out, nil
}

// served is one answer.
type served struct {
	service string // the backend that answered
	worker  int    // the worker that accepted the connection
	reason  string // from the debug header ("" without it)
}

// get sends GET path with x-client-id key and checks that the answer is
// the oracle's.
func (k *keyClient) get(t testing.TB, key, path string) served {
	t.Helper()
	if k.counts == nil {
		c, err := k.workerCounts()
		if err != nil {
			t.Fatal(err)
		}
		k.counts = c
	}
	a, err := send(wire{srcIP: "127.0.0.1", dst: k.addr, method: "GET", target: path, host: "example.com",
		headers: [][2]string{{"x-client-id", key}}})
	if err != nil {
		t.Fatalf("GET %s (key %s): %v", path, key, err)
	}
	after, err := k.workerCounts()
	if err != nil {
		t.Fatal(err)
	}
	s := served{service: a.backend, worker: -1}
	for w, n := range after {
		if n == k.counts[w]+1 && s.worker == -1 {
			s.worker = w
		} else if n != k.counts[w] {
			s.worker = -2
		}
	}
	k.counts = after
	if s.worker < 0 {
		t.Fatalf("GET %s: cannot tell the worker from the per-worker counters %v", path, after)
	}
	if a.debug != "" {
		s.reason = a.debug[strings.LastIndex(a.debug, "reason=")+len("reason="):]
	}
	want, _ := k.o.decide(key, path)
	if a.status != 200 || a.backend != want {
		t.Errorf("GET %s (key %s) on worker %d: %d from %q, lbcore says %s", path, key, s.worker, a.status, a.backend, want)
	}
	return s
}

// persistRun is the scenario both reconfiguration paths share.
type persistRun struct {
	k     *keyClient
	keys  []string
	owner map[string]string // key → service it was placed on
}

// place places every key (one request each) and serves each from fresh
// connections with other paths: every worker places keys, and keys placed
// by one worker are served by the others, by the placed service although
// the path alone would often send them elsewhere.
func (r *persistRun) placeAndServe(t *testing.T, workers int) {
	r.owner = map[string]string{}
	placedBy := map[string]int{}
	placers := map[int]bool{}
	for _, key := range r.keys {
		s := r.k.get(t, key, "/place/"+key)
		r.owner[key], placedBy[key] = s.service, s.worker
		placers[s.worker] = true
	}
	stateless := lbcore.NewBalancer(r.k.o.c, 0)
	cross, elsewhere := 0, 0
	servers := map[int]bool{}
	for _, key := range r.keys {
		for j := range 3 {
			path := fmt.Sprintf("/again/%s/%d", key, j)
			s := r.k.get(t, key, path)
			servers[s.worker] = true
			if s.service != r.owner[key] {
				t.Errorf("key %s placed on %s by worker %d: served by %s on worker %d", key, r.owner[key], placedBy[key], s.service, s.worker)
			}
			if s.worker != placedBy[key] {
				cross++
			}
			d := stateless.Decide(&lbcore.Request{Method: "GET", Target: path, Authority: "example.com"}, time.Now())
			if r.k.o.c.Services[d.At(0)].Name != r.owner[key] {
				elsewhere++
			}
		}
	}
	t.Logf("%d keys placed by workers %v, served %d times by another worker; %d of %d requests would hash elsewhere without the table",
		len(r.keys), placers, cross, elsewhere, 3*len(r.keys))
	if len(placers) != workers || len(servers) != workers {
		t.Errorf("workers that placed keys %v, that served them %v: want all %d", placers, servers, workers)
	}
	if cross < len(r.keys) || elsewhere < len(r.keys) {
		t.Errorf("%d cross-worker hits, %d requests the table redirected: too few to show the table is shared", cross, elsewhere)
	}
}

// serveAll serves every key once more: each by the service it was placed
// on, the decision from the table when the debug header is on.
func (r *persistRun) serveAll(t *testing.T, phase string, debug bool) {
	for _, key := range r.keys {
		s := r.k.get(t, key, "/after/"+phase+"/"+key)
		if s.service != r.owner[key] {
			t.Errorf("%s: key %s moved from %s to %s", phase, key, r.owner[key], s.service)
		}
		if debug && s.reason != "persistence" {
			t.Errorf("%s: key %s: reason %q, want persistence", phase, key, s.reason)
		}
	}
}

// afterRemoval serves every key once more after the configuration dropped
// service gone: the keys on it move, as lbcore says, and no other key does.
func (r *persistRun) afterRemoval(t *testing.T, gone string) {
	moved, onGone := 0, 0
	for _, key := range r.keys {
		path := "/removed/" + key
		s := r.k.get(t, key, path) // checked against the oracle
		if r.owner[key] == gone {
			onGone++
		}
		switch {
		case r.owner[key] == gone && s.service == gone:
			t.Errorf("key %s still served by the removed %s", key, gone)
		case r.owner[key] != gone && s.service != r.owner[key]:
			t.Errorf("key %s moved from %s to %s, though only %s was removed", key, r.owner[key], s.service, gone)
		case s.service != r.owner[key]:
			moved++
		}
	}
	t.Logf("after removing %s: %d of %d keys moved (%d were on it)", gone, moved, len(r.keys), onGone)
	if onGone == 0 {
		t.Errorf("no key was on %s: the removal moved nothing to check", gone)
	}
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("client-%02d", i)
	}
	return out
}

// waitConfigured waits until hashlb has logged line at least n more times
// than before (one per plugin context that started the configuration) and
// returns how many times it did within a short settle, and on how many
// distinct threads of Envoy.
func waitConfigured(t testing.TB, e *envoyrun.Envoy, line string, before, n int) (int, int) {
	t.Helper()
	eventually(t, func() string {
		return fmt.Sprintf("%q logged %d times, want %d or more\n%s", line, strings.Count(e.Log(), line), before+n, e.LogTail(30))
	}, func() bool { return strings.Count(e.Log(), line) >= before+n })
	time.Sleep(300 * time.Millisecond)
	log := e.Log()
	threads := map[string]bool{}
	seen := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, line) {
			if seen++; seen > before {
				if m := threadRE.FindStringSubmatch(l); m != nil {
					threads[m[1]] = true
				}
			}
		}
	}
	return strings.Count(log, line) - before, len(threads)
}

// threadRE finds the thread id in an Envoy log line: "[time][tid][level]".
var threadRE = regexp.MustCompile(`^\[[^]]+\]\[([0-9]+)\]`)

const persistWorkers = 4

// configureCalls is how many times Envoy calls on_configure for a new
// plugin configuration (measured in both versions): once in the
// configuration canary (a VM cloned on the main thread for the check, then
// dropped), once in the main thread's VM and once in each worker's. Waiting
// for all of them means every worker runs the new configuration.
const configureCalls = persistWorkers + 2

// checkVMsReused checks that a new configuration made one VM only, the
// canary's, and left as many alive: every thread runs the new plugin in the
// VM it had, so the VM's memory (and hashlb's state in it) lives on.
func checkVMsReused(t testing.TB, before, after [2]int64) {
	t.Helper()
	t.Logf("V8 VMs (created, active): before the update %v, after %v", before, after)
	if after[0] != before[0]+1 || after[1] != before[1] {
		t.Errorf("V8 VMs (created, active) went from %v to %v: want one more created (the canary) and as many alive", before, after)
	}
}

// vmStats is Envoy's count of V8 VMs created so far and alive now.
func vmStats(t testing.TB, e *envoyrun.Envoy) [2]int64 {
	t.Helper()
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return [2]int64{s["wasm.envoy.wasm.runtime.v8.created"], s["wasm.envoy.wasm.runtime.v8.active"]}
}

// persistVia is how a persistence test hands Envoy hashlb's
// configurations: setup writes the first into dir and returns the
// bootstrap, the listener's address ("" to ask Envoy) and push, which
// writes the n-th next one (n from 2).
type persistVia struct {
	name  string
	setup func(t *testing.T, dir string, bs []*envoyrun.Backend, config []byte) (yaml []byte, addr string, push func(config []byte, n int))
	// stats names the update counters Envoy keeps for this way.
	stats func(t *testing.T, e *envoyrun.Envoy) string
	// fresh: the update makes a new listener, whose counts start afresh.
	fresh bool
}

// persistAcrossUpdates: keys placed by any worker are served by every
// other; a new configuration (the debug header on), handed over via, runs
// on_configure on the main thread and every worker, reuses the VMs and
// keeps every key where it was; one that removes a service moves only that
// service's keys, where lbcore says.
func persistAcrossUpdates(t *testing.T, bin envoyrun.Binary, via persistVia) {
	bs := envoyrun.StartBackends(t, 4)
	dir := envoyrun.WorkDir(t)
	yaml, addr, push := via.setup(t, dir, bs, persistConfig(bs, false, ""))
	e := startEnvoy(t, bin, envoyrun.Options{Bootstrap: yaml, Dir: dir, Concurrency: persistWorkers})
	if addr == "" {
		addr = e.MustListener(t, "hashlb_listener")
	} else {
		// A listener from a file is warm once V8 has compiled the module,
		// which takes over a minute on a loaded machine: waitListener waits
		// as long as Envoy's own readiness wait (waitCeiling).
		waitListener(t, e, "hashlb_listener")
	}
	o := &persistOracle{}
	o.configure(t, persistConfig(bs, false, ""))
	r := &persistRun{k: &keyClient{e: e, addr: addr, listener: "hashlb_listener", o: o}, keys: keys(40)}
	r.placeAndServe(t, persistWorkers)

	four, three := "hashlb: URLHASH over 4 services", "hashlb: URLHASH over 3 services"
	before := strings.Count(e.Log(), four)
	vms := vmStats(t, e)
	push(persistConfig(bs, true, ""), 2)
	o.configure(t, persistConfig(bs, true, ""))
	n, threads := waitConfigured(t, e, four, before, configureCalls)
	if threads != persistWorkers+1 {
		t.Errorf("on_configure ran on %d threads, want the main thread and %d workers", threads, persistWorkers)
	}
	t.Logf("%s update: hashlb's on_configure ran %d times on %d threads (%d workers); %s", via.name, n, threads, persistWorkers, via.stats(t, e))
	if via.fresh {
		r.k.counts = nil
	}
	checkVMsReused(t, vms, vmStats(t, e))
	r.serveAll(t, strings.ToLower(via.name), true)

	gone := r.owner[r.keys[0]]
	before = strings.Count(e.Log(), three)
	push(persistConfig(bs, true, gone), 3)
	o.configure(t, persistConfig(bs, true, gone))
	waitConfigured(t, e, three, before, configureCalls)
	if via.fresh {
		r.k.counts = nil
	}
	r.afterRemoval(t, gone)
}

// TestPersistenceAcrossECDS: persistAcrossUpdates with the Wasm filter from
// an ECDS file, as configs/envoy-ecds.yaml loads it, replaced the way
// hashlb-controller -ecds-dir writes it.
func TestPersistenceAcrossECDS(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		persistAcrossUpdates(t, bin, persistVia{name: "ECDS", setup: ecdsSetup, stats: func(t *testing.T, e *envoyrun.Envoy) string {
			return fmt.Sprintf("ecds reloads %d", e.Stat(t, "extension_config_discovery.http_filter.hashlb.config_reload"))
		}})
	})
}

// ecdsSetup is persistVia.setup for ECDS: a listener whose filter is ECDS's
// hashlb, read from a file in dir.
func ecdsSetup(t *testing.T, dir string, bs []*envoyrun.Backend, config []byte) ([]byte, string, func([]byte, int)) {
	ecds := filepath.Join(dir, "ecds", "demo_hashlb.json")
	push := func(config []byte, _ int) { writeAtomic(t, ecds, ecdsFile(t, "hashlb", "", config)) }
	push(config, 1)
	return bootstrap{
		listeners: []listenerSpec{{name: "hashlb_listener", addrs: []string{"127.0.0.1:0"}, ecdsPath: ecds, ecdsName: "hashlb",
			cluster: "hashlb_upstream", retries: true}},
		clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))},
	}.yaml(t), "", push
}

// TestPersistenceAcrossLDS: persistAcrossUpdates with the listener, hashlb
// inline as in envoy.yaml, from an LDS file (dynamic_resources, lds_config
// with a path_config_source), replaced by a changed listener: the table
// outlives the listener's plugin.
func TestPersistenceAcrossLDS(t *testing.T) {
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		persistAcrossUpdates(t, bin, persistVia{name: "LDS", setup: ldsSetup, fresh: true, stats: func(t *testing.T, e *envoyrun.Envoy) string {
			return fmt.Sprintf("lds update_success %d, listener_in_place_updated %d",
				e.Stat(t, "listener_manager.lds.update_success"), e.Stat(t, "listener_manager.listener_in_place_updated"))
		}})
	})
}

// ldsSetup is persistVia.setup for LDS: the listener, on a free address,
// read from a file in dir; each push is a new version of it.
func ldsSetup(t *testing.T, dir string, bs []*envoyrun.Backend, config []byte) ([]byte, string, func([]byte, int)) {
	lds := filepath.Join(dir, "lds", "listeners.json")
	addr := fleettest.FreeAddr(t)
	push := func(config []byte, n int) {
		writeAtomic(t, lds, ldsFile(t, strconv.Itoa(n), listenerSpec{name: "hashlb_listener", addrs: []string{addr}, config: config,
			cluster: "hashlb_upstream", retries: true}))
	}
	push(config, 1)
	return bootstrap{clusters: []*cluster{overrideHostCluster(t, "hashlb_upstream", endpoints(bs))}, ldsPath: lds}.yaml(t), addr, push
}
