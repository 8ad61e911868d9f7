package envoy

// hashlb as Envoy's load-balancing policy (cmd/hashlb-lbpolicy), in real
// Envoy 1.38.3, 1.39.3 and 1.40.0 with --concurrency 4: the choices are
// lbcore's over the cluster's hosts; EDS changes move exactly the keys they
// must; Envoy's active health checks take a host out and back; the
// persistence table is one per process; retries walk the ranking; a bad
// configuration is refused with hashlb's message; a choice that depends on
// the :path only is answered from the module's cache, with lbcore's answer.

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lbpolicy"
	"github.com/hashlb/hashlb/lbcore"
)

// eachPolicyEnvoy runs f per Envoy that loads the policy, in parallel.
func eachPolicyEnvoy(t *testing.T, f func(t *testing.T, bin envoyrun.Binary)) {
	for _, bin := range envoyrun.LBPolicyBinaries(t) {
		t.Run(bin.Name(), func(t *testing.T) {
			t.Parallel()
			f(t, bin)
		})
	}
}

// newestPolicyEnvoy runs f as a subtest in the newest Envoy that loads the
// policy only, as newestEnvoy does for the Wasm filter; t runs in parallel
// (t.Parallel), as eachPolicyEnvoy's subtests do.
func newestPolicyEnvoy(t *testing.T, f func(t *testing.T, bin envoyrun.Binary)) {
	t.Parallel()
	bins := envoyrun.LBPolicyBinaries(t)
	bin := bins[len(bins)-1]
	t.Run(bin.Name(), func(t *testing.T) { f(t, bin) })
}

// corpusEndpoints are the corpus's services as a cluster's endpoints:
// weights, a hashId and names as endpoint metadata; the disabled one left
// out (a cluster has no disabled hosts: removing it is how).
func corpusEndpoints(t testing.TB) []policyEndpoint {
	var eps []policyEndpoint
	for i, w := range []int{1, 2, 1, 3, 1} {
		ep := policyEndpoint{b: envoyrun.StartBackend(t, fmt.Sprintf("s%d", i+1)), weight: w, name: fmt.Sprintf("s%d", i+1)}
		if i == 3 {
			ep.hashID = "pool-4"
		}
		eps = append(eps, ep)
	}
	return eps
}

// TestLBPolicyCorpus sends the request corpus through every corpus
// configuration the policy serves (the header-reading hash methods, least
// connection, round robin), each a cluster of five hosts with weights, a
// hashId and names from endpoint metadata: a hash decision reaches the host
// lbcore ranks first over those hosts; the backup method's and the
// stateful methods' decisions reach a host of the cluster.
func TestLBPolicyCorpus(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		pcs, err := corpus.PolicyConfigs()
		if err != nil {
			t.Fatal(err)
		}
		eps := corpusEndpoints(t)
		var cs []policyCluster
		for _, pc := range pcs {
			if _, err := lbpolicy.ParseConfig(pc.Data); err != nil {
				continue // reads the connection: TestLBPolicyRefusesConfig
			}
			cs = append(cs, policyCluster{name: fmt.Sprintf("c%d", pc.Index), config: string(pc.Data), eps: eps})
		}
		if len(cs) < 7 {
			t.Fatalf("only %d corpus configurations served", len(cs))
		}
		e := startPolicy(t, bin, cs)
		reqs := corpus.AsEnvoyDecodes(corpus.Requests(corpusPerConfig))
		for _, c := range cs {
			b, svcs := policyOracle(t, c)
			hashed := 0
			for _, r := range reqs {
				w := toWire(r, []string{e.addr, e.addr, e.addr, e.addr})
				if w.method == "INVITE" {
					w.method = "GET" // the oracle's request keeps its method: no method reads it
				}
				hs := [][2]string{{":method", w.method}, {":path", w.target}, {":authority", w.host}}
				hs = append(hs, w.headers...)
				got, status := e.get(t, c.name, hs)
				if status != 200 {
					t.Fatalf("%s: %v: status %d", c.name, hs, status)
				}
				seen := w.seen("")
				want := corpus.Oracle(b, seen)
				if want.Reason != lbcore.ReasonHash {
					if !strings.HasPrefix(got, "s") {
						t.Fatalf("%s: answered by %q", c.name, got)
					}
					continue
				}
				hashed++
				if wantName := svcs[want.At(0)].Name; got != wantName {
					t.Fatalf("%s (%s): %v went to %s, lbcore chose %s", c.name, b.Config().LBMethod, hs, got, wantName)
				}
			}
			if b.Config().LBMethod.IsHash() && hashed < len(reqs)/4 {
				t.Errorf("%s: only %d of %d requests hashed", c.name, hashed, len(reqs))
			}
			t.Logf("%s (%s): %d requests, %d hash decisions as lbcore's", c.name, b.Config().LBMethod, len(reqs), hashed)
		}
		if n := e.Stat(t, "dynamicmodulescustom.no_host") + e.Stat(t, "dynamicmodulescustom.panic"); n != 0 {
			t.Errorf("%d failed choices", n)
		}
	})
}

