package envoy

// The load-balancing policy's persistence.fleet in real Envoy: three
// Envoys (1.38 to 1.40) with configs/envoy-lbpolicy-fleet.yaml's policy
// configuration, its etcd members moved to a three-member cluster embedded
// in the test (fleettest.StartCluster), echo backends on loopback. A split
// key is one client answered by two backends through different Envoys.
//
// The policy's fleet while its etcd cluster, or one of its proxies, fails
// under a steady load: members killed in the test process's cluster
// (TestLBPolicyFleetFaults), members that hang, lose quorum by hanging,
// or are wiped and added back, in processes of their own, and a proxy's
// Envoy restarted (TestLBPolicyFleetHangs).

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/fleettest"
	"github.com/hashlb/hashlb/internal/lateness"
)

// policyFleetCluster is the cluster of the fleet tests' Envoys.
const policyFleetCluster = "hashlb_hosts"

// shippedFleetPolicy is configs/envoy-lbpolicy-fleet.yaml's policy
// configuration with its three etcd members replaced by eps, and a create
// budget the tests' bursts of new keys stay under (the shipped file keeps
// the default, 100 a second).
func shippedFleetPolicy(t testing.TB, eps []string) string {
	t.Helper()
	file := string(envoyrun.ReadRepoFile(t, "configs/envoy-lbpolicy-fleet.yaml"))
	i := strings.Index(file, "value: |\n")
	if i < 0 {
		t.Fatal("configs/envoy-lbpolicy-fleet.yaml: no policy configuration")
	}
	js := file[i+len("value: |\n"):]
	shipped := []string{"127.0.0.1:2379", "127.0.0.1:22379", "127.0.0.1:32379"}
	if len(eps) != len(shipped) {
		t.Fatalf("%d etcd members, the shipped file names %d", len(eps), len(shipped))
	}
	for k, s := range shipped {
		q := fmt.Sprintf("%q", s)
		if !strings.Contains(js, q) {
			t.Fatalf("configs/envoy-lbpolicy-fleet.yaml no longer names etcd member %s", s)
		}
		js = strings.Replace(js, q, fmt.Sprintf("%q", eps[k]), 1)
	}
	const timeout = `"timeout": "1s"`
	if !strings.Contains(js, timeout) {
		t.Fatalf("configs/envoy-lbpolicy-fleet.yaml: no %s", timeout)
	}
	return strings.Replace(js, timeout, timeout+`, "createsPerSecond": 100000`, 1)
}

// policyFleetAsk is fleetAsk through a policy Envoy: GET path with
// x-client-id id, routed to the policy's cluster; the backend that answered
// a 200, anything else an error.
func policyFleetAsk(url, id, path string) (fleetReply, error) {
	resp, body, took, err := fleetGet(url, id, path, "x-test-cluster", policyFleetCluster)
	if err != nil {
		return fleetReply{}, err
	}
	rep := fleetReply{took: took, backend: resp.Header.Get("X-Backend")}
	if resp.StatusCode != 200 || rep.backend == "" {
		return rep, fmt.Errorf("GET %s (%s): %d %s", path, id, resp.StatusCode, body)
	}
	return rep, nil
}

// policyFleet is three Envoys of bin with the shipped fleet policy over a
// three-member etcd, balancing backends b1..b3; b4 is started for a
// scale-up.
type policyFleet struct {
	etcd *fleettest.Cluster // nil when the test started its own
	c    policyCluster
	b4   *envoyrun.Backend
	es   []*policyEnvoy
	urls []string
}

func startPolicyFleet(t *testing.T, bin envoyrun.Binary) *policyFleet {
	t.Helper()
	etcd := fleettest.StartCluster(t, 3)
	f := startPolicyFleetOn(t, bin, etcd.Endpoints())
	f.etcd = etcd
	return f
}

// startPolicyFleetOn is startPolicyFleet over the etcd members at eps
// (host:port) the caller started; its etcd is nil.
func startPolicyFleetOn(t testing.TB, bin envoyrun.Binary, eps []string) *policyFleet {
	t.Helper()
	f := &policyFleet{}
	bs := envoyrun.StartBackends(t, 4)
	f.b4 = bs[3]
	f.c = policyCluster{name: policyFleetCluster, config: shippedFleetPolicy(t, eps)}
	for _, b := range bs[:3] {
		f.c.eps = append(f.c.eps, policyEndpoint{b: b, name: b.Name})
	}
	for range 3 {
		e := startPolicy(t, bin, []policyCluster{f.c})
		f.es = append(f.es, e)
		f.urls = append(f.urls, "http://"+e.addr)
	}
	return f
}

