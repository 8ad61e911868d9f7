package e2e

// Fleet-wide persistence against a real etcd on loopback: the
// embedded server (go.etcd.io/etcd/server/v3/embed), and Debian's etcd 3.4
// binary when HASHLB_ETCD_BIN names it. Several hostsim hosts with separate
// shared data stand for several Envoy processes; each reaches etcd through
// the cluster "etcd" (hostsim.Config.Clusters), answered asynchronously as
// Envoy's async HTTP client does.

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/lateness"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// fleetConfig is LEASTCONNECTION with persistence on x-client-id over b1…b4,
// with the fleet level on cluster "etcd" unless fleet is nil.
func fleetConfig(t testing.TB, fleet map[string]any, services []svcDef, extra map[string]any) []byte {
	t.Helper()
	p := persistence(extra)
	if fleet != nil {
		p["fleet"] = fleet
	}
	return lbConfig(t, "LEASTCONNECTION", p, services)
}

// fleetHosts starts n hosts (separate shared data: separate proxies) of
// workers VMs each, with the cluster "etcd" at etcdAddr.
func fleetHosts(t testing.TB, n, workers int, cfg []byte, etcdAddr string, start time.Time, realTime bool) []*hostsim.Host {
	t.Helper()
	var hs []*hostsim.Host
	for range n {
		hs = append(hs, moduleHost(t, hostsim.Config{
			Workers: workers, PluginConfig: cfg, RootID: persistRootID, Start: start, RealTime: realTime,
			Clusters: map[string]string{"etcd": etcdAddr}}))
	}
	return hs
}

// fleetReply is one request's outcome through a host.
type fleetReply struct {
	key     string
	host    int       // the index of the host that served it (spray)
	at      time.Time // when it was decided
	service string
	reason  string
	waited  time.Duration // real time from the request headers to the request leaving the filter
	paused  bool
}

// fleetRoundTrip sends one request with x-client-id id to worker w of h,
// waits for it to leave the filter (it pauses while asking etcd), and ends
// its stream.
func fleetRoundTrip(h *hostsim.Host, w int, id string) (fleetReply, error) {
	r := persistReq{id: id}
	s := h.Stream(w)
	start := time.Now()
	res := s.RequestHeaders(r.headers(), r.props())
	rep := fleetReply{paused: res.Action == hostsim.ActionPause && res.Err == nil && res.LocalReply == nil}
	if rep.paused {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res = s.Wait(ctx)
		cancel()
	}
	rep.waited = time.Since(start)
	if res.Err != nil || res.LocalReply != nil || res.Action != hostsim.ActionContinue {
		s.Finish()
		return rep, fmt.Errorf("request %s: err %v, local reply %+v, action %v", id, res.Err, res.LocalReply, res.Action)
	}
	rep.service, _ = res.Header("x-hashlb-service")
	if rep.service == "" {
		s.Finish()
		return rep, fmt.Errorf("request %s left without x-hashlb-service", id)
	}
	reason, err := finishStream(s)
	rep.reason = reason
	return rep, err
}