// keysOf sends GET /k/<i> for i < n and returns the backend of each.
func keysOf(t testing.TB, e *policyEnvoy, cluster string, n int) []string {
	out := make([]string, n)
	for i := range out {
		b, st := e.getPath(t, cluster, fmt.Sprintf("/k/%d", i))
		if st != 200 {
			t.Fatalf("/k/%d: status %d", i, st)
		}
		out[i] = b
	}
	return out
}

// TestLBPolicyMembership rewrites the cluster's EDS file: a host removed
// loses exactly its keys, to the others; a host added takes about 1/(N+1)
// of the keys, and only keys that move to it; every answer is lbcore's over
// the new host set.
func TestLBPolicyMembership(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 9)
		c := policyCluster{name: "members", config: `{"lbMethod":"URLHASH"}`}
		for _, b := range bs[:8] {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		const keys = 1000
		before := keysOf(t, e, c.name, keys)
		checkOracle := func(got []string, c policyCluster) {
			b, _ := policyOracle(t, c)
			for i, g := range got {
				r := lbcore.Request{Target: fmt.Sprintf("/k/%d", i), Authority: e.addr, Method: "GET"}
				d := b.Decide(&r, corpus.Now)
				if want := backendOf(c, d.At(0)); g != want {
					t.Fatalf("/k/%d on %s, lbcore over %d hosts: %s", i, g, len(c.eps), want)
				}
			}
		}
		checkOracle(before, c)

		gone := c.eps[3].b.Name
		removed := c
		removed.eps = append(append([]policyEndpoint(nil), c.eps[:3]...), c.eps[4:]...)
		mark := len(e.Log())
		writePolicyEDS(t, e.Dir, removed)
		e.waitHosts(t, c.name, 7, mark)
		after := keysOf(t, e, c.name, keys)
		moved := 0
		for i := range after {
			switch {
			case after[i] == gone:
				t.Fatalf("/k/%d still on the removed host %s", i, gone)
			case before[i] != gone && after[i] != before[i]:
				t.Fatalf("/k/%d moved from %s to %s; only %s's keys may move", i, before[i], after[i], gone)
			case before[i] == gone:
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("the removed host %s had no keys", gone)
		}
		checkOracle(after, removed)

		added := c
		added.eps = append(append([]policyEndpoint(nil), c.eps...), policyEndpoint{b: bs[8]})
		mark = len(e.Log())
		writePolicyEDS(t, e.Dir, added)
		e.waitHosts(t, c.name, 9, mark)
		grown := keysOf(t, e, c.name, keys)
		took := 0
		for i := range grown {
			if grown[i] != before[i] {
				if grown[i] != bs[8].Name {
					t.Fatalf("/k/%d moved from %s to %s, not to the new host", i, before[i], grown[i])
				}
				took++
			}
		}
		frac := float64(took) / keys
		t.Logf("removed %s: %d of %d keys moved (its own); added %s: it took %d (%.3f, 1/9 = %.3f)", gone, moved, keys, bs[8].Name, took, frac, 1.0/9)
		if frac < 0.6/9 || frac > 1.6/9 {
			t.Errorf("the added host took %.3f of the keys, want about 1/9", frac)
		}
		checkOracle(grown, added)
	})
}