// scaleUp adds b4 to every Envoy's EDS file and waits until each Envoy's
// workers have it.
func (f *policyFleet) scaleUp(t *testing.T) {
	t.Helper()
	c := f.c
	c.eps = append(slices.Clone(c.eps), policyEndpoint{b: f.b4, name: f.b4.Name})
	for _, e := range f.es {
		mark := len(e.Log())
		writePolicyEDS(t, e.Dir, c)
		e.waitHosts(t, c.name, 4, mark)
	}
	f.c = c
}

// zipfJobs are n requests for keys drawn from keys by a Zipf law (a few
// clients send most requests), each through a random one of envoys.
func zipfJobs(keys []string, n, envoys int, seed uint64) []fleetJob {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	z := rand.NewZipf(rng, 1.2, 1, uint64(len(keys)-1))
	jobs := make([]fleetJob, n)
	for i := range jobs {
		jobs[i] = fleetJob{key: keys[z.Uint64()], envoy: rng.IntN(envoys)}
	}
	return jobs
}

// placedBy is each key's backend in recs, where every key has one.
func placedBy(recs []fleetRec) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		m[r.key] = r.backend
	}
	return m
}

// policyFleetSettle is how long after its last new key the fleet has
// settled on a quiet machine: a proposal's call, the watch's event to the
// other proxies, and a retry of a call that failed.
const policyFleetSettle = 3 * time.Second

// placedOnce is placeAndSweep judged: it logs the placement and fails the
// test when a client seen is on more than one backend after the wait. It
// returns the clients seen and the sweep.
func placedOnce(t *testing.T, ask fleetAsker, urls, keys []string, draws int, seed uint64, m *lateness.Meter) (seen []string, sweep []fleetRec) {
	t.Helper()
	first, seen, settle, sweep := placeAndSweep(t, ask, urls, keys, draws, seed, m)
	racing, _ := fleetSplitKeys(first)
	n, ex := fleetSplitKeys(sweep)
	t.Logf("%d Zipf requests over %d keys (%d clients seen, %d answered by two backends while the Envoys raced); %v later every client through every Envoy: %d split",
		len(first), len(keys), len(seen), racing, settle.Round(time.Millisecond), n)
	if n > 0 {
		t.Fatalf("%d of %d clients split %v after the last new one %s; e.g. %s", n, len(seen), settle.Round(time.Millisecond),
			lateness.Note(m.Late(), "the wait is widened by 4 × that"), ex)
	}
	return seen, sweep
}

// placeAndSweep sends draws Zipf-drawn requests of keys through the
// Envoys at urls with ask, waits policyFleetSettle widened by m's
// lateness, then asks every client seen through every Envoy: the first
// requests, the clients they saw, the wait and the sweep.
func placeAndSweep(t *testing.T, ask fleetAsker, urls, keys []string, draws int, seed uint64, m *lateness.Meter) (first []fleetRec, seen []string, settle time.Duration, sweep []fleetRec) {
	t.Helper()
	first, err := fleetSend(ask, urls, zipfJobs(keys, draws, len(urls), seed), 12, seed)
	if err != nil {
		t.Fatal(err)
	}
	settle = lateness.Widen(policyFleetSettle, m.Late(), 4)
	time.Sleep(settle)
	for k := range placedBy(first) {
		seen = append(seen, k)
	}
	sweep, err = fleetSend(ask, urls, everyEnvoy(seen, len(urls), seed+1), 12, seed+1)
	if err != nil {
		t.Fatal(err)
	}
	return first, seen, settle, sweep
}

