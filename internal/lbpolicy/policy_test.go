package lbpolicy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/corpus"
	"github.com/hashlb/hashlb/lbcore"
)

var now = time.Unix(1767225600, 0)

func mustPolicy(t testing.TB, js string) *Policy {
	t.Helper()
	p, err := ParseConfig([]byte(js))
	if err != nil {
		t.Fatalf("%s: %v", js, err)
	}
	return p
}

// urlWorker is a worker named name of a URLHASH policy, updated with f's
// hosts and closed at the test's end, and its policy.
func urlWorker(t testing.TB, name string, f *fakeHosts) (*Policy, *Worker) {
	t.Helper()
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	w := p.NewWorker(name)
	t.Cleanup(w.Close)
	if _, err := w.Update(f); err != nil {
		t.Fatal(err)
	}
	return p, w
}

func TestParseConfigRefuses(t *testing.T) {
	for _, c := range []struct{ js, want string }{
		{`{"services":[]}`, "services: not served by the load-balancing policy: the policy balances over the cluster's hosts"},
		{`{"healthCheck":{}}`, "healthCheck: not served by the load-balancing policy"},
		{`{"passiveHealth":{}}`, "outlier_detection"},
		{`{"upstreamCount":2}`, "upstreamCount: not served"},
		{`{"debugHeader":true}`, "debugHeader: not served"},
		{`{"lbMethod":"DESTINATIONIPHASH"}`, "lbMethod: DESTINATIONIPHASH hashes the address the connection was accepted on"},
		{`{"lbMethod":"SRCIPDESTIPHASH","trustedForwardedHops":1}`, "lbMethod: SRCIPDESTIPHASH hashes the address the connection was accepted on"},
		{`{"lbMethod":"SOURCEIPHASH"}`, "lbMethod: SOURCEIPHASH hashes the client address, and Envoy gives a load-balancing policy the request headers, not the connection: set trustedForwardedHops to 1 or more"},
		{`{"lbMethod":"TOKEN","token":"${server.port}"}`, "token: reads ${server.ip} or ${server.port}"},
		{`{"lbMethod":"URLHASH","persistence":{"keys":["${client.ip}"]}}`, "persistence.keys: read ${client.ip}"},
		{`{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"],"fleet":{"cluster":"etcd"}}}`, "persistence.fleet.cluster: not served"},
		{`{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"],"fleet":{"prefix":"/p/"}}}`, "persistence.fleet.endpoints: is required"},
		{`{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"],"fleet":{"endpoints":["127.0.0.1:2379"],"authority":"etcd"}}}`, "persistence.fleet.authority: not served"},
		{`{"lbMethod":"URLHASH","persistence":{"keys":["${request.path}"],"fleet":{"endpoints":["127.0.0.1"]}}}`, "is not host:port"},
	} {
		_, err := ParseConfig([]byte(c.js))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.js, err, c.want)
		}
	}
}

// A configuration lbcore refuses is refused with lbcore's own message: the
// one the filter gives for the same JSON.
func TestParseConfigGivesLbcoreMessages(t *testing.T) {
	for _, js := range []string{
		`{"lbMethod":"NOPE"}`,
		`{"lbMethod":"URLHASH","hashLength":0}`,
		`{"lbMethod":"TOKEN"}`,
		`{"lbMethod":"URLHASH",`,
		`[1]`,
		``,
		`{"lbMethod":"URLHASH","unknownField":1}`,
	} {
		_, err := ParseConfig([]byte(js))
		if err == nil {
			t.Errorf("%s: accepted", js)
			continue
		}
		withServices := js
		if strings.HasPrefix(js, "{") && strings.HasSuffix(js, "}") {
			withServices = js[:len(js)-1] + `,"services":[{"name":"a","address":"127.0.0.1:1"}]}`
		}
		_, ferr := lbcore.ParseConfig([]byte(withServices))
		if ferr == nil || ferr.Error() != err.Error() {
			t.Errorf("%s: policy says %q, the filter %v", js, err, ferr)
		}
	}
	mustPolicy(t, `{}`)
	mustPolicy(t, ` {"lbMethod":"URLHASH"} `)
}