// TestLBPolicyHealth: a host whose active health check fails gets no
// request, only its keys move, to lbcore's next rank, and they come back
// when it recovers; with no healthy host a request gets Envoy's 503 and the
// policy counts it (no_host).
func TestLBPolicyHealth(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 5)
		// The requests the sick host gets besides Envoy's health probes,
		// counted while it is unhealthy.
		var counting atomic.Bool
		var misrouted atomic.Int64
		bs[2].OnRequest = func(r *http.Request) {
			if counting.Load() && r.URL.Path != "/healthz" {
				misrouted.Add(1)
			}
		}
		c := policyCluster{name: "health", config: `{"lbMethod":"URLHASH"}`, health: true}
		for _, b := range bs {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		// waitHealthy waits until Envoy's health checks found n hosts
		// healthy and every thread's policy was told: Envoy runs the
		// membership update hook on a health change, with nothing added or
		// removed, and the module logs each.
		waitHealthy := func(n int, mark int) {
			t.Helper()
			waitLog(t, e, mark, fmt.Sprintf("hashlb: cluster health: 5 hosts (%d healthy); 0 added, 0 removed", n), 5)
		}
		waitStatIs(t, e.Envoy, "cluster.health.membership_healthy", func(v int64) bool { return v == 5 })
		const keys = 600
		before := keysOf(t, e, c.name, keys)
		sick := bs[2]
		mark := len(e.Log())
		sick.Fail(503)
		waitHealthy(4, mark)
		counting.Store(true)
		during := keysOf(t, e, c.name, keys)
		counting.Store(false)
		if n := misrouted.Load(); n > 0 {
			t.Errorf("the unhealthy host got %d requests besides health probes", n)
		}
		b, _ := policyOracle(t, c, sick.Name)
		moved := 0
		for i := range during {
			if during[i] == sick.Name {
				t.Fatalf("/k/%d went to the unhealthy host", i)
			}
			if before[i] != sick.Name && during[i] != before[i] {
				t.Fatalf("/k/%d moved from %s to %s while only %s is unhealthy", i, before[i], during[i], sick.Name)
			}
			if before[i] == sick.Name {
				moved++
				r := lbcore.Request{Target: fmt.Sprintf("/k/%d", i), Authority: e.addr, Method: "GET"}
				d := b.Decide(&r, corpus.Now)
				if want := backendOf(c, d.At(0)); during[i] != want {
					t.Fatalf("/k/%d went to %s, lbcore's next rank is %s", i, during[i], want)
				}
			}
		}
		// Every host failing: no host to give, Envoy's 503, counted.
		noHost := e.Stat(t, "dynamicmodulescustom.no_host")
		mark = len(e.Log())
		for _, b := range bs {
			b.Fail(503)
		}
		waitHealthy(0, mark)
		if got, st := e.getPath(t, c.name, "/k/1"); st != 503 || got != "" {
			t.Fatalf("no healthy host: %d from %q, want Envoy's 503", st, got)
		}
		if n := e.Stat(t, "dynamicmodulescustom.no_host"); n <= noHost {
			t.Errorf("dynamicmodulescustom.no_host stayed %d with no healthy host", n)
		}
		mark = len(e.Log())
		for _, b := range bs {
			b.Fail(0)
		}
		waitHealthy(5, mark)
		after := keysOf(t, e, c.name, keys)
		for i := range after {
			if after[i] != before[i] {
				t.Fatalf("/k/%d on %s after recovery, was on %s", i, after[i], before[i])
			}
		}
		t.Logf("%s unhealthy: its %d keys moved to lbcore's next rank, the rest stayed; all back after recovery", sick.Name, moved)
	})
}