// TestLBPolicyFleet: three Envoys with the policy, persistence.fleet over a
// three-member etcd (configs/envoy-lbpolicy-fleet.yaml's configuration):
// Zipf-drawn clients through every Envoy at once, each Envoy's round robin
// placing a new client its own way; once settled, every client is answered
// by one backend through every Envoy. After a scale-up (a fourth backend
// added to every Envoy's EDS) every client already placed stays on its
// backend through every Envoy, and new clients spread over the four, the
// new one included, again one backend each.
func TestLBPolicyFleet(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		f := startPolicyFleet(t, bin)
		m := lateness.Start()
		defer m.Stop()
		keys := fleetKeys("zipf", 400)
		seen, sweep := placedOnce(t, policyFleetAsk, f.urls, keys, 3000, 1, m)
		if len(seen) < 50 {
			t.Fatalf("only %d clients seen: the Zipf draw placed too few to judge", len(seen))
		}
		before := placedBy(sweep)
		spread := map[string]int{}
		for _, b := range before {
			spread[b]++
		}
		if len(spread) != 3 {
			t.Errorf("the placed clients reached %v: want all three backends", spread)
		}

		f.scaleUp(t)
		fresh := fleetKeys("fresh", 200)
		placed, err := fleetSend(policyFleetAsk, f.urls, zipfJobs(fresh, 600, 3, 3), 12, 3)
		if err != nil {
			t.Fatal(err)
		}
		settle := lateness.Widen(policyFleetSettle, m.Late(), 4)
		time.Sleep(settle)
		all := slices.Clone(seen)
		for k := range placedBy(placed) { // the new clients drawn (a sweep of others would race)
			all = append(all, k)
		}
		after, err := fleetSend(policyFleetAsk, f.urls, everyEnvoy(all, 3, 4), 12, 4)
		if err != nil {
			t.Fatal(err)
		}
		if n, ex := fleetSplitKeys(after); n > 0 {
			t.Fatalf("after the scale-up %d clients split; e.g. %s", n, ex)
		}
		moved, onNew := 0, map[string]int{}
		for _, r := range after {
			if was, ok := before[r.key]; ok && was != r.backend {
				moved++
				if moved == 1 {
					t.Errorf("client %s moved from %s to %s through Envoy %d after the scale-up", r.key, was, r.backend, r.envoy)
				}
			}
			if strings.HasPrefix(r.key, "fresh") {
				onNew[r.backend]++
			}
		}
		t.Logf("after the scale-up: %d answers of placed clients moved; new clients' answers by backend %v", moved, onNew)
		if moved > 0 {
			t.Errorf("%d answers of clients placed before the scale-up came from another backend", moved)
		}
		if onNew[f.b4.Name] == 0 || len(onNew) != 4 {
			t.Errorf("new clients after the scale-up reached %v: want all four backends, %s included", onNew, f.b4.Name)
		}
	})
}

// TestLBPolicyFleetCredentials: the fleet's etcd credentials come from
// Envoy's own environment: a user without a password, or a password file
// Envoy cannot read, stops Envoy at load with hashlb's message naming the
// variable, and the password never appears in Envoy's output.
func TestLBPolicyFleetCredentials(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := buildPolicy(t, "")
		b := envoyrun.StartBackend(t, "b1")
		config := shippedFleetPolicy(t, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
		const secret = "pw-never-shown"
		for _, c := range []struct {
			env  []string
			want string
		}{
			{[]string{"HASHLB_ETCD_USER=hashlb"}, "hashlb: configuration refused: persistence.fleet: HASHLB_ETCD_USER is set without a password"},
			{[]string{"HASHLB_ETCD_USER=hashlb", "HASHLB_ETCD_PASSWORD=" + secret, "HASHLB_ETCD_PASSWORD_FILE=/nonexistent/pw"},
				"HASHLB_ETCD_PASSWORD and HASHLB_ETCD_PASSWORD_FILE are both set"},
			{[]string{"HASHLB_ETCD_CA_FILE=/nonexistent/ca.crt"}, "HASHLB_ETCD_CA_FILE: open /nonexistent/ca.crt"},
		} {
			out, err := launchPolicy(t, bin, mod, []policyCluster{{name: "fleet", config: config, eps: []policyEndpoint{{b: b}}}}, c.env...)
			if err == nil {
				t.Errorf("%v: Envoy started", c.env)
				continue
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("%v: Envoy's output lacks %q:\n%s", c.env, c.want, out)
			}
			if strings.Contains(out, secret) {
				t.Errorf("%v: Envoy's output shows the password", c.env)
			}
			t.Logf("%v: %s", c.env, lineWith(out, c.want))
		}
	})
}

