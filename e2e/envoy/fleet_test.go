package envoy

// The fleet in real Envoy: three Envoys, each running
// configs/envoy-fleet.yaml (only ports moved) with 4 workers, and one etcd
// (Debian's 3.4), as the hostsim fleet tests run three hostsim proxies
// (e2e/fleet_test.go, e2e/fleet_faults_test.go). docs/persistence.md
// ("Fleet-wide persistence through etcd") is the protocol under test.

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lateness"
)

// fleetBound is the bound on agreement after etcd answers again: the
// hostsim fault tests' 10 s (TestFleetFaults).
const fleetBound = 10 * time.Second

// TestFleetEnvoysAgree: keys placed through one Envoy are served by the
// same backend through the two others (etcd decided them once for the
// fleet); then etcd is SIGKILLed for 3 s while traffic goes on through all
// three, new keys reaching every Envoy meanwhile (each decides them
// locally, so they split), and restarted on the same data. Every request
// is answered throughout, and from 10 s after etcd answers again all three
// Envoys send every key to the same backend: 0 keys split.
func TestFleetEnvoysAgree(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		meter := lateness.Start()
		defer meter.Stop()
		etcd := startFleetEtcd(t)
		bs := envoyrun.StartBackends(t, 3)
		ports := bootstrapHTTPPorts(bs)
		ports[2379] = fleetPort(etcd.client)
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/envoy-fleet.yaml"), ports)
		es := fleetStartEnvoys(t, bin, yaml, 3)
		var urls []string
		for _, e := range es {
			urls = append(urls, "http://"+e.MustListener(t, "hashlb_listener"))
		}

		// 1. Placement: every key of A through Envoy 0, then through 1 and 2.
		keysA := fleetKeys("a", 300)
		var jobs []fleetJob
		for _, k := range keysA {
			jobs = append(jobs, fleetJob{k, 0})
		}
		placedRecs, err := fleetSend(fleetAsk, urls, jobs, 8, 1)
		if err != nil {
			t.Fatal(err)
		}
		placed := map[string]string{}
		for _, r := range placedRecs {
			placed[r.key] = r.backend
		}
		if n := len(fleetDistinct(placed)); n < 2 {
			t.Fatalf("Envoy 0 placed 300 keys from random paths on %d backend(s): URLHASH is not proposing", n)
		}
		inEtcd, err := etcd.keys("/hashlb/")
		if err != nil {
			t.Fatal(err)
		}
		// A key Envoy 0 decided locally (its call failed or etcd was
		// marked down: fleet.timeout is shorter than etcd's answers on a
		// loaded machine) is written when it is reconciled, later.
		local0 := fleetMetric(t, es[0], "error") + fleetMetric(t, es[0], "timeout") + fleetMetric(t, es[0], "skipped")
		if len(inEtcd) > len(keysA) || int64(len(inEtcd)) < int64(len(keysA))-local0 {
			t.Errorf("etcd holds %d keys under /hashlb/ after Envoy 0 placed %d, %d of them possibly decided locally", len(inEtcd), len(keysA), local0)
		}
		jobs = jobs[:0]
		for _, k := range keysA {
			jobs = append(jobs, fleetJob{k, 1}, fleetJob{k, 2})
		}
		recs, err := fleetSend(fleetAsk, urls, jobs, 8, 2)
		if err != nil {
			t.Fatal(err)
		}
		var moved []string
		for _, r := range recs {
			if r.backend != placed[r.key] {
				moved = append(moved, fmt.Sprintf("%s: Envoy 0 placed it on %s, Envoy %d served %s", r.key, placed[r.key], r.envoy, r.backend))
			}
		}
		// A call that failed (under load: etcd slower than fleet.timeout)
		// lets a request be decided locally, as documented; only then may
		// a key differ, and it follows the fleet once reconciled.
		// A request that asks nothing because its worker holds etcd down
		// ("skipped") is decided locally too.
		failed := int64(0)
		for _, e := range es[1:] {
			for _, n := range []string{"error", "timeout", "skipped"} {
				failed += fleetMetric(t, e, n)
			}
		}
		if len(moved) > int(failed) {
			t.Errorf("%d of %d requests through Envoys 1 and 2 got another backend than Envoy 0 placed the key on, with %d failed etcd calls: %v",
				len(moved), len(recs), failed, moved)
		} else if len(moved) > 0 {
			t.Logf("%d requests decided locally after %d failed etcd calls: %v", len(moved), failed, moved)
		}
		hits := fleetMetric(t, es[1], "hit") + fleetMetric(t, es[2], "hit")
		if hits < int64(len(recs))-failed {
			t.Errorf("Envoys 1 and 2 answered %d requests for keys Envoy 0 placed, %d of them from etcd (persistence_fleet_hit) with %d failed calls", len(recs), hits, failed)
		}
		// The local level is shared by the 4 workers: the keys again
		// through Envoy 1, on new connections (other workers than the
		// first time, mostly), are local hits, and ask etcd nothing.
		localBefore, fleetBefore := es[1].Stat(t, "wasmcustom.hashlb.persistence_hit"), fleetMetric(t, es[1], "hit")
		jobs = jobs[:0]
		for _, k := range keysA[:100] {
			jobs = append(jobs, fleetJob{k, 1})
		}
		again, err := fleetSend(fleetAsk, urls, jobs, 8, 9)
		if err != nil {
			t.Fatal(err)
		}
		// A key Envoy 1 decided locally above stays so in its local table
		// until reconciled; the others are the fleet's.
		local := map[string]bool{}
		for _, r := range recs {
			if r.envoy == 1 && r.backend != placed[r.key] {
				local[r.key] = true
			}
		}
		for _, r := range again {
			if r.backend != placed[r.key] && !local[r.key] {
				t.Errorf("%s again through Envoy 1: %s, placed on %s", r.key, r.backend, placed[r.key])
			}
		}
		// hashlb's counters reach Envoy's stats on the next tick (1 s).
		localHits, _ := waitStatIs(t, es[1], "wasmcustom.hashlb.persistence_hit", func(v int64) bool { return v-localBefore >= 100 })
		localHits -= localBefore
		if d := fleetMetric(t, es[1], "hit") - fleetBefore; localHits != 100 || d != 0 {
			t.Errorf("100 known keys again through Envoy 1's workers: %d local hits, %d etcd hits; want 100 and 0", localHits, d)
		}
		t.Logf("placement: %d keys on %v by Envoy 0 (etcd holds %d); Envoys 1 and 2: %d fleet hits, %d failed calls; workers that took connections: %v",
			len(placed), fleetDistinct(placed), len(inEtcd), hits, failed, fleetWorkers(t, es))

		// 2. etcd killed while traffic goes on, restarted on the same data.
		keysB := fleetKeys("b", 100)
		load := startFleetLoad(fleetAsk, urls, keysA, 100)
		time.Sleep(time.Second)
		killed := time.Now()
		etcd.kill()
		// Every key of B through every Envoy while etcd is down.
		outage, err := fleetSend(fleetAsk, urls, everyEnvoy(keysB, len(es), 3), 3, 3)
		if err != nil {
			t.Errorf("a request while etcd was down: %v", err)
		}
		load.setKeys(append(slices.Clone(keysA), keysB...))
		time.Sleep(time.Until(killed.Add(3 * time.Second)))
		if err := etcd.restart(); err != nil {
			load.stop()
			t.Fatal(err)
		}
		healed := time.Now()
		time.Sleep(time.Until(healed.Add(fleetBound)))
		loadRecs, loadErrs := load.stop()
		for _, err := range loadErrs {
			t.Errorf("a request of the steady load: %v", err)
		}

		// 3. From healed + 10 s: every key through every Envoy, again
		// until none splits, for 10 s widened by the lateness measured
		// (each of the fleet's 1 s retries and reconcile passes may fire
		// that late).
		all := append(slices.Clone(keysA), keysB...)
		var sweep []fleetRec
		for pass := uint64(5); ; pass++ {
			recs, err := fleetSend(fleetAsk, urls, everyEnvoy(all, len(es), pass), 8, pass)
			if err != nil {
				t.Fatal(err)
			}
			sweep = append(sweep, recs...)
			n, ex := fleetSplitKeys(recs)
			if n == 0 {
				break
			}
			if bound := lateness.Widen(fleetBound, meter.Late(), 10); time.Since(healed) > bound {
				t.Errorf("%d of %d keys still split %v after etcd was back (all three Envoys asked for every key), e.g. %s %s",
					n, len(all), time.Since(healed).Round(time.Millisecond), ex, lateness.Note(meter.Late(), "the bound is 10 s widened by ten times that"))
				break
			}
		}

		// The fault was real: B keys split while etcd was down, each Envoy
		// logged etcd down and back, and the fleet reconciled.
		splitOut, _ := fleetSplitKeys(outage)
		if splitOut == 0 {
			t.Errorf("no key of B split while etcd was down (%d requests): the outage did not reach hashlb", len(outage))
		}
		for i, e := range es {
			log := e.Log()
			if !strings.Contains(log, fleetDownLine) || !strings.Contains(log, fleetBackLine) {
				t.Errorf("Envoy %d did not log etcd down and back:\n%s", i, fleetLogLines(log))
			}
		}
		var worst time.Duration
		for _, r := range append(slices.Clone(outage), loadRecs...) {
			if r.at.After(killed) && r.at.Before(healed) {
				worst = max(worst, r.took)
			}
		}
		converged := time.Duration(0)
		last, ex := fleetLastSplit(loadRecs, healed)
		if !last.IsZero() {
			converged = last.Sub(healed)
		}
		t.Logf("outage %v: %d requests meanwhile, longest %v; %d of %d B keys split during it; converged %v after etcd answered (%s); load %d requests; sweep %d requests",
			healed.Sub(killed).Round(time.Millisecond), len(outage), worst.Round(time.Millisecond), splitOut, len(keysB),
			converged.Round(time.Millisecond), ex, len(loadRecs), len(sweep))
		var reconciled, followed int64
		for i, e := range es {
			m := map[string]int64{}
			for _, n := range []string{"hit", "created", "error", "timeout", "skipped", "reconciled", "followed", "resynced"} {
				m[n] = fleetMetric(t, e, n)
			}
			reconciled += m["reconciled"]
			followed += m["followed"]
			t.Logf("Envoy %d: fleet metrics %v; cluster hashlb_etcd %v; log:\n%s", i, m, fleetClusterStats(t, e), fleetLogLines(e.Log()))
		}
		if reconciled+followed == 0 {
			t.Errorf("no key was reconciled or followed after etcd came back")
		}
	})
}