// served are corpus configurations the policy serves, each as its filter
// options allow: without the header hand-off options.
func served(t testing.TB) map[string]string {
	t.Helper()
	out := map[string]string{}
	pcs, err := corpus.PolicyConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range pcs {
		if _, err := ParseConfig(pc.Data); err != nil {
			continue
		}
		out[pc.Name] = string(pc.Data)
	}
	return out
}

func TestServedCorpusConfigs(t *testing.T) {
	got := served(t)
	for _, name := range []string{"URLHASH", "DOMAINHASH", "SOURCEIPHASH", "CALLIDHASH", "TOKEN", "LEASTCONNECTION", "ROUNDROBIN"} {
		if _, ok := got[name]; !ok {
			t.Errorf("corpus configuration %s is not served", name)
		}
	}
	for _, name := range []string{"DESTINATIONIPHASH", "SRCIPDESTIPHASH", "SRCIPSRCPORTHASH", "SOURCEIPHASH+persistence"} {
		if _, ok := got[name]; ok {
			t.Errorf("corpus configuration %s is served, but it reads the connection", name)
		}
	}
}

// oracleFor is lbcore's decision for the hosts as services, f's unhealthy
// hosts down.
func oracleFor(w *Worker, f *fakeHosts) *lbcore.Balancer {
	b := lbcore.NewBalancer(w.bal.Config(), 0)
	for i, h := range f.hs {
		b.SetDown(i, h.health != Healthy)
	}
	return b
}

// Every choice is lbcore's, for every hash configuration served, over
// hosts with weights, a hashId and a name, some unhealthy.
func TestChoiceIsLbcores(t *testing.T) {
	reqs := corpus.AsEnvoyDecodes(corpus.Requests(400))
	for name, js := range served(t) {
		p := mustPolicy(t, js)
		if !p.Config.LBMethod.IsHash() {
			continue
		}
		f := newFakeHosts(9)
		f.hs[1].weight = 3
		f.hs[2].hashID = "pool-2"
		f.hs[3].name = "named-3"
		f.hs[4].health = Unhealthy
		f.hs[6].health = Degraded
		f.sync()
		w := p.NewWorker("c-" + name)
		if _, err := w.Update(f); err != nil {
			t.Fatal(err)
		}
		b := oracleFor(w, f)
		checked := 0
		for _, r := range reqs {
			want := corpus.Oracle(b, r)
			if want.Reason == lbcore.ReasonBackup || want.Reason == lbcore.ReasonPersistence {
				continue // the backup's state is the worker's own
			}
			_, hi, fail := w.Choose(f, &fakeCtx{headers: r.Headers}, corpus.Now)
			if fail != NoFailure {
				t.Fatalf("%s: choice failed: %d", name, fail)
			}
			if got := f.healthy[hi]; got != want.At(0) {
				t.Fatalf("%s: %v: chose host %d, lbcore %d", name, r.Headers, got, want.At(0))
			}
			if f.hs[f.healthy[hi]].health != Healthy {
				t.Fatalf("%s: chose a host that is not healthy", name)
			}
			checked++
		}
		if checked < len(reqs)/4 {
			t.Errorf("%s: only %d of %d requests hashed", name, checked, len(reqs))
		}
	}
}