// TestLBPolicyFleetMixed: a mixed fleet, two Envoys with the policy
// (configs/envoy-lbpolicy-fleet.yaml's configuration) and one with the Wasm
// filter (configs/envoy-fleet.yaml, its hashlb_etcd cluster on one member),
// sharing a prefix, an expiry and the services' identities (the filter's
// hashId is the policy's endpoint name) over a three-member etcd: the filter proposes by URLHASH of a random path, the policies by
// round robin, and once settled every Zipf-drawn client is answered by
// one backend through all three.
func TestLBPolicyFleetMixed(t *testing.T) {
	newestPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		wasmBins := envoyrun.Binaries(t)
		wasmBin := wasmBins[len(wasmBins)-1] // the newest: 1.38.3 has no V8
		etcd := fleettest.StartCluster(t, 3)
		bs := envoyrun.StartBackends(t, 3)
		const prefix = "/hashlb/mixed/"
		c := policyCluster{name: policyFleetCluster,
			config: strings.Replace(shippedFleetPolicy(t, etcd.Endpoints()), `"timeout": "1s"`, `"timeout": "1s", "prefix": "`+prefix+`"`, 1)}
		for _, b := range bs {
			c.eps = append(c.eps, policyEndpoint{b: b, name: b.Name})
		}
		var urls []string
		for range 2 {
			urls = append(urls, "http://"+startPolicy(t, bin, []policyCluster{c}).addr)
		}
		ports := bootstrapHTTPPorts(bs)
		ports[2379] = fleetPort(etcd.Endpoints()[0])
		wasm := string(envoyrun.Ports(t, envoyrun.ReadRepoFile(t, "configs/envoy-fleet.yaml"), ports))
		const fleetCfg = `"fleet": {"cluster": "hashlb_etcd", "timeout": "200ms"}`
		if !strings.Contains(wasm, fleetCfg) {
			t.Fatalf("configs/envoy-fleet.yaml has no %s", fleetCfg)
		}
		wasm = strings.Replace(wasm, fleetCfg, `"expire": "1d", "fleet": {"cluster": "hashlb_etcd", "timeout": "200ms", "prefix": "`+prefix+`"}`, 1)
		// One identity per service on both sides: the policy's is the
		// endpoint's hashlb.name, the filter's its hashId (else its address).
		for _, b := range bs {
			named := fmt.Sprintf(`{"name": %q, "address"`, b.Name)
			if !strings.Contains(wasm, named) {
				t.Fatalf("configs/envoy-fleet.yaml has no service %s", named)
			}
			wasm = strings.Replace(wasm, named, fmt.Sprintf(`{"name": %q, "hashId": %q, "address"`, b.Name, b.Name), 1)
		}
		we := fleetStartEnvoys(t, wasmBin, []byte(wasm), 1)[0]
		wasmURL := "http://" + we.MustListener(t, "hashlb_listener")
		urls = append(urls, wasmURL)
		ask := func(url, id, path string) (fleetReply, error) {
			if url == wasmURL {
				return fleetAsk(url, id, path)
			}
			return policyFleetAsk(url, id, path)
		}

		m := lateness.Start()
		defer m.Stop()
		keys := fleetKeys("mixed", 300)
		first, seen, settle, sweep := placeAndSweep(t, ask, urls, keys, 2000, 5, m)
		racing, _ := fleetSplitKeys(first)
		n, ex := fleetSplitKeys(sweep)
		byEnvoy := map[int]int{}
		for _, r := range first {
			byEnvoy[r.envoy]++
		}
		t.Logf("%d Zipf requests (by Envoy, the filter's is 2: %v) over %d clients (%d split while racing); %v later through every Envoy: %d split",
			len(first), byEnvoy, len(seen), racing, settle.Round(time.Millisecond), n)
		if n > 0 {
			t.Errorf("%d of %d clients split between the policies and the filter %v after the last new one %s; e.g. %s", n, len(seen),
				settle.Round(time.Millisecond), lateness.Note(m.Late(), "the wait is widened by 4 × that"), ex)
		}
	})
}

// policyFleetFaultBound is how long after etcd serves again a quiet
// machine's fleet has settled every key placed during a fault: a call
// stuck in its 1 s timeout when etcd returned, the next retry (1 s), the
// watch opened again (1 s) and the calls themselves.
const policyFleetFaultBound = 5 * time.Second

// policyFleetTimeout is the policy's fleet.timeout in
// configs/envoy-lbpolicy-fleet.yaml; fleetTimeout the filter's in
// configs/envoy-fleet.yaml.
const (
	policyFleetTimeout = time.Second
	fleetTimeout       = 200 * time.Millisecond
)