// TestLBPolicyPersistence: the persistence table is one per Envoy process,
// shared by its 4 workers: every request of a user, on connections that
// the kernel spreads over the workers, reaches the host the first one got,
// though round robin alone would spread them.
func TestLBPolicyPersistence(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 5)
		var eps []policyEndpoint
		for _, b := range bs {
			eps = append(eps, policyEndpoint{b: b})
		}
		persist := policyCluster{name: "persist", eps: eps,
			config: `{"lbMethod":"ROUNDROBIN","persistence":{"keys":["${request.header.x-user}"],"tableSize":10000}}`}
		plain := policyCluster{name: "plain", eps: eps, config: `{"lbMethod":"ROUNDROBIN"}`}
		e := startPolicy(t, bin, []policyCluster{persist, plain})
		spread := map[string]bool{}
		for i := range 20 {
			b, _ := e.get(t, plain.name, [][2]string{{"x-user", "u0"}, {":path", fmt.Sprint("/p/", i)}})
			spread[b] = true
		}
		if len(spread) < 2 {
			t.Fatalf("round robin without persistence sent every request to %v", spread)
		}
		for u := range 12 {
			user := fmt.Sprint("user-", u)
			first := ""
			for i := range 8 {
				b, st := e.get(t, persist.name, [][2]string{{"x-user", user}, {":path", fmt.Sprint("/p/", i)}})
				if st != 200 {
					t.Fatalf("status %d", st)
				}
				if first == "" {
					first = b
				} else if b != first {
					t.Fatalf("%s: request %d reached %s, the first reached %s", user, i, b, first)
				}
			}
		}
		workers := 0
		stats, err := e.Stats()
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range stats {
			if strings.HasPrefix(name, "listener.") && strings.Contains(name, ".worker_") && strings.HasSuffix(name, ".downstream_cx_total") && v > 0 {
				workers++
			}
		}
		if workers < 2 {
			t.Fatalf("the connections reached %d worker(s): the test shows nothing of sharing", workers)
		}
		t.Logf("12 users x 8 requests, on connections over %d workers: each user on one host", workers)
	})
}

// TestLBPolicyRetries: a retry (retry_on 5xx with the previous_hosts
// predicate) walks lbcore's ranking: with the first two ranks of a key
// failing, the third answers, after one attempt on each.
func TestLBPolicyRetries(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 6)
		c := policyCluster{name: "retry", config: `{"lbMethod":"URLHASH"}`, retries: true}
		for _, b := range bs {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		p, err := lbpolicy.ParseConfig([]byte(c.config))
		if err != nil {
			t.Fatal(err)
		}
		ranked := *p.Config
		ranked.UpstreamCount = 3
		_, svcs := policyOracle(t, c)
		rc, err := ranked.WithServices(append([]lbcore.Service(nil), svcs...))
		if err != nil {
			t.Fatal(err)
		}
		rb := lbcore.NewBalancer(rc, 0)
		byName := map[string]*envoyrun.Backend{}
		for _, b := range bs {
			byName[b.Name] = b
		}
		for k := range 6 {
			path := fmt.Sprintf("/retry/%d", k)
			r := lbcore.Request{Target: path, Authority: e.addr, Method: "GET"}
			d := rb.Decide(&r, corpus.Now)
			first, second, third := backendOf(c, d.At(0)), backendOf(c, d.At(1)), backendOf(c, d.At(2))
			byName[first].Fail(503)
			byName[second].Fail(503)
			n1, n2, n3 := byName[first].Requests(), byName[second].Requests(), byName[third].Requests()
			got, st := e.getPath(t, c.name, path)
			byName[first].Fail(0)
			byName[second].Fail(0)
			if st != 200 || got != third {
				t.Fatalf("%s: %d from %s; ranking %s, %s, %s with the first two failing", path, st, got, first, second, third)
			}
			if byName[first].Requests()-n1 != 1 || byName[second].Requests()-n2 != 1 || byName[third].Requests()-n3 != 1 {
				t.Fatalf("%s: attempts %d on %s, %d on %s, %d on %s; want one each", path,
					byName[first].Requests()-n1, first, byName[second].Requests()-n2, second, byName[third].Requests()-n3, third)
			}
		}
		if n := e.Stat(t, "cluster.retry.upstream_rq_retry"); n != 12 {
			t.Errorf("cluster.retry.upstream_rq_retry = %d, want 12 (two per request)", n)
		}
	})
}