// spray sends every key's requests (perKey each) to random workers of
// random hosts from conc goroutines, and returns the services each key got.
func spray(t *testing.T, hosts []*hostsim.Host, keys []string, perKey, conc int) (map[string][]string, []fleetReply) {
	t.Helper()
	type job struct{ key string }
	jobs := make(chan job)
	var mu sync.Mutex
	got := map[string][]string{}
	var replies []fleetReply
	var failed atomic.Value
	var wg sync.WaitGroup
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for j := range jobs {
				hi := rng.IntN(len(hosts))
				h := hosts[hi]
				rep, err := fleetRoundTrip(h, rng.IntN(h.Workers()), j.key)
				rep.key, rep.host, rep.at = j.key, hi, time.Now()
				if err != nil {
					failed.Store(err)
					continue
				}
				mu.Lock()
				got[j.key] = append(got[j.key], rep.service)
				replies = append(replies, rep)
				mu.Unlock()
			}
		}()
	}
	order := make([]job, 0, len(keys)*perKey)
	for _, k := range keys {
		for range perKey {
			order = append(order, job{k})
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, j := range order {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return got, replies
}

// splitKeys counts the keys that reached more than one service.
func splitKeys(got map[string][]string) (split int, example string) {
	for k, svcs := range got {
		if slices.ContainsFunc(svcs, func(s string) bool { return s != svcs[0] }) {
			split++
			example = fmt.Sprintf("%s → %v", k, svcs)
		}
	}
	return split, example
}

// keysN are n client ids.
func keysN(prefix string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return ks
}

// countingProxy forwards HTTP to target and counts the requests by path.
func countingProxy(t testing.TB, target string) (addr string, count func(path string) int64) {
	t.Helper()
	var mu sync.Mutex
	n := map[string]int64{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n[r.URL.Path]++
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func(path string) int64 {
		mu.Lock()
		defer mu.Unlock()
		if path == "" {
			var all int64
			for _, v := range n {
				all += v
			}
			return all
		}
		return n[path]
	}
}

// longestWait is the longest a request waited to leave the filter.
func longestWait(replies []fleetReply) time.Duration {
	var worst time.Duration
	for _, r := range replies {
		worst = max(worst, r.waited)
	}
	return worst
}

// percentile returns the p-th percentile of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// etcdDBSize is the size of etcd's database file (/v3/maintenance/status).
func etcdDBSize(t testing.TB, addr string) int64 {
	t.Helper()
	var r struct {
		DBSize string `json:"dbSize"`
	}
	etcdCall(t, addr, "/v3/maintenance/status", map[string]string{}, &r)
	n, err := strconv.ParseInt(r.DBSize, 10, 64)
	if err != nil {
		t.Fatalf("maintenance status: dbSize %q", r.DBSize)
	}
	return n
}

// agree fails t when a key of got (what a spray reached, which agree
// updates) reached two services although every fleet call was answered:
// that is a bug. A split after calls failed (a machine so loaded that the
// timeout passes without an answer) is a fault the fleet heals: the keys
// decided locally are reconciled from the tick, so agree lets the ticks run
// for up to 20 s (virtual and real seconds alike) and then requires each
// such key to reach one service on every proxy.
func agree(t *testing.T, hosts []*hostsim.Host, got map[string][]string, perKey int, what string) (faulty bool) {
	t.Helper()
	split, ex := splitKeys(got)
	if split == 0 {
		return false
	}
	var why []string
	var failed int64
	for _, m := range []string{"error", "timeout", "skipped", "throttled"} {
		var n int64
		for _, h := range hosts {
			n += persistMetric(h, "hashlb.persistence_fleet_"+m)
		}
		failed += n
		why = append(why, fmt.Sprintf("%s %d", m, n))
	}
	var warn []string
	for _, h := range hosts {
		for _, l := range h.LogsAt(hostsim.LogWarn) {
			if len(warn) < 3 {
				warn = append(warn, l)
			}
		}
	}
	if failed == 0 {
		t.Errorf("%s: %d of %d keys reached more than one service, every fleet call answered, e.g. %s (warnings %q)",
			what, split, len(got), ex, warn)
		return false
	}
	t.Logf("%s: %d of %d keys reached more than one service while fleet calls failed (%s; warnings %q); reconciling",
		what, split, len(got), strings.Join(why, ", "), warn)
	var keys []string
	for k, s := range got {
		if slices.ContainsFunc(s, func(v string) bool { return v != s[0] }) {
			keys = append(keys, k)
		}
	}
	var healed map[string][]string
	for range 20 {
		for _, h := range hosts {
			h.Advance(time.Second)
		}
		time.Sleep(time.Second)
		healed, _ = spray(t, hosts, keys, perKey, 12)
		if split, _ = splitKeys(healed); split == 0 {
			break
		}
	}
	if split, ex = splitKeys(healed); split != 0 {
		t.Errorf("%s: %d of %d keys still reached more than one service 20 s after the fleet calls failed, e.g. %s", what, split, len(keys), ex)
	}
	maps.Copy(got, healed)
	return true
}

// fleetKeysPerRun is the acceptance's 10^4 keys.
const fleetKeysPerRun = 10000

// TestFleetAgreement: 3 proxies × 4 workers, LEASTCONNECTION + persistence,
// 10^4 keys each sent to random proxies concurrently. With the fleet level
// every key is on one service on every proxy (and that is etcd's record);
// without it, keys split. Then a service disabled everywhere moves each of
// its keys to one new service fleet-wide.
func TestFleetAgreement(t *testing.T) {
	etcdAddr, _ := startEtcd(t, t.TempDir())
	counted, count := countingProxy(t, etcdAddr)
	db0 := etcdDBSize(t, etcdAddr)
	// A generous timeout for a loaded CI machine; 10^4 keys in a few
	// seconds is far over the default create budget, which is not tested here.
	fleetCfg := map[string]any{"cluster": "etcd", "timeout": "5s", "createsPerSecond": 100000}
	start := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	hosts := fleetHosts(t, 3, 4, fleetConfig(t, fleetCfg, fourServices(), nil), counted, start, false)
	keys := keysN("k", fleetKeysPerRun)
	const perKey = 3

	got, replies := spray(t, hosts, keys, perKey, 12)
	faulty := agree(t, hosts, got, perKey, "with fleet")
	var misses []time.Duration
	for _, r := range replies {
		if r.paused {
			misses = append(misses, r.waited)
		}
	}
	reqs := int64(len(keys) * perKey)
	t.Logf("with fleet: %d requests, %d keys, each on one service; %d paused for etcd, wait p50 %v p99 %v; etcd requests %d (%.0f per 10^4 requests: txn %d, lease grants %d, range %d)",
		reqs, len(keys), len(misses), percentile(misses, 0.5), percentile(misses, 0.99), count(""),
		float64(count(""))*1e4/float64(reqs), count("/v3/kv/txn"), count("/v3/lease/grant"), count("/v3/kv/range"))

	db := etcdDBSize(t, etcdAddr)
	t.Logf("etcd: database %d → %d bytes for %d keys (%.0f bytes per entry, history of one revision each, before compaction)",
		db0, db, len(keys), float64(db-db0)/float64(len(keys)))

	// etcd holds what the proxies serve (after calls failed: once the
	// fleet has reconciled).
	record := func(k string) (string, bool, bool) {
		v, ok := etcdGet(t, etcdAddr, fleet.Key("/hashlb/"+persistRootID+"/", []byte(k)))
		rec, parsed := fleet.ParseRecord(v)
		return v, ok && parsed && rec.Service == "10.0.0.1"+strings.TrimPrefix(got[k][0], "b")+":8080", ok
	}
	for round := 0; faulty && round < 20; round++ {
		wrong := 0
		for _, k := range keys[:50] {
			if _, same, _ := record(k); !same {
				wrong++
			}
		}
		if wrong == 0 {
			break
		}
		for _, h := range hosts {
			h.Advance(time.Second)
		}
		time.Sleep(time.Second)
		again, _ := spray(t, hosts, keys[:50], perKey, 12)
		maps.Copy(got, again)
	}
	for _, k := range keys[:50] {
		if v, same, ok := record(k); !same {
			t.Errorf("etcd record of %s = %q (found %v), want the service %s", k, v, ok, got[k][0])
		}
	}

	// The same run without fleet: each proxy maps a key by itself.
	plain := fleetHosts(t, 3, 4, fleetConfig(t, nil, fourServices(), nil), etcdAddr, start, false)
	gotPlain, _ := spray(t, plain, keys, perKey, 12)
	splitPlain, ex := splitKeys(gotPlain)
	t.Logf("without fleet: %d of %d keys (%.1f %%) reached more than one service, e.g. %s",
		splitPlain, len(keys), 100*float64(splitPlain)/float64(len(keys)), ex)
	if splitPlain == 0 {
		t.Errorf("without fleet no key split: the comparison shows nothing (expected LEASTCONNECTION to differ between proxies)")
	}

	// b2 disabled everywhere: its keys move, each to one service fleet-wide;
	// the other keys stay.
	svcs := fourServices()
	off := false
	svcs[1].Enabled = &off
	for _, h := range hosts {
		if err := h.Configure(fleetConfig(t, fleetCfg, svcs, nil)); err != nil {
			t.Fatalf("Configure without b2: %v", err)
		}
	}
	var onB2, others []string
	for _, k := range keys {
		if got[k][0] == "b2" {
			onB2 = append(onB2, k)
		} else if len(others) < 500 {
			others = append(others, k)
		}
	}
	if len(onB2) == 0 {
		t.Fatal("no key was on b2")
	}
	moved, _ := spray(t, hosts, onB2, perKey, 12)
	agree(t, hosts, moved, perKey, "after disabling b2")
	for k, s := range moved {
		if s[0] == "b2" {
			t.Errorf("key %s still on disabled b2", k)
		}
	}
	stayed, _ := spray(t, hosts, others, 1, 12)
	for k, s := range stayed {
		if s[0] != got[k][0] {
			t.Errorf("key %s moved from %s to %s though its service stayed enabled", k, got[k][0], s[0])
		}
	}
	t.Logf("b2 disabled: its %d keys moved, each to one service on every proxy; %d others unchanged", len(onB2), len(others))
}

// TestFleetEtcdDown: etcd stopped mid-run: every request is still served
// and none waits past the timeout (a dead etcd refuses at once; then it is
// not asked); etcd restarted on the same data: every worker sees it answer
// within seconds (its tick probes), earlier entries hold again (a fresh
// proxy serves them) and new keys agree again.
//
// etcd runs in a process of its own (go.mod's etcd, embeddedEtcd), killed
// and started again behind a front that keeps its address: a test process
// that hosts etcd itself shares its CPU with the proxies, and its Close was
// seen to block for good. New keys are judged as docs/persistence.md
// promises (#failure-etcd-slow-down-or-partitioned): a key agrees on every
// proxy as soon as etcd answers every call about it in time; one whose
// call went unanswered (a timeout on a loaded machine), or which a proxy
// decided while one of its workers held etcd down (calls timing out one
// after the other), is decided locally by design, and agrees once its
// reconcile ran (reconcileBound, widened by
// the lateness measured in the run). fleet.timeout is 300 ms widened by
// the lateness measured before the run.
func TestFleetEtcdDown(t *testing.T) {
	dir := etcdDir(t)
	e := startEtcdProc(t, embeddedEtcd, dir)
	fr := newFront(t, e.addr)
	lateBefore := lateness.Measure(time.Second)
	timeout := callTimeout(300*time.Millisecond, lateBefore, 1500*time.Millisecond)
	meter := lateness.Start()
	defer meter.Stop()
	fleetCfg := map[string]any{"cluster": "etcd", "timeout": timeout.String()}
	cfg := fleetConfig(t, fleetCfg, fourServices(), nil)
	calls := &calloutLog{}
	hosts := fleetLoggedHosts(t, 3, 2, cfg, fr.addr, calls, 0)
	before := keysN("before", 300)
	got := sprayAgreed(t, hosts, before, calls, "etcd up", meter)

	e.kill()
	_, replies := spray(t, hosts, keysN("down", 300), 2, 6)
	worst := longestWait(replies)
	// Every request was served (spray fails the test otherwise); the bound
	// is the timeout plus the time to deliver the failure to a busy worker.
	if limit := timeout + lateness.Widen(time.Second, meter.Late(), 2); worst > limit {
		t.Errorf("etcd down: a request waited %v, want at most the timeout %v (+ delivery: %v in all) %s", worst, timeout, limit,
			lateness.Note(meter.Late(), "delivery is 1 s widened by twice that"))
	}
	t.Logf("etcd down: %d requests served, longest wait %v (timeout %v)", len(replies), worst, timeout)

	if fleetUp(hosts) {
		t.Fatal("etcd stopped: no worker considers it down")
	}
	// Each worker's tick probes a down etcd every second: every one of them
	// sees it answer again, with no request having to wait for it.
	e = startEtcdProc(t, embeddedEtcd, dir)
	fr.setTarget(e.addr)
	took := waitFleetUp(t, hosts, lateness.Widen(10*time.Second, meter.Late(), 10))
	t.Logf("etcd restarted: every worker saw it answer within %v", took.Round(time.Millisecond))
	fresh := fleetLoggedHosts(t, 1, 2, cfg, fr.addr, calls, len(hosts))
	mark := calls.mark()
	again, _ := spray(t, fresh, before, 1, 2)
	for k, s := range again {
		if s[0] != got[k] && !calls.everUnanswered(fleetEtcdKey(k), mark) {
			t.Errorf("after restart: %s on %s by a new proxy, was %s before etcd stopped, and etcd answered every call about it in time", k, s[0], got[k])
		}
	}
	sprayAgreed(t, append(hosts, fresh...), keysN("after", 300), calls, "after restart", meter)
	t.Logf("timers fired up to %v late during the run (%v before it); fleet.timeout %v", meter.Late().Round(time.Millisecond), lateBefore.Round(time.Millisecond), timeout)
}

// fleetLoggedHosts is fleetHosts in real time whose calls to etcd go to
// calls, proxies numbered from first.
func fleetLoggedHosts(t *testing.T, n, workers int, cfg []byte, etcdAddr string, calls *calloutLog, first int) []*hostsim.Host {
	t.Helper()
	var hs []*hostsim.Host
	for i := range n {
		hs = append(hs, moduleHost(t, hostsim.Config{
			Workers: workers, PluginConfig: cfg, RootID: persistRootID, RealTime: true,
			Clusters: map[string]string{"etcd": etcdAddr}, OnCallout: calls.hook(first + i)}))
	}
	return hs
}

func spans(down [][]downSpan) (n int) {
	for _, d := range down {
		n += len(d)
	}
	return n
}

// fleetLog is every "hashlb: fleet:" log line of hosts, times from zero.
func fleetLog(hosts []*hostsim.Host, zero time.Time) string {
	var b strings.Builder
	for i, h := range hosts {
		for _, l := range h.Logs() {
			if strings.Contains(l.Message, "hashlb: fleet:") {
				fmt.Fprintf(&b, "\n\t%+8v proxy %d worker %d: %s", l.At.Sub(zero).Round(time.Millisecond), i, l.Worker, l.Message)
			}
		}
	}
	return b.String()
}

// reconcileBound is how long after its call went unanswered a key decided
// locally agrees with the fleet on a quiet machine: its sync goes at the
// next tick that finds etcd up, and its answer moves the local entry
// (docs/persistence.md).
const reconcileBound = 2 * time.Second

// settleCeiling is how long a test waits past reconcileBound for the
// fleet to settle while etcd itself keeps missing its answers' time (a
// machine too busy to serve it), before it fails anyway.
const settleCeiling = 3 * time.Minute

// tickFor fires the hosts' ticks as they fall due (as Envoy's timers
// would) for d.
func tickFor(hosts []*hostsim.Host, d time.Duration) {
	for start := time.Now(); time.Since(start) < d; time.Sleep(50 * time.Millisecond) {
		for _, h := range hosts {
			h.Tick()
		}
	}
}

// tickUntil fires the hosts' ticks until ok, at most limit; it reports
// whether ok came.
func tickUntil(hosts []*hostsim.Host, limit time.Duration, ok func() bool) bool {
	for start := time.Now(); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > limit {
			return false
		}
		for _, h := range hosts {
			h.Tick()
		}
	}
	return true
}

// sprayAgreed sends every key twice to random workers of hosts and judges
// agreement as the fleet promises it: a key that got two services must
// have had a call about it go unanswered, or a request of it served by a
// proxy while one of its workers held etcd down (decided locally by
// design); then,
// after reconcileBound (widened by the lateness measured, the hosts' ticks
// firing meanwhile), every key is on one service on every proxy. It returns
// that service of each key.
func sprayAgreed(t *testing.T, hosts []*hostsim.Host, keys []string, calls *calloutLog, phase string, meter *lateness.Meter) map[string]string {
	t.Helper()
	mark, began := calls.mark(), time.Now()
	got, replies := spray(t, hosts, keys, 2, 6)
	down := make([][]downSpan, len(hosts))
	for i, h := range hosts {
		down[i] = etcdDown(h)
	}
	// A request a proxy decided while one of its workers held etcd down
	// (it asks no one then), as TestFleetFaults judges it.
	whileDown := map[string]bool{}
	for _, r := range replies {
		for _, sp := range down[r.host] {
			if !r.at.Before(sp.from) && (sp.to.IsZero() || r.at.Before(sp.to)) {
				whileDown[r.key] = true
			}
		}
	}
	local, unexplained := 0, 0
	for k, svcs := range got {
		if !slices.ContainsFunc(svcs, func(s string) bool { return s != svcs[0] }) {
			continue
		}
		if !whileDown[k] && !calls.everUnanswered(fleetEtcdKey(k), mark) {
			if unexplained++; unexplained <= 3 {
				t.Errorf("%s: %s got %v though etcd answered every call about it in time; its calls (times from the spray's start):%s", phase, k, svcs, calls.story(fleetEtcdKey(k), began))
			}
			continue
		}
		local++
	}
	if unexplained > 0 {
		t.Errorf("%s: %d keys in all got two services without a call about them unanswered; the proxies' fleet log lines (times from the spray's start):%s", phase, unexplained, fleetLog(hosts, began))
	}
	// The bound is the test process's lateness; etcd's own (a loaded
	// machine starves its process too: an authenticate is a bcrypt) shows
	// as calls it did not answer in time. While it does not, the wait goes
	// on, up to settleCeiling; a key still split once etcd answered every
	// call of a whole bound in time is the fleet's failure.
	bound := lateness.Widen(reconcileBound, meter.Late(), 10)
	tickFor(hosts, bound)
	settled, _ := spray(t, hosts, keys, 2, 6)
	split, ex := splitKeys(settled)
	waited, etcdLate := bound, 0
	for split != 0 && waited < settleCeiling {
		m := calls.mark()
		tickFor(hosts, bound)
		waited += bound
		late := calls.unansweredSince(m)
		if late == 0 && fleetUp(hosts) {
			break
		}
		etcdLate += late
		settled, _ = spray(t, hosts, keys, 2, 6)
		split, ex = splitKeys(settled)
	}
	if split != 0 {
		exKey, _, _ := strings.Cut(ex, " → ")
		t.Errorf("%s: %d of %d keys still on two services %v after they were sprayed (%d of them decided locally then; %d calls etcd did not answer in time while the test waited past the bound) %s, e.g. %s; its calls (times from the spray's start):%s",
			phase, split, len(keys), waited, local, etcdLate, lateness.Note(meter.Late(), fmt.Sprintf("the bound is %v widened by 10 times that", reconcileBound)), ex,
			calls.story(fleetEtcdKey(exKey), began))
	}
	t.Logf("%s: %d keys, %d split by a call etcd did not answer in time or while a worker held etcd down (decided locally by design), all on one service %v later (%d calls etcd did not answer in time past the bound); %d down spans of a worker in all",
		phase, len(keys), local, waited, etcdLate, spans(down))
	out := make(map[string]string, len(settled))
	for k, s := range settled {
		out[k] = s[0]
	}
	return out
}

// fleetUp reports whether every worker of the hosts considers etcd up: its
// last fleet state line is "answers again", or it never logged one that
// said etcd failed.
func fleetUp(hosts []*hostsim.Host) bool {
	for _, h := range hosts {
		down := map[int]bool{}
		for _, l := range h.Logs() {
			switch {
			case strings.Contains(l.Message, "hashlb: fleet:") && strings.Contains(l.Message, "times in a row"):
				down[l.Worker] = true
			case strings.Contains(l.Message, "hashlb: fleet:") && strings.Contains(l.Message, "answers again"):
				down[l.Worker] = false
			}
		}
		for _, d := range down {
			if d {
				return false
			}
		}
	}
	return true
}

// waitFleetUp fires the hosts' ticks as they fall due (as Envoy's timers
// would) until fleetUp, at most limit, and returns how long it took.
func waitFleetUp(t testing.TB, hosts []*hostsim.Host, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if !tickUntil(hosts, limit, func() bool { return fleetUp(hosts) }) {
		t.Fatalf("a worker still considers etcd down %v after it came back", limit)
	}
	return time.Since(start)
}

// TestFleetSlowEtcd: etcd behind a TCP proxy that delays everything past
// the timeout: every request is served, decided locally, none waits past
// the timeout, and the timeouts are counted.
func TestFleetSlowEtcd(t *testing.T) {
	etcdAddr, _ := startEtcd(t, t.TempDir())
	var delay atomic.Int64
	delay.Store(int64(time.Second))
	slow, _ := delayProxy(t, etcdAddr, func() time.Duration { return time.Duration(delay.Load()) })
	const timeout = 200 * time.Millisecond
	hosts := fleetHosts(t, 2, 2, fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "200ms"}, fourServices(), nil), slow, time.Time{}, true)
	meter := lateness.Start()
	_, replies := spray(t, hosts, keysN("slow", 40), 1, 4)
	meter.Stop()
	worst := longestWait(replies)
	if limit := timeout + lateness.Widen(2*time.Second, meter.Late(), 2); worst > limit {
		t.Errorf("slow etcd: a request waited %v, want at most the timeout %v (+ delivery: %v in all) %s", worst, timeout, limit,
			lateness.Note(meter.Late(), "delivery is 2 s widened by twice that"))
	}
	var timeouts int64
	for _, h := range hosts {
		timeouts += persistMetric(h, "hashlb.persistence_fleet_timeout")
	}
	if timeouts == 0 {
		t.Errorf("slow etcd: persistence_fleet_timeout = 0, want the waits that timed out counted")
	}
	t.Logf("etcd delayed 1 s, timeout %v: %d requests served, longest wait %v, %d timeouts", timeout, len(replies), worst, timeouts)
}