// fleetFault is one fault under load: hit starts it (l is the load, to
// take an Envoy out of service) and returns heal, which ends it and
// returns once etcd, or the Envoy, serves again; the fault lasts outage
// between the two. apart: some new clients must be placed apart while it
// lasts (the fault reaches the fleet).
type fleetFault struct {
	name   string
	hit    func(l *fleetLoad) (heal func() error, err error)
	outage time.Duration
	apart  bool
}

// runFleetFaults runs faults one after another under a steady load of 120
// requests a second through the Envoys at urls (a fault may change one),
// sent with ask, while clients never seen before arrive with each fault.
// For each, every request is answered with a 2xx (no request fails for
// etcd), and from base (widened by the lateness the test measured) after
// the fault is healed, no client is answered by two backends through two
// Envoys: the load's last split is before that, and every client through
// every Envoy then is 0 split (clients first met after the heal race as
// in a healthy fleet, and are left to the sweep). The bound counts from
// the heal, or from a later moment etcd answered slower than the fleet's
// call timeout (slow): a key decided locally then settles by the bound
// after it. The Envoys' p99 steady and during the fault is logged.
func runFleetFaults(t *testing.T, ask fleetAsker, urls []string, base time.Duration, slow *etcdSlow, faults []fleetFault) {
	t.Helper()
	m := lateness.Start()
	defer m.Stop()
	keys := fleetKeys("steady", 100)
	for _, fault := range faults {
		fresh := fleetKeys(strings.ReplaceAll(fault.name, " ", "-"), 150)
		load := startFleetLoad(ask, urls, keys, 120)
		start := time.Now()
		time.Sleep(3 * time.Second)
		hit, healed, err := fault.apply(load, func() {
			load.setKeys(append(slices.Clone(keys), fresh...))
			time.Sleep(fault.outage)
		})
		if err != nil {
			load.stop()
			t.Fatal(err)
		}
		bound := lateness.Widen(base, m.Late(), 4)
		time.Sleep(bound + 2*time.Second)
		recs, errs := load.stop()
		for i, err := range errs {
			if i < 5 {
				t.Errorf("%s: a request of the load failed: %v", fault.name, err)
			}
		}
		keys = append(keys, fresh...)
		seen := placedBy(recs)
		var asked []string
		for _, k := range keys {
			if _, ok := seen[k]; ok {
				asked = append(asked, k)
			}
		}
		sweep, err := fleetSend(ask, urls, everyEnvoy(asked, len(urls), 9), 12, 9)
		if err != nil {
			t.Errorf("%s: a request of the sweep: %v", fault.name, err)
		}
		n, ex := fleetSplitKeys(sweep)
		// Splits of the clients met during the fault; a client first met
		// after it races as any new client of a healthy fleet does
		// (TestLBPolicyFleet's settle).
		last, lastEx := fleetLastSplit(metBefore(recs, healed), hit)
		during, _ := fleetSplitKeys(filterRecs(recs, hit, healed))
		t.Logf("%s: %d requests (%d failed); healed %v after the fault began; clients split during it %d; last split %v after the heal (%s); sweep of %d clients %v later: %d split; p99 %v steady, %v during the fault",
			fault.name, len(recs), len(errs), healed.Sub(hit).Round(time.Millisecond), during, sinceOr(last, healed), lastEx, len(asked),
			time.Since(healed).Round(time.Millisecond), n, p99(recs, start, hit).Round(time.Millisecond), p99(recs, hit, healed).Round(time.Millisecond))
		if n > 0 {
			t.Errorf("%s: %d of %d clients split through the Envoys %v after the heal; e.g. %s", fault.name, n, len(asked),
				time.Since(healed).Round(time.Millisecond), ex)
		}
		from, since := healed, "the heal"
		if s := slow.lastSlow(); s.After(healed) && s.Before(last) {
			from, since = s, fmt.Sprintf("etcd last answered slower than the fleet's timeout (%v after the heal)", s.Sub(healed).Round(time.Millisecond))
		}
		if !last.IsZero() && last.Sub(from) > bound {
			t.Errorf("%s: a client was split %v after %s, over %v %s; %s", fault.name, last.Sub(from).Round(time.Millisecond), since, bound,
				lateness.Note(m.Late(), "the bound is widened by 4 × that"), lastEx)
		}
		if fault.apart && during == 0 {
			t.Errorf("%s: no client was placed apart while it lasted: the fault did not reach the fleet", fault.name)
		}
	}
}