// launchPolicy starts Envoy with the policy as Launch does, with env added
// to its environment, expecting it to fail, and returns Envoy's output.
func launchPolicy(t testing.TB, bin envoyrun.Binary, mod string, cs []policyCluster, env ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	e, err := envoyrun.Launch(bin, envoyrun.Options{Bootstrap: policyYAML(t, dir, cs), Dir: dir, Concurrency: 2,
		Env: append([]string{"ENVOY_DYNAMIC_MODULES_SEARCH_PATH=" + mod}, env...), ReadyTimeout: envoyReady})
	if err == nil {
		// The log is flushed every 50 ms: wait for a line written after
		// the module's.
		werr := e.WaitLog("starting main dispatch loop", waitCeiling)
		log := e.Log()
		e.Stop()
		if werr != nil {
			t.Fatal(werr)
		}
		return log, nil
	}
	return err.Error(), err
}

// TestLBPolicyRefusesConfig: a configuration the policy cannot serve, or
// that lbcore refuses, stops Envoy at load with hashlb's message in its
// log (the same message lbcore gives the filter for the same JSON).
func TestLBPolicyRefusesConfig(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := buildPolicy(t, "")
		b := envoyrun.StartBackend(t, "b1")
		for _, c := range []struct{ config, want string }{
			{`{"lbMethod":"DESTINATIONIPHASH"}`, "hashlb: configuration refused: lbMethod: DESTINATIONIPHASH hashes the address the connection was accepted on"},
			{`{"lbMethod":"SOURCEIPHASH"}`, "set trustedForwardedHops to 1 or more"},
			{`{"lbMethod":"URLHASH","services":[]}`, "hashlb: configuration refused: services: not served by the load-balancing policy"},
			{`{"lbMethod":"URLHASH","session":{"type":"cookie"}}`, "hashlb: configuration refused: session: not served by the load-balancing policy: a load-balancing policy can set no cookie or response header; use Envoy's envoy.filters.http.stateful_session filter in front of the policy"},
			{`{"lbMethod":"URLHASH","hashLength":0}`, "hashlb: configuration refused: hashLength: 0 is out of range"},
		} {
			out, err := launchPolicy(t, bin, mod, []policyCluster{{name: "bad", config: c.config, eps: []policyEndpoint{{b: b}}}})
			if err == nil {
				t.Errorf("%s: Envoy started", c.config)
				continue
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("%s: Envoy's output lacks %q:\n%s", c.config, c.want, out)
			}
			t.Logf("%s: %s", c.config, lineWith(out, c.want))
			if !strings.Contains(out, "failed to create in-module load balancer configuration") {
				t.Errorf("%s: Envoy's output lacks its own refusal:\n%s", c.config, out)
			}
		}
	})
}