// Identity: hashId, else name, else the address.
func TestServiceIdentity(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"URLHASH"}`)
	f := newFakeHosts(3)
	f.hs[0].hashID, f.hs[0].name = "h0", "n0"
	f.hs[1].name = "n1"
	f.hs[2].weight = 500
	w := p.NewWorker("ids")
	warn, err := w.Update(f)
	if err != nil {
		t.Fatal(err)
	}
	s := w.Services()
	if s[0].HashID != "h0" || s[0].Name != "n0" || s[1].HashID != "n1" || s[1].Name != "n1" || s[2].HashID != "" || s[2].Name != f.hs[2].addr {
		t.Errorf("services %+v", s)
	}
	if s[2].Weight != 100 || warn.Clamped != 1 || !strings.Contains(warn.Example, "weight 500") {
		t.Errorf("weight 500: got %d, notes %+v", s[2].Weight, warn)
	}
	f.hs[1].hashID = "h0"
	if _, err := w.Update(f); err == nil || !strings.Contains(err.Error(), "same identity") {
		t.Errorf("two hosts with one hashId: %v", err)
	}
	if _, _, fail := w.Choose(f, &fakeCtx{}, now); fail != NoHost {
		t.Errorf("choice without services: %d, want NoHost", fail)
	}
}

// A host that goes unhealthy loses exactly its keys, which come back when it
// recovers, seen by the choices alone (no Update between).
func TestHealthMovesOnlyItsKeys(t *testing.T) {
	f := newFakeHosts(8)
	_, w := urlWorker(t, "health", f)
	choose := func(k int) int {
		_, hi, fail := w.Choose(f, &fakeCtx{headers: [][2]string{{":path", fmt.Sprintf("/k/%d", k)}}}, now)
		if fail != NoFailure {
			t.Fatalf("failure %d", fail)
		}
		return f.healthy[hi]
	}
	before := map[int]int{}
	for k := range 2000 {
		before[k] = choose(k)
	}
	f.hs[5].health = Unhealthy
	f.sync()
	for k := range 2000 {
		got := choose(k)
		if got == 5 {
			t.Fatalf("key %d went to the unhealthy host", k)
		}
		if before[k] != 5 && got != before[k] {
			t.Fatalf("key %d moved from %d to %d, its host is healthy", k, before[k], got)
		}
	}
	f.hs[5].health = Healthy
	f.sync()
	for k := range 2000 {
		if got := choose(k); got != before[k] {
			t.Fatalf("key %d on %d after recovery, was %d", k, got, before[k])
		}
	}
	// A swap (one down, another up) keeps the healthy count: the chosen
	// host's check sees it.
	f.hs[2].health = Unhealthy
	f.sync()
	choose(0)
	f.hs[2].health, f.hs[3].health = Healthy, Unhealthy
	f.sync()
	for k := range 2000 {
		if got := choose(k); got == 3 {
			t.Fatalf("key %d went to host 3, unhealthy since a swap", k)
		}
	}
}

// Retries walk lbcore's ranking: the hosts Envoy's predicate rejects are
// skipped in rank order.
func TestRetriesWalkTheRanking(t *testing.T) {
	f := newFakeHosts(6)
	p, w := urlWorker(t, "retry", f)
	rb := lbcore.NewBalancer(mustRanked(t, p, w), 0)
	for k := range 50 {
		hdr := [][2]string{{":path", fmt.Sprintf("/r/%d", k)}}
		r := lbcore.Request{Target: hdr[0][1]}
		rank := rb.Decide(&r, now)
		avoid := map[int]bool{}
		for step := range 4 {
			_, hi, fail := w.Choose(f, &fakeCtx{headers: hdr, avoid: avoid}, now)
			if fail != NoFailure {
				t.Fatal(fail)
			}
			if got, want := f.healthy[hi], rank.At(step); got != want {
				t.Fatalf("key %d attempt %d: host %d, rank %d is %d", k, step+1, got, step, want)
			}
			avoid[f.healthy[hi]] = true
		}
	}
}

func mustRanked(t testing.TB, p *Policy, w *Worker) *lbcore.Config {
	t.Helper()
	r := *p.Config
	r.UpstreamCount, r.Persistence = 8, nil // the most ranks lbcore names, no persistence
	c, err := r.WithServices(append([]lbcore.Service(nil), w.Services()...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The persistence table is the process's: a key one worker stored is served
// by every other worker of the cluster, even when their methods would
// choose differently (round robin).
func TestPersistenceSharedByWorkers(t *testing.T) {
	p := mustPolicy(t, `{"lbMethod":"ROUNDROBIN","persistence":{"keys":["${request.header.x-user}"]}}`)
	f := newFakeHosts(5)
	var ws []*Worker
	for range 4 {
		w := p.NewWorker("persist")
		if _, err := w.Update(f); err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	for u := range 40 {
		ctx := &fakeCtx{headers: [][2]string{{"x-user", fmt.Sprint("u", u)}}}
		first := -1
		for i := range 12 {
			_, hi, fail := ws[i%4].Choose(f, ctx, now)
			if fail != NoFailure {
				t.Fatal(fail)
			}
			if first < 0 {
				first = hi
			} else if hi != first {
				t.Fatalf("user %d: worker %d chose %d, the first choice was %d", u, i%4, hi, first)
			}
		}
	}
	other := p.NewWorker("other-cluster")
	if _, err := other.Update(f); err != nil {
		t.Fatal(err)
	}
	if processStore.keys() == 0 {
		t.Fatal("nothing stored")
	}
}

// A choice allocates nothing once the worker is warm: hash methods,
// persistence hits, a retry walk, an unhealthy host, 10 and 10^4 hosts.
func TestChooseAllocatesNothing(t *testing.T) {
	for _, n := range []int{10, 10000} {
		for _, js := range []string{
			`{"lbMethod":"URLHASH"}`,
			`{"lbMethod":"TOKEN","token":"${request.header.x-user}","persistence":{"keys":["${request.header.x-user}"]}}`,
			`{"lbMethod":"LEASTCONNECTION"}`,
		} {
			p := mustPolicy(t, js)
			f := newFakeHosts(n)
			f.hs[1].health = Unhealthy
			f.sync()
			w := p.NewWorker(fmt.Sprint("alloc", n))
			if _, err := w.Update(f); err != nil {
				t.Fatal(err)
			}
			ctxs := make([]*fakeCtx, 64)
			for i := range ctxs {
				ctxs[i] = &fakeCtx{headers: [][2]string{{":method", "GET"}, {":path", fmt.Sprintf("/a/%d", i)}, {"x-user", fmt.Sprint("u", i)}}}
			}
			ctxs[0].avoid = map[int]bool{}
			_, hi, _ := w.Choose(f, ctxs[0], now)
			ctxs[0].avoid[f.healthy[hi]] = true
			for _, c := range ctxs {
				w.Choose(f, c, now)
			}
			i := 0
			allocs := testing.AllocsPerRun(2000, func() {
				w.Choose(f, ctxs[i%len(ctxs)], now)
				i++
			})
			if allocs != 0 {
				t.Errorf("%d hosts, %s: %.2f allocations per choice", n, js, allocs)
			}
		}
	}
}

func BenchmarkChoose(b *testing.B) {
	for _, n := range []int{10, 10000} {
		for _, m := range []string{`{"lbMethod":"URLHASH"}`, `{"lbMethod":"URLHASH","backupLBMethod":"ROUNDROBIN"}`} {
			b.Run(fmt.Sprintf("%s/%d", m, n), func(b *testing.B) {
				p := mustPolicy(b, m)
				f := newFakeHosts(n)
				w := p.NewWorker("bench")
				if _, err := w.Update(f); err != nil {
					b.Fatal(err)
				}
				ctxs := make([]*fakeCtx, 1024)
				for i := range ctxs {
					ctxs[i] = &fakeCtx{headers: [][2]string{{":method", "GET"}, {":path", fmt.Sprintf("/a/%d", i)}}}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					w.Choose(f, ctxs[i&1023], now)
				}
			})
		}
	}
}