// apply hits f under l, runs during while the fault lasts, then heals it:
// when it was hit, and when etcd (or the Envoy) served again.
func (f fleetFault) apply(l *fleetLoad, during func()) (hit, healed time.Time, err error) {
	hit = time.Now()
	heal, err := f.hit(l)
	if err != nil {
		return hit, hit, fmt.Errorf("%s: %v", f.name, err)
	}
	during()
	if err := heal(); err != nil {
		return hit, time.Now(), fmt.Errorf("%s: %v", f.name, err)
	}
	return hit, time.Now(), nil
}

// TestLBPolicyFleetFaults: the etcd cluster (in the test process) of three
// Envoys with the policy fails under a steady load (runFleetFaults): the
// leader killed and restarted; one member killed for 10 s; two members
// killed for 10 s (quorum lost) and restarted. Losing quorum is a fault
// the fleet sees: some new clients are placed apart while it lasts.
func TestLBPolicyFleetFaults(t *testing.T) {
	newestPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		f := startPolicyFleet(t, bin)
		c := f.etcd
		down := func(pick func(leader int) []int) func(*fleetLoad) (func() error, error) {
			return memberFault(c, pick, c.Kill, c.Restart)
		}
		runFleetFaults(t, policyFleetAsk, f.urls, policyFleetFaultBound, watchEtcdSlow(t, c.Endpoints(), policyFleetTimeout), []fleetFault{
			{"leader killed", down(func(l int) []int { return []int{l} }), 2 * time.Second, false},
			{"one member killed 10s", down(func(l int) []int { return []int{(l + 1) % 3} }), 10 * time.Second, false},
			{"quorum lost 10s", down(func(l int) []int { return []int{l, (l + 1) % 3} }), 10 * time.Second, true},
		})
	})
}

// TestLBPolicyFleetHangs: the faults that need etcd's members in processes
// of their own (fleettest.ProcCluster: Debian's etcd 3.4 with
// HASHLB_ETCD_BIN, else go.mod's etcd in child processes), and one of a
// proxy, under a steady load (runFleetFaults): the leader stopped
// (SIGSTOP) 10 s, hanging with its connections open, then resumed; two
// members stopped 10 s (quorum lost: some new clients are placed apart)
// then resumed; 30 % of the connections to one member reset for 10 s
// (fleettest.ResetProxy between the Envoys and the member); a member
// wiped and added back (killed, removed from the cluster, its data
// deleted, added again and started empty on the cluster's data); one
// proxy's Envoy stopped and started again, out of the
// load meanwhile, its table empty: its clients come back from etcd.
func TestLBPolicyFleetHangs(t *testing.T) {
	newestPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		c, rp, eps := startHangCluster(t)
		f := startPolicyFleetOn(t, bin, eps)
		restart := func(l *fleetLoad) (func() error, error) {
			const i = 2
			l.setURL(i, "")
			f.es[i].Stop()
			return func() error {
				e := startPolicy(t, bin, []policyCluster{f.c})
				f.es[i], f.urls[i] = e, "http://"+e.addr
				l.setURL(i, f.urls[i])
				return nil
			}, nil
		}
		runFleetFaults(t, policyFleetAsk, f.urls, policyFleetFaultBound, watchEtcdSlow(t, eps, policyFleetTimeout), append(hangFaults(t, c, rp, 10*time.Second),
			fleetFault{"member wiped and re-added", wipeFault(c), 2 * time.Second, false},
			fleetFault{"proxy's Envoy restarted", restart, time.Second, false},
		))
	})
}

// startHangCluster starts a three-member etcd whose members are processes
// of their own (fleettest.ProcCluster), so that they can be stopped, and a
// fleettest.ResetProxy in front of member 1: eps are the endpoints the
// proxies are given, member 1's through rp.
func startHangCluster(t testing.TB) (c *fleettest.ProcCluster, rp *fleettest.ResetProxy, eps []string) {
	t.Helper()
	c = fleettest.StartProcCluster(t, 3)
	t.Logf("etcd: %s", fleettest.EtcdImpl())
	eps = c.Endpoints()
	rp = fleettest.StartResetProxy(t, eps[0])
	eps[0] = rp.Addr
	return c, rp, eps
}