// TestLBPolicyABIVersion: Envoy compares the version the module's program
// init returns with its own. The module's is the oldest supported Envoy's,
// v0.1.0: 1.38 and 1.39 log that it matched; 1.40 (v0.2.0) loads it with
// its warning that the version is deprecated (and serves: the other tests
// run in 1.40). A module built
// with an unknown version loads with the same warning everywhere; one that
// returns no version is refused.
func TestLBPolicyABIVersion(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		b := envoyrun.StartBackend(t, "b1")
		cs := []policyCluster{{name: "abi", config: `{"lbMethod":"URLHASH"}`, eps: []policyEndpoint{{b: b}}}}
		own := "Dynamic module ABI version v0.1.0 matched."
		if bin.AtLeast(1, 40) {
			own = "Dynamic module ABI version v0.1.0 is deprecated. Please recompile the module against the SDK with the exact Envoy version used by the main program."
		}
		for _, c := range []struct {
			ldflags, want string
			starts        bool
		}{
			{"", own, true},
			{"-X " + envoyrun.LBPolicyABIVersion + "=v0.0.9-hashlb-test", "Dynamic module ABI version v0.0.9-hashlb-test is deprecated. Please recompile the module against the SDK with the exact Envoy version used by the main program.", true},
			{"-X " + envoyrun.LBPolicyABIVersion + "=", "Failed to initialize dynamic module", false},
		} {
			mod := buildPolicy(t, c.ldflags)
			out, err := launchPolicy(t, bin, mod, cs)
			if (err == nil) != c.starts {
				t.Errorf("%q: started %v, want %v:\n%s", c.ldflags, err == nil, c.starts, out)
			}
			if !strings.Contains(out, c.want) {
				t.Errorf("%q: Envoy's output lacks %q:\n%s", c.ldflags, c.want, out)
			}
			t.Logf("%q: %s", c.ldflags, lineWith(out, c.want))
		}
	})
}

// TestLBPolicyPanicIsRecovered: a Go panic in a choice (a test build whose
// every choice panics) stays in the module: the request gets Envoy's 503,
// the panic is counted and logged, and Envoy serves on.
func TestLBPolicyPanicIsRecovered(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		mod := buildPolicy(t, "-X "+envoyrun.LBPolicyTestPanic+"=choose")
		b := envoyrun.StartBackend(t, "b1")
		dir := t.TempDir()
		c := policyCluster{name: "panic", config: `{"lbMethod":"URLHASH"}`, eps: []policyEndpoint{{b: b}}}
		e := &policyEnvoy{Envoy: startEnvoy(t, bin, envoyrun.Options{Bootstrap: policyYAML(t, dir, []policyCluster{c}), Dir: dir, Concurrency: 4,
			Env: []string{"ENVOY_DYNAMIC_MODULES_SEARCH_PATH=" + mod}})}
		e.addr = e.MustListener(t, "main")
		for i := range 5 {
			got, st := e.get(t, c.name, [][2]string{{":path", fmt.Sprint("/p/", i)}})
			if st != 503 || got != "" {
				t.Fatalf("request %d: %d from %q, want Envoy's 503", i, st, got)
			}
		}
		if n := e.Stat(t, "dynamicmodulescustom.panic"); n != 5 {
			t.Errorf("dynamicmodulescustom.panic = %d, want 5", n)
		}
		if err := e.WaitLog("hashlb: choose host: recovered from a panic, the choice gets no host: the test build's panic", waitCeiling); err != nil {
			t.Error(err)
		}
		if body, code, err := e.Get("/ready"); err != nil || code != 200 {
			t.Errorf("Envoy after the panics: /ready %d %q %v", code, body, err)
		}
		if b.Requests() != 0 {
			t.Errorf("the backend got %d requests", b.Requests())
		}
	})
}