// TestFleetExpiry: with the virtual clock, an entry used within expire
// stays fleet-wide (a proxy that never saw the key gets it from etcd), and
// one idle past expire + slot is forgotten fleet-wide (chosen again).
func TestFleetExpiry(t *testing.T) {
	etcdAddr, _ := startEtcd(t, t.TempDir())
	expire := 10 * time.Minute
	slot := fleet.Slot(expire)
	fleetCfg := map[string]any{"cluster": "etcd", "timeout": "5s"}
	cfg := fleetConfig(t, fleetCfg, fourServices(), map[string]any{"expire": "10m"})
	t0 := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	key := fleet.Key("/hashlb/"+persistRootID+"/", []byte("ada"))
	a := fleetHosts(t, 1, 1, cfg, etcdAddr, t0, false)[0]
	first, err := fleetRoundTrip(a, 0, "ada")
	if err != nil {
		t.Fatal(err)
	}
	stamp := func() int64 {
		v, _ := etcdGet(t, etcdAddr, key)
		r, _ := fleet.ParseRecord(v)
		return r.Stamp
	}
	if got := stamp(); got != t0.Unix() {
		t.Fatalf("stamp after creation = %d, want %d", got, t0.Unix())
	}

	// 6 minutes later, a hit on A: the first of a new slot refreshes the stamp.
	a.Advance(6 * time.Minute)
	if r, err := fleetRoundTrip(a, 0, "ada"); err != nil || r.service != first.service || r.paused {
		t.Fatalf("hit after 6m = %+v, %v; want a local hit on %s", r, err, first.service)
	}
	a.Advance(time.Second) // the tick sends the refresh
	deadline := time.Now().Add(10 * time.Second)
	for stamp() == t0.Unix() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	refreshed := stamp()
	if refreshed < t0.Add(6*time.Minute).Unix() {
		t.Fatalf("stamp after a hit 6m later = %d, want ≥ %d (refreshed)", refreshed, t0.Add(6*time.Minute).Unix())
	}

	// 12 minutes after creation (past expire since creation, within it
	// since the hit): a proxy that never saw the key gets it from the fleet.
	b := fleetHosts(t, 1, 1, cfg, etcdAddr, t0.Add(12*time.Minute), false)[0]
	if r, err := fleetRoundTrip(b, 0, "ada"); err != nil || r.service != first.service {
		t.Fatalf("new proxy at 12m = %+v, %v; want %s from the fleet", r, err, first.service)
	}
	if n := persistMetric(b, "hashlb.persistence_fleet_hit"); n != 1 {
		t.Errorf("new proxy at 12m: persistence_fleet_hit = %d, want 1", n)
	}

	// B's fleet hit is a use too: it found the stamp a slot behind and
	// refreshes it (on its tick).
	deadline = time.Now().Add(10 * time.Second)
	for stamp() == refreshed && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := stamp(); got != t0.Add(12*time.Minute).Unix() {
		t.Fatalf("stamp after the new proxy's fleet hit at 12m = %d, want %d", got, t0.Add(12*time.Minute).Unix())
	}

	// Idle past expire + slot since then: forgotten fleet-wide.
	late := t0.Add(12 * time.Minute).Add(expire + slot + 2*time.Second)
	c := fleetHosts(t, 1, 1, cfg, etcdAddr, late, false)[0]
	if _, err := fleetRoundTrip(c, 0, "ada"); err != nil {
		t.Fatal(err)
	}
	if n := persistMetric(c, "hashlb.persistence_fleet_replaced"); n != 1 {
		t.Errorf("new proxy past expire + slot: persistence_fleet_replaced = %d, want 1 (the stale entry chosen again)", n)
	}
	if got := stamp(); got != late.Unix() {
		t.Errorf("stamp after the expired entry was replaced = %d, want %d", got, late.Unix())
	}
}