// hangFaults are the faults of etcd's members that hang rather than die,
// each lasting outage, over startHangCluster's c and rp: the leader
// stopped (SIGSTOP) and resumed; two members stopped (quorum lost: some
// new clients are placed apart) and resumed; 30 % of the connections to
// member 1 reset.
func hangFaults(t testing.TB, c *fleettest.ProcCluster, rp *fleettest.ResetProxy, outage time.Duration) []fleetFault {
	return []fleetFault{
		{fmt.Sprintf("leader stopped %v", outage), stopMembers(c, func(l int) []int { return []int{l} }), outage, false},
		{fmt.Sprintf("quorum lost by stops %v", outage), stopMembers(c, func(l int) []int { return []int{l, (l + 1) % 3} }), outage, true},
		{fmt.Sprintf("30%% of connections to a member reset %v", outage), resetFault(t, c, rp), outage, false},
	}
}

// faultCluster is what a member's fault needs of an etcd cluster
// (fleettest's Cluster and ProcCluster).
type faultCluster interface {
	Leader() int
	Wait(limit time.Duration) error
}

// memberFault is the fault that hits (kills, stops) the members of c that
// pick names, given the leader's index, and its heal, which heals each
// (restarts, resumes) and waits until the cluster serves.
func memberFault(c faultCluster, pick func(leader int) []int, hit func(i int), heal func(i int) error) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		l := c.Leader()
		if l < 0 {
			return nil, fmt.Errorf("no etcd member leads")
		}
		ms := pick(l)
		for _, i := range ms {
			hit(i)
		}
		return func() error {
			for _, i := range ms {
				if err := heal(i); err != nil {
					return err
				}
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// stopMembers is memberFault stopping (SIGSTOP) members of c and resuming
// them.
func stopMembers(c *fleettest.ProcCluster, pick func(leader int) []int) func(*fleetLoad) (func() error, error) {
	return memberFault(c, pick, c.Stop, func(i int) error { c.Cont(i); return nil })
}

// wipeFault is the fault that wipes a follower of c (or any member when
// none leads): killed, removed from the cluster, its data deleted; its
// heal adds it back, starts it empty on the cluster's data and waits until
// the cluster serves.
func wipeFault(c *fleettest.ProcCluster) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		o := (c.Leader() + 1) % 3
		if err := c.Wipe(o); err != nil {
			return nil, err
		}
		return func() error {
			if err := c.Rejoin(o); err != nil {
				return err
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// resetFault is the fault that resets 30 % of the connections through rp
// (the proxies' way to one member of c); its heal stops the resets, fails
// when none happened (the fault did not reach the fleet) and waits until
// the cluster serves.
func resetFault(t testing.TB, c *fleettest.ProcCluster, rp *fleettest.ResetProxy) func(*fleetLoad) (func() error, error) {
	return func(*fleetLoad) (func() error, error) {
		before := rp.Resets()
		rp.SetRate(0.3)
		return func() error {
			rp.SetRate(0)
			n := rp.Resets() - before
			t.Logf("connections to etcd through %s reset: %d", rp.Addr, n)
			if n == 0 {
				return fmt.Errorf("no connection to etcd through %s was reset: the fault did not reach the fleet", rp.Addr)
			}
			return c.Wait(fleettest.ClusterStart)
		}, nil
	}
}

// p99 is the 99th percentile of the took of recs answered in [from, to).
func p99(recs []fleetRec, from, to time.Time) time.Duration {
	var ds []time.Duration
	for _, r := range recs {
		if !r.at.Before(from) && r.at.Before(to) {
			ds = append(ds, r.took)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100]
}

// metBefore are the records of recs whose client was first answered
// before at.
func metBefore(recs []fleetRec, at time.Time) []fleetRec {
	first := map[string]time.Time{}
	for _, r := range recs {
		if f, ok := first[r.key]; !ok || r.at.Before(f) {
			first[r.key] = r.at
		}
	}
	var out []fleetRec
	for _, r := range recs {
		if first[r.key].Before(at) {
			out = append(out, r)
		}
	}
	return out
}

// filterRecs are the records of recs answered in [from, to).
func filterRecs(recs []fleetRec, from, to time.Time) []fleetRec {
	var out []fleetRec
	for _, r := range recs {
		if !r.at.Before(from) && r.at.Before(to) {
			out = append(out, r)
		}
	}
	return out
}

// sinceOr is how long after from at is, "none" for a zero at.
func sinceOr(at, from time.Time) string {
	if at.IsZero() {
		return "none"
	}
	return at.Sub(from).Round(time.Millisecond).String()
}