// TestLBPolicyNeedsEnvoy138: an Envoy before 1.38 (1.36 here; 1.37 lacks
// the policy too) has no dynamic-module load-balancing policy. What a user
// sees: `envoy --mode validate` refuses the policy's bootstrap, and a real
// start, with the module on the search path, exits with status 1 (no crash,
// the module never loaded) after one critical line naming the policy's
// configuration type it cannot find.
func TestLBPolicyNeedsEnvoy138(t *testing.T) {
	const want = "could not find @type 'type.googleapis.com/envoy.extensions.load_balancing_policies.dynamic_modules.v3.DynamicModulesLoadBalancerConfig'"
	for _, bin := range envoyrun.Binaries(t) {
		if bin.AtLeast(1, 38) {
			continue
		}
		t.Run(bin.Name(), func(t *testing.T) {
			mod := buildPolicy(t, "")
			b := envoyrun.StartBackend(t, "b1")
			dir := t.TempDir()
			y := policyYAML(t, dir, []policyCluster{{name: "old", config: `{"lbMethod":"URLHASH"}`, eps: []policyEndpoint{{b: b}}}})
			err := envoyrun.Validate(bin, dir, y)
			if err == nil {
				t.Fatalf("Envoy %s accepted the policy's bootstrap", bin.Version)
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Envoy %s's refusal lacks %q: %v", bin.Version, want, err)
			}
			e, err := envoyrun.Launch(bin, envoyrun.Options{Bootstrap: y, Dir: dir, Concurrency: 2,
				Env: []string{"ENVOY_DYNAMIC_MODULES_SEARCH_PATH=" + mod}, ReadyTimeout: envoyReady})
			if err == nil {
				e.Stop()
				t.Fatalf("Envoy %s started with the policy's bootstrap", bin.Version)
			}
			out := err.Error()
			line := lineWith(out, "[critical]")
			t.Logf("Envoy %s: %.300s", bin.Version, line)
			if !strings.Contains(line, want) {
				t.Errorf("Envoy %s's critical line lacks %q:\n%s", bin.Version, want, out)
			}
			if !strings.Contains(out, "exited before it was ready (exit status 1)") {
				t.Errorf("Envoy %s did not exit with status 1:\n%s", bin.Version, out)
			}
			for _, crash := range []string{"Caught ", "signal: ", "hashlb:"} {
				if strings.Contains(out, crash) {
					t.Errorf("Envoy %s's output has %q (a crash, or the module loaded):\n%s", bin.Version, crash, out)
				}
			}
		})
	}
}

