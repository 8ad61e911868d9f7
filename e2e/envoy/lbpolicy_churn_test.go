package envoy

// The policy while the cluster changes under load, as Kubernetes changes
// it every day: a rolling update replacing one endpoint of four every
// 0.5 s, and one host's active health check flapping, each under a
// closed-loop load of 16 connections, in Envoy's default
// update_merge_window (a health change reaches the workers' host sets up to
// 1 s after the host's own flags). Every backend answers, so every answer
// must be a 2xx; the policy's inconsistent and no_host counters stay 0; a
// key whose host is never touched never moves.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

var churnFor = flag.Duration("lbpolicy.churn", 20*time.Second, "TestLBPolicyChurn: how long each scenario changes the cluster under load")

// churnLoad is what a closed-loop load saw: per key, the backends that
// answered it with a 2xx, and every other answer.
type churnLoad struct {
	mu      sync.Mutex
	seen    map[string]map[string]int
	bad     map[string]int // "status 503", "error: …"
	n       atomic.Int64
	keys    int
	perConn int
}

// run sends requests for keys /k/0 … /k/keys-1 on conns connections,
// each waiting for its answer before the next, until stop closes.
func (l *churnLoad) run(e *policyEnvoy, cluster string, conns int, stop <-chan struct{}) *sync.WaitGroup {
	l.seen, l.bad = map[string]map[string]int{}, map[string]int{}
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cli := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 20 * time.Second}
			defer cli.CloseIdleConnections()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/k/%d", rng.IntN(l.keys))
				req, _ := http.NewRequest("GET", "http://"+e.addr+path, nil)
				req.Header.Set("x-test-cluster", cluster)
				resp, err := cli.Do(req)
				l.n.Add(1)
				if err != nil {
					l.note(path, "", "error: "+err.Error())
					continue
				}
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					l.note(path, "", fmt.Sprintf("status %d", resp.StatusCode))
					continue
				}
				l.note(path, resp.Header.Get("X-Backend"), "")
			}
		}()
	}
	return &wg
}

func (l *churnLoad) note(path, backend, bad string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bad != "" {
		l.bad[bad]++
		return
	}
	m := l.seen[path]
	if m == nil {
		m = map[string]int{}
		l.seen[path] = m
	}
	m[backend]++
}

// TestLBPolicyChurn: a rolling update (three stable hosts, the fourth
// replaced every 0.5 s by the next of five others) and a flapping health
// check (one of four hosts taken out and back every 0.5 s by its health
// check while it still answers requests), each for -lbpolicy.churn.
func TestLBPolicyChurn(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		stable := envoyrun.StartBackends(t, 3)
		var pool []*envoyrun.Backend
		for i := range 5 {
			pool = append(pool, envoyrun.StartBackend(t, fmt.Sprintf("r%d", i+1)))
		}
		roll := policyCluster{name: "roll", config: `{"lbMethod":"URLHASH"}`, health: true}
		flap := policyCluster{name: "flap", config: `{"lbMethod":"URLHASH"}`, health: true}
		for _, b := range stable {
			roll.eps = append(roll.eps, policyEndpoint{b: b})
			flap.eps = append(flap.eps, policyEndpoint{b: b})
		}
		roll.eps = append(roll.eps, policyEndpoint{b: pool[0]})
		flap.eps = append(flap.eps, policyEndpoint{b: pool[0]})
		e := startPolicy(t, bin, []policyCluster{roll, flap})
		waitStat(t, e.Envoy, "cluster.roll.membership_healthy", 4)
		waitStat(t, e.Envoy, "cluster.flap.membership_healthy", 4)

		// Keys whose host outranks, in lbcore's ranking, every host the
		// rolling update ever lists: their host is never touched.
		all := roll
		all.eps = append(append([]policyEndpoint(nil), roll.eps[:3]...), policyEndpoint{b: pool[0]})
		for _, b := range pool[1:] {
			all.eps = append(all.eps, policyEndpoint{b: b})
		}
		const keys = 512
		rollOwner := stableOwners(t, all, keys, nil)
		// In the flapping cluster, keys whose host outranks the flapping one.
		flapper := stable[0]
		flapOwner := stableOwners(t, flap, keys, flapper)

		scenario := func(name string, c policyCluster, owner map[string]string, change func(step int)) {
			t.Helper()
			inc0 := e.Stat(t, "dynamicmodulescustom.inconsistent")
			nh0 := e.Stat(t, "dynamicmodulescustom.no_host")
			load := &churnLoad{keys: keys}
			stop := make(chan struct{})
			wg := load.run(e, c.name, 16, stop)
			tick := time.NewTicker(500 * time.Millisecond)
			end := time.Now().Add(*churnFor)
			steps := 0
			for time.Now().Before(end) {
				<-tick.C
				steps++
				change(steps)
			}
			tick.Stop()
			close(stop)
			wg.Wait()
			inc := e.Stat(t, "dynamicmodulescustom.inconsistent") - inc0
			nh := e.Stat(t, "dynamicmodulescustom.no_host") - nh0
			t.Logf("%s: %d requests, %d changes; non-2xx %v; inconsistent +%d, no_host +%d", name, load.n.Load(), steps, load.bad, inc, nh)
			if len(load.bad) > 0 {
				t.Errorf("%s: answers other than 2xx with every backend up: %v", name, load.bad)
			}
			if inc != 0 || nh != 0 {
				t.Errorf("%s: dynamicmodulescustom.inconsistent +%d, no_host +%d, want 0", name, inc, nh)
			}
			checked := 0
			for path, host := range owner {
				for got, n := range load.seen[path] {
					if got != host {
						t.Errorf("%s: %s went to %s %d times; its host %s was never touched", name, path, got, n, host)
					}
				}
				checked += len(load.seen[path])
			}
			if checked == 0 {
				t.Errorf("%s: no request for a key of an untouched host", name)
			}
		}

		scenario("rolling update", roll, rollOwner, func(step int) {
			c := roll
			c.eps = append(append([]policyEndpoint(nil), roll.eps[:3]...), policyEndpoint{b: pool[step%len(pool)]})
			writePolicyEDS(t, e.Dir, c)
		})
		flapper.FailHealth(0)
		scenario("flapping health", flap, flapOwner, func(step int) {
			if step%2 == 1 {
				flapper.FailHealth(503)
			} else {
				flapper.FailHealth(0)
			}
		})
		flapper.FailHealth(0)
	})
}

// stableOwners is, for keys /k/0 … /k/n-1, the host lbcore ranks first over
// c's hosts when that host is one of c's first three (the stable ones) and
// not skip, and outranks skip: the keys no change of the others can move.
func stableOwners(t testing.TB, c policyCluster, n int, skip *envoyrun.Backend) map[string]string {
	t.Helper()
	b, _ := policyOracle(t, c)
	var skipIdx = -1
	for i, ep := range c.eps {
		if ep.b == skip {
			skipIdx = i
		}
	}
	out := map[string]string{}
	for k := range n {
		path := fmt.Sprintf("/k/%d", k)
		r := lbcore.Request{Target: path}
		d := b.Decide(&r, time.Unix(0, 0))
		i := d.At(0)
		if i >= 3 || i == skipIdx {
			continue
		}
		out[path] = c.eps[i].b.Name
	}
	return out
}