// TestFleetEtcdCallsInEnvoy records what Envoy puts on the wire for the
// module's proxy_http_call to etcd, and what the module gets when etcd is
// too slow or gone, through one Envoy whose hashlb_etcd cluster points at a
// recorder in front of etcd: the calls are POSTs of JSON to etcd's gateway
// with the cluster name as :authority and no x-forwarded-for; an answer
// later than fleet.timeout and a refused connection each leave the request
// served at once with a local decision, and a worker whose calls failed 3
// times logs etcd down, then back within seconds of etcd listening again
// (its tick probes it every second).
func TestFleetEtcdCallsInEnvoy(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		etcd := startFleetEtcd(t)
		rec := startFleetRecorder(t, etcd.client)
		bs := envoyrun.StartBackends(t, 3)
		ports := bootstrapHTTPPorts(bs)
		ports[2379] = fleetPort(rec.addr)
		yaml := envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/envoy-fleet.yaml"), ports)
		e := fleetStartEnvoys(t, bin, yaml, 1)[0]
		url := "http://" + e.MustListener(t, "hashlb_listener")
		rng := rand.New(rand.NewPCG(7, 8))
		ask := func(id string) fleetReply {
			t.Helper()
			rep, err := fleetAsk(url, id, fleetPath(rng))
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}

		// Calls as sent.
		for i := range 8 {
			ask(fmt.Sprintf("wire-%d", i))
		}
		wire := rec.requests()
		byPath := map[string]int{}
		for _, w := range wire {
			byPath[w.path]++
			if w.method != "POST" || w.host != "hashlb_etcd" {
				t.Errorf("%s %s Host %q: want POST with the cluster name as :authority", w.method, w.path, w.host)
			}
			for _, h := range w.headers {
				if n, _, _ := strings.Cut(h, ":"); strings.EqualFold(n, "x-forwarded-for") {
					t.Errorf("%s carries %q", w.path, h)
				}
			}
			if !slices.ContainsFunc(w.headers, func(h string) bool { return strings.EqualFold(h, "content-type: application/json") }) {
				t.Errorf("%s without content-type application/json: %q", w.path, w.headers)
			}
		}
		if byPath["/v3/kv/txn"] < 8 {
			t.Errorf("8 new keys made %d /v3/kv/txn calls (all calls: %v)", byPath["/v3/kv/txn"], byPath)
		}
		if len(wire) > 0 {
			t.Logf("calls by path %v; one as sent: %s %s\n  %s\n  body %s", byPath, wire[0].method, wire[0].path, strings.Join(wire[0].headers, "\n  "), wire[0].body)
		}

		// etcd answering later than fleet.timeout (200 ms).
		before := fleetSnapshot(t, e)
		rec.hold.Store(int64(400 * time.Millisecond))
		rec.down()
		rec.up() // new connections, so the hold applies to every call
		var slow []time.Duration
		for i := range 6 {
			slow = append(slow, ask(fmt.Sprintf("slow-%d", i)).took)
		}
		rec.hold.Store(0)
		moved := fleetDelta(t, e, before)
		t.Logf("etcd 400 ms late: requests took %v; counters moved %v", fleetRound(slow), moved)
		for _, d := range slow {
			if d > 2*time.Second {
				t.Errorf("a request took %v with etcd 400 ms late and fleet.timeout 200ms", d)
			}
		}
		// Envoy's own timeout (the call's, from fleet.timeout) ends each
		// call, and the module counts each as failed. (Not always 6: a
		// worker whose calls failed 3 times decides at once.)
		if moved["upstream_rq_timeout"] < 3 || moved["persistence_fleet_error"]+moved["persistence_fleet_timeout"] < moved["upstream_rq_timeout"] {
			t.Errorf("6 requests, etcd past the timeout: Envoy timed out %d calls, the module counted %d errors and %d timeouts",
				moved["upstream_rq_timeout"], moved["persistence_fleet_error"], moved["persistence_fleet_timeout"])
		}

		// etcd's port refusing connections.
		before = fleetSnapshot(t, e)
		rec.down()
		var dead []time.Duration
		for i := range 40 {
			dead = append(dead, ask(fmt.Sprintf("dead-%d", i)).took)
		}
		if err := e.WaitLog(fleetDownLine, waitCeiling); err != nil {
			t.Error(err)
		}
		moved = fleetDelta(t, e, before)
		t.Logf("etcd refusing: requests took %v; counters moved %v", fleetRound(dead), moved)
		// A refused connection (or one etcd's side closed) is answered at
		// once with Envoy's own 503, not after the timeout: the requests do
		// not wait.
		if med := slices.Sorted(slices.Values(dead))[len(dead)/2]; med > 100*time.Millisecond || moved["upstream_rq_503"] == 0 {
			t.Errorf("etcd refusing: median request %v, %d calls answered 503 by Envoy (%d connect failures); want well under fleet.timeout, and Envoy's 503s",
				med, moved["upstream_rq_503"], moved["upstream_cx_connect_fail"])
		}
		up := time.Now()
		rec.up()
		// Each root context that found etcd down finds it back from its
		// own tick (a probe every second).
		var down, back map[string]bool
		eventually(t, func() string { return fmt.Sprintf("threads that logged etcd down: %v; back: %v", down, back) }, func() bool {
			down, back = fleetThreads(e.Log(), fleetDownLine), fleetThreads(e.Log(), fleetBackLine)
			return len(back) >= len(down)
		})
		if len(down) == 0 {
			t.Errorf("no thread logged etcd down")
		}
		t.Logf("%d threads back %v after etcd listened again (Envoy's main thread %s among those down: %v); log:\n%s",
			len(back), time.Since(up).Round(time.Millisecond), fleetMainThread(e.Log()), down[fleetMainThread(e.Log())], fleetLogLines(e.Log()))
	})
}