// lineWith is the first line of out that contains s.
func lineWith(out, s string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestLBPolicyChoiceCache: a choice that depends on the :path only is
// answered from the module's C cache when the same key comes again
// (counted in dynamicmodulescustom.cached), with lbcore's answer every
// time: for a repeated path, for a longer path with the same first
// hashLength bytes (URLHASH hashes no more), and after the hosts change
// (a removed host's keys move, the others' stay, still answered from the
// cache: no stale answer, no needless miss). A
// policy whose choices read more than the path (DOMAINHASH) or keep state
// (persistence) never answers from the cache.
func TestLBPolicyChoiceCache(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 5)
		url := policyCluster{name: "url", config: `{"lbMethod":"URLHASH","hashLength":24}`}
		domain := policyCluster{name: "domain", config: `{"lbMethod":"DOMAINHASH"}`}
		persist := policyCluster{name: "persist", config: `{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"]}}`}
		for _, b := range bs {
			ep := policyEndpoint{b: b}
			url.eps, domain.eps, persist.eps = append(url.eps, ep), append(domain.eps, ep), append(persist.eps, ep)
		}
		e := startPolicy(t, bin, []policyCluster{url, domain, persist})
		cached := func() int64 { return e.Stat(t, "dynamicmodulescustom.cached") }
		// want is lbcore's host for path over c's hosts.
		want := func(c policyCluster, path string) string {
			b, _ := policyOracle(t, c)
			d := b.Decide(&lbcore.Request{Target: path, Authority: e.addr, Method: "GET"}, corpus.Now)
			return backendOf(c, d.At(0))
		}
		// send GETs each path n times (on kept-alive connections) and
		// checks every answer.
		send := func(c policyCluster, paths []string, n int) {
			for range n {
				for _, p := range paths {
					got, st := e.getPath(t, c.name, p)
					if st != 200 {
						t.Fatalf("%s %s: status %d", c.name, p, st)
					}
					if w := want(c, p); got != w {
						t.Fatalf("%s %s went to %s, lbcore chose %s", c.name, p, got, w)
					}
				}
			}
		}
		// flush makes every worker enter Go once (a path never sent
		// before), which adds the cache's hits to the counter.
		fresh := 0
		flush := func(c policyCluster) {
			var ps []string
			for range 64 {
				fresh++
				ps = append(ps, fmt.Sprintf("/fresh/%d", fresh))
			}
			send(c, ps, 1)
		}
		paths := make([]string, 20)
		for i := range paths {
			paths[i] = fmt.Sprintf("/cart/%d", i)
		}
		send(url, paths, 10)
		flush(url)
		hits := cached()
		// 200 requests of 20 paths: at most the first of each path on each
		// of the 4 workers (and the flush) enter Go.
		if hits < 200-20*4 {
			t.Fatalf("%d of 200 requests of 20 paths answered from the cache, want at least %d", hits, 200-20*4)
		}
		t.Logf("URLHASH: %d of 200 requests of 20 paths answered from the cache", hits)

		// Longer paths whose first 24 bytes are one key: one choice.
		long := []string{"/catalog/items/0123456789-a", "/catalog/items/0123456789-b", "/catalog/items/0123456789-c?x=1"}
		if long[0][:24] != long[1][:24] || long[0][:24] != long[2][:24] {
			t.Fatal("the long paths must share their first 24 bytes")
		}
		send(url, long, 5)

		// More keys on one set of the cache than it has entries (16 paths
		// whose FNV-1a falls in one set of four): entries are replaced and
		// moved, and every answer is still lbcore's.
		crowd := crowdedPaths(16)
		send(url, crowd, 4)

		// Hits reach Envoy's counter from C, 256 at a time, though the
		// worker does not enter Go: 1,200 requests of 20 known paths.
		c0 := cached()
		send(url, paths, 60)
		if n := cached() - c0; n < 256 {
			t.Errorf("the counter rose by %d over 1,200 hits without a worker entering Go, want at least 256", n)
		}

		// A removed host: its keys move, the others' stay, all as lbcore
		// over the new hosts, though the old answers were in the cache.
		removed := url
		removed.eps = append(append([]policyEndpoint(nil), url.eps[:2]...), url.eps[3:]...)
		mark := len(e.Log())
		writePolicyEDS(t, e.Dir, removed)
		e.waitHosts(t, url.name, 4, mark)
		// The keys whose host stayed are answered from the cache at once:
		// removing a host moves its keys alone, so the cache keeps the
		// others' choices over the change.
		stayed := 0
		for _, p := range paths {
			if want(url, p) != bs[2].Name {
				stayed++
			}
		}
		h0 := cached()
		send(removed, paths, 1)
		flush(removed)
		if n := cached() - h0; n < int64(stayed) {
			t.Errorf("%d of the first %d requests after a host was removed answered from the cache, want the %d whose host stayed", n, len(paths), stayed)
		}
		send(removed, paths, 3)
		for _, p := range paths {
			if got, _ := e.getPath(t, url.name, p); got == bs[2].Name {
				t.Fatalf("%s still on the removed host %s", p, got)
			}
		}

		flush(removed)
		before := cached()
		if before-hits < 40 {
			t.Errorf("%d requests answered from the cache after the change, want at least 40 of 80 (2 of every 3 passes of 20 paths, and the check)", before-hits)
		}
		send(domain, paths, 5)
		send(persist, paths, 5)
		flush(domain)
		flush(persist)
		if n := cached() - before; n > 0 {
			t.Errorf("%d choices of DOMAINHASH or persistence answered from the cache, want 0", n)
		}
	})
}

// Cache geometry (internal/lbpolicy/abi/cache.h: HL_CACHE_BITS, HL_CACHE_WAYS).
const (
	cacheEntries = 1 << 13
	cacheWays    = 4
)

// crowdedPaths are n short paths (each a whole cache key) that fall in one
// set of the choice cache: more than it holds when n > cacheWays.
func crowdedPaths(n int) []string {
	set := func(p string) uint64 {
		h := uint64(14695981039346656037)
		for i := 0; i < len(p); i++ {
			h = (h ^ uint64(p[i])) * 1099511628211
		}
		return h & (cacheEntries - cacheWays)
	}
	var out []string
	want := set("/crowd/0")
	for i := 0; len(out) < n; i++ {
		if p := fmt.Sprintf("/crowd/%d", i); set(p) == want {
			out = append(out, p)
		}
	}
	return out
}