// TestFleetEtcd34: the same agreement against Debian's etcd 3.4 (its JSON
// gateway), when HASHLB_ETCD_BIN names it (./build.sh test installs it).
func TestFleetEtcd34(t *testing.T) {
	bin := etcdBinary(t)
	etcdAddr, _ := startEtcdBinary(t, bin, t.TempDir())
	hosts := fleetHosts(t, 3, 2, fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "5s", "createsPerSecond": 100000}, fourServices(), nil), etcdAddr, time.Time{}, false)
	keys := keysN("k34", 1000)
	got, _ := spray(t, hosts, keys, 3, 6)
	if split, ex := splitKeys(got); split != 0 {
		t.Errorf("etcd 3.4: %d of %d keys split, e.g. %s", split, len(keys), ex)
	}
	var created int64
	for _, h := range hosts {
		created += persistMetric(h, "hashlb.persistence_fleet_created")
	}
	if created != int64(len(keys)) {
		t.Errorf("etcd 3.4: persistence_fleet_created = %d over the proxies, want one per key (%d)", created, len(keys))
	}
}

// TestFleetSharedTransaction: requests for one new key on one worker share
// one transaction, and a request reset while it waits is neither resumed nor
// leaked: the others still get the fleet's answer, also when the one reset
// started the transaction.
func TestFleetSharedTransaction(t *testing.T) {
	etcdAddr, _ := startEtcd(t, t.TempDir())
	var delay atomic.Int64
	delay.Store(int64(300 * time.Millisecond))
	slow, _ := delayProxy(t, etcdAddr, func() time.Duration { return time.Duration(delay.Load()) })
	counted, count := countingProxy(t, slow)
	h := fleetHosts(t, 1, 1, fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "5s"}, fourServices(), nil), counted, time.Time{}, false)[0]
	// Warm up: the lease grant.
	if _, err := fleetRoundTrip(h, 0, "warm"); err != nil {
		t.Fatal(err)
	}
	// share sends n requests for the new key id, resets the reset-th while
	// they all wait for etcd, and returns the services the others were
	// served by and how many transactions reached etcd meanwhile.
	share := func(id string, n, reset int) (map[string]bool, int64) {
		before := count("/v3/kv/txn")
		var streams []*hostsim.Stream
		for range n {
			s := h.Stream(0)
			if res := s.RequestHeaders(persistReq{id: id}.headers(), persistReq{}.props()); res.Action != hostsim.ActionPause {
				t.Fatalf("request for a new key: action %v, want Pause while etcd answers", res.Action)
			}
			streams = append(streams, s)
		}
		if err := streams[reset].Finish(); err != nil {
			t.Fatal(err)
		}
		services := map[string]bool{}
		for i, s := range streams {
			if i == reset {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			res := s.Wait(ctx)
			cancel()
			if res.Err != nil || res.Action != hostsim.ActionContinue {
				t.Fatalf("stream %d, stream %d reset: Wait = %+v, want it resumed with etcd's answer", i, reset, res)
			}
			svc, _ := res.Header("x-hashlb-service")
			services[svc] = true
			if _, err := finishStream(s); err != nil {
				t.Fatal(err)
			}
		}
		return services, count("/v3/kv/txn") - before
	}
	// noneActive: every service's active count is back to zero, nothing
	// leaked by the reset stream.
	noneActive := func(after string) {
		h.Advance(time.Second)
		for _, s := range fourServices() {
			if m, _ := h.Metric("hashlb.service." + s.Name + ".active"); m.Value != 0 {
				t.Errorf("%s: service %s active = %d, want 0", after, s.Name, m.Value)
			}
		}
	}

	// Reset the second: not the request the callout answers to.
	services, n := share("shared", 5, 1)
	if n != 1 {
		t.Errorf("5 requests for one new key on one worker sent %d transactions, want 1", n)
	}
	if len(services) != 1 {
		t.Errorf("requests sharing one transaction went to %v, want one service", services)
	}
	noneActive("after every stream ended")

	// Reset the request that started the transaction: its answer still
	// comes (the host answers every call on the root context, where the
	// filter registers it), so the others get the fleet's service, and
	// etcd holds the key.
	served, n := share("orphan", 3, 0)
	if n != 1 {
		t.Errorf("3 requests for one new key, the first reset, sent %d transactions, want 1", n)
	}
	v, ok := etcdGet(t, etcdAddr, fleet.Key("/hashlb/"+persistRootID+"/", []byte("orphan")))
	rec, _ := fleet.ParseRecord(v)
	var want string
	for _, d := range fourServices() {
		if served[d.Name] {
			want = d.Address
		}
	}
	if len(served) != 1 || !ok || rec.Service != want {
		t.Errorf("after the first request's reset: the others went to %v, etcd holds %q (found %v), want one service, the one etcd holds", served, v, ok)
	}
	noneActive("after the caller's reset")
}