// The module's log lines when a worker's fleet client finds etcd down and
// back (lbcore/fleetsteps.go, after; docs/persistence.md).
const (
	fleetDownLine = "failed 3 times in a row"
	fleetBackLine = "answers again; new keys are decided fleet-wide"
)

// fleetStartEnvoys starts n Envoys of bootstrap yaml, each in its own
// directory with 4 workers; they stop when the test ends. One at a time:
// each start compiles the module in V8 on Envoy's main thread, about 4.5 s
// of CPU, and starts at once on a busy 2-core machine would outlast
// envoyrun's 60 s readiness limit.
func fleetStartEnvoys(t testing.TB, bin envoyrun.Binary, yaml []byte, n int) []*envoyrun.Envoy {
	t.Helper()
	var es []*envoyrun.Envoy
	for i := range n {
		e, err := envoyrun.Launch(bin, envoyrun.Options{Bootstrap: yaml, Dir: envoyrun.WorkDir(t), Concurrency: 4})
		if err != nil {
			t.Fatalf("Envoy %d: %v", i, err)
		}
		t.Cleanup(func() {
			e.Stop()
			if t.Failed() {
				t.Logf("Envoy %d (%s) log (tail):\n%s", i, bin.Version, e.LogTail(40))
			}
		})
		es = append(es, e)
	}
	return es
}

// fleetMetric is hashlb's counter persistence_fleet_<name> in Envoy's
// /stats (wasmcustom.hashlb.persistence_fleet_<name>).
func fleetMetric(t testing.TB, e *envoyrun.Envoy, name string) int64 {
	t.Helper()
	return e.Stat(t, "wasmcustom.hashlb.persistence_fleet_"+name)
}

// fleetSnapshot is every stat of e now.
func fleetSnapshot(t testing.TB, e *envoyrun.Envoy) map[string]int64 {
	t.Helper()
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fleetDelta is how the fleet's counters and the hashlb_etcd cluster's
// request counters moved since before.
func fleetDelta(t testing.TB, e *envoyrun.Envoy, before map[string]int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for k, v := range fleetSnapshot(t, e) {
		if d := v - before[k]; d != 0 && fleetStatRE.MatchString(k) {
			out[strings.TrimPrefix(strings.TrimPrefix(k, "wasmcustom.hashlb."), "cluster.hashlb_etcd.")] = d
		}
	}
	return out
}

var fleetStatRE = regexp.MustCompile(`^wasmcustom\.hashlb\.persistence_fleet_|^cluster\.hashlb_etcd\.(upstream_rq_|upstream_cx_connect_fail|upstream_cx_total|internal\.upstream_rq_|outlier_detection\.ejections_enforced_total|lb_healthy_panic)|^listener\.127\.0\.0\.1_[0-9]+\.worker_[0-9]+\.downstream_cx_total$`)

// fleetClusterStats are the hashlb_etcd cluster's request counters.
func fleetClusterStats(t testing.TB, e *envoyrun.Envoy) map[string]int64 {
	t.Helper()
	return fleetDelta(t, e, map[string]int64{})
}

// fleetWorkers is, per Envoy, how many of its workers accepted connections
// (Envoy's per-worker listener counters).
func fleetWorkers(t testing.TB, es []*envoyrun.Envoy) []int {
	t.Helper()
	var out []int
	for _, e := range es {
		n := 0
		for k, v := range fleetSnapshot(t, e) {
			if fleetWorkerRE.MatchString(k) && v > 0 {
				n++
			}
		}
		out = append(out, n)
	}
	return out
}

var fleetWorkerRE = regexp.MustCompile(`^listener\.127\.0\.0\.1_[0-9]+\.worker_[0-9]+\.downstream_cx_total$`)

// fleetLogLines are the fleet's lines of an Envoy log.
func fleetLogLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "fleet") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// fleetThreads are the thread ids of an Envoy log's lines holding substr.
func fleetThreads(log, substr string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(log, "\n") {
		if m := fleetThreadRE.FindStringSubmatch(l); m != nil && strings.Contains(l, substr) {
			out[m[1]] = true
		}
	}
	return out
}

// fleetMainThread is the thread id of Envoy's main thread (its [main] lines).
func fleetMainThread(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if m := fleetThreadRE.FindStringSubmatch(l); m != nil && strings.Contains(l, "][main]") {
			return m[1]
		}
	}
	return ""
}

var fleetThreadRE = regexp.MustCompile(`^\[[^]]+\]\[([0-9]+)\]`)

// fleetDistinct is the set of backends of placed.
func fleetDistinct(placed map[string]string) []string {
	var out []string
	for _, b := range placed {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

func fleetRound(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
