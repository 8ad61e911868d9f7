package e2e

// A running filter given a new services list, as the controller
// (cmd/hashlb-controller) writes it for a Service whose pods come and go:
// hostsim reconfigures the plugin as Envoy does (a new root context in the
// same VM, the old one draining while its streams finish), and lbcore is the
// oracle for where every key must go.

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// pod is one ready endpoint of a Service.
type pod struct{ name, ip string }

// podServices is the controller's services list: name = hashId = the pod,
// address = ip:8080, sorted by name.
func podServices(pods []pod) []map[string]any {
	ps := slices.Clone(pods)
	sort.Slice(ps, func(i, j int) bool { return ps[i].name < ps[j].name })
	out := make([]map[string]any, len(ps))
	for i, p := range ps {
		out[i] = map[string]any{"name": p.name, "hashId": p.name, "address": p.ip + ":8080"}
	}
	return out
}

// podConfig is a plugin configuration over pods; extra adds fields.
func podConfig(t testing.TB, method string, pods []pod, extra map[string]any) []byte {
	t.Helper()
	return configJSON(t, map[string]any{"lbMethod": method, "debugHeader": true, "services": podServices(pods)}, extra)
}

func makePods(n int) []pod {
	out := make([]pod, n)
	for i := range out {
		out[i] = pod{name: fmt.Sprintf("web-%02d", i), ip: fmt.Sprintf("10.1.0.%d", i+1)}
	}
	return out
}

// oracle is lbcore deciding for a configuration, as the module must.
type oracle struct {
	cfg *lbcore.Config
	bal *lbcore.Balancer
}

func newOracle(t testing.TB, config []byte) *oracle {
	t.Helper()
	c, err := lbcore.ParseConfig(config)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	return &oracle{cfg: c, bal: lbcore.NewBalancer(c, 1)}
}

func keyPath(k int) string { return fmt.Sprintf("/obj/%d", k) }

// route is the service the oracle chooses for key k, and its next-ranked one.
func (o *oracle) route(k int) (first, next string) {
	r := lbcore.Request{Target: keyPath(k), Authority: "h", Method: "GET", Source: "192.0.2.1:4000", Dest: "10.0.0.100:80"}
	d := o.bal.Decide(&r, time.Unix(0, 0))
	first = o.cfg.Services[d.At(0)].Name
	i := d.At(0)
	o.bal.SetDown(i, true)
	d = o.bal.Decide(&r, time.Unix(0, 0))
	o.bal.SetDown(i, false)
	return first, o.cfg.Services[d.At(0)].Name
}

// hop is one request through the module: the service and upstream chosen.
type hop struct{ service, upstream string }

// send runs key k's request on worker w to its end.
func send(h *hostsim.Host, w int, k int) (hop, error) {
	s := h.Stream(w)
	res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", keyPath(k)}, {":authority", "h"}},
		map[string][]byte{"source.address": hostsim.PropString("192.0.2.1:4000"), "destination.address": hostsim.PropString("10.0.0.100:80")})
	if res.Err != nil || res.LocalReply != nil {
		s.Finish()
		return hop{}, fmt.Errorf("worker %d key %d: err %v, local reply %+v", w, k, res.Err, res.LocalReply)
	}
	svc, _ := res.Header("x-hashlb-service")
	up, _ := res.Header("x-envoy-original-dst-host")
	s.ResponseHeaders([][2]string{{":status", "200"}})
	return hop{svc, up}, s.Finish()
}

func mustSend(t *testing.T, h *hostsim.Host, w, k int) hop {
	t.Helper()
	r, err := send(h, w, k)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func podHost(t *testing.T, config []byte, workers int, call hostsim.HTTPHandler) *hostsim.Host {
	t.Helper()
	return moduleHost(t, hostsim.Config{Workers: workers, PluginConfig: config, HTTPCall: call})
}

// TestReconfigureMovesOnlyWhatItMust: one pod leaves (only its keys move,
// each to its next-ranked pod), one joins (about 1/(N+1) of the keys move,
// all to it), one is rescheduled with a new IP and its name (no key moves;
// its keys follow it to the new address). Every key is checked against lbcore.
func TestReconfigureMovesOnlyWhatItMust(t *testing.T) {
	const n, keys, workers = 10, 2000, 3
	base := makePods(n)
	tests := []struct {
		name string
		next []pod
	}{
		{"a pod leaves", slices.Delete(slices.Clone(base), 3, 4)},
		{"a pod joins", append(slices.Clone(base), pod{"web-10", "10.1.0.50"})},
		{"a pod is rescheduled with a new IP", func() []pod { p := slices.Clone(base); p[3].ip = "10.1.7.7"; return p }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := podConfig(t, "URLHASH", base, nil)
			after := podConfig(t, "URLHASH", tc.next, nil)
			h := podHost(t, before, workers, nil)
			oldO, newO := newOracle(t, before), newOracle(t, after)
			was := make([]string, keys)
			for k := range was {
				was[k] = mustSend(t, h, k%workers, k).service
				if want, _ := oldO.route(k); was[k] != want {
					t.Fatalf("key %d before: module chose %s, lbcore %s", k, was[k], want)
				}
			}
			if err := h.Configure(after); err != nil {
				t.Fatal(err)
			}
			addr := map[string]string{}
			for _, p := range tc.next {
				addr[p.name] = p.ip + ":8080"
			}
			moved := 0
			for k := range was {
				got := mustSend(t, h, (k+1)%workers, k)
				want, _ := newO.route(k)
				if got.service != want || got.upstream != addr[got.service] {
					t.Fatalf("key %d after: module chose %+v, lbcore %s at %s", k, got, want, addr[want])
				}
				if got.service == was[k] {
					continue
				}
				moved++
				switch tc.name {
				case "a pod leaves":
					if _, next := oldO.route(k); was[k] != "web-03" || got.service != next {
						t.Errorf("key %d moved %s → %s; only web-03's keys may move, each to its next-ranked pod %s", k, was[k], got.service, next)
					}
				case "a pod joins":
					if got.service != "web-10" {
						t.Errorf("key %d moved %s → %s; a join moves keys only to the new pod", k, was[k], got.service)
					}
				default:
					t.Errorf("key %d moved %s → %s although the pod kept its name", k, was[k], got.service)
				}
			}
			switch tc.name {
			case "a pod leaves":
				if held := strings.Count(strings.Join(was, ","), "web-03"); moved != held {
					t.Errorf("%d keys moved, want exactly web-03's %d", moved, held)
				}
			case "a pod joins":
				if want := keys / (n + 1); moved < want*7/10 || moved > want*13/10 {
					t.Errorf("%d of %d keys moved to the new pod, want about 1/(N+1) = %d", moved, keys, want)
				}
			}
		})
	}
}

// churn is one change of a pod set: a pod leaves, one joins, or one is
// rescheduled with a new IP.
func churn(r *rand.Rand, pods []pod, step int) []pod {
	p := slices.Clone(pods)
	switch {
	case len(p) > 3 && step%3 == 0:
		i := r.IntN(len(p))
		return slices.Delete(p, i, i+1)
	case step%3 == 1:
		return append(p, pod{fmt.Sprintf("web-x%d", step), fmt.Sprintf("10.2.%d.%d", step/200, step%200+1)})
	default:
		i := r.IntN(len(p))
		p[i].ip = fmt.Sprintf("10.3.%d.%d", step/200, step%200+1)
		return p
	}
}

// TestReconfigureUnderLoad: requests flow on every worker, some held open
// across several reconfigurations, while the pod set churns; no request
// fails, every upstream is the address of the chosen pod in a configuration
// that was applied, every old root context drains and goes away, and no
// active count leaks.
func TestReconfigureUnderLoad(t *testing.T) {
	const workers, steps = 4, 12
	r := rand.New(rand.NewPCG(1, 2))
	pods := makePods(8)
	h := podHost(t, podConfig(t, "LEASTCONNECTION", pods, nil), workers, nil)
	var mu sync.Mutex
	known := map[string]bool{} // "name@address" of every applied configuration
	names := map[string]bool{}
	note := func(ps []pod) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range ps {
			known[p.name+"@"+p.ip+":8080"], names[p.name] = true, true
		}
	}
	note(pods)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failures, total int
	budget := 200 // requests allowed so far: the load keeps pace with the changes
	var failMsgs []string
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			var held []*hostsim.Stream
			for k := w; ; k += workers {
				select {
				case <-stop:
					for _, s := range held {
						s.ResponseHeaders([][2]string{{":status", "200"}})
						s.Finish()
					}
					return
				default:
				}
				mu.Lock()
				wait := total >= budget
				mu.Unlock()
				if wait {
					runtime.Gosched()
					continue
				}
				s := h.Stream(w)
				res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", keyPath(k)}, {":authority", "h"}},
					map[string][]byte{"source.address": hostsim.PropString("192.0.2.1:4000")})
				svc, _ := res.Header("x-hashlb-service")
				up, _ := res.Header("x-envoy-original-dst-host")
				mu.Lock()
				total++
				if res.Err != nil || res.LocalReply != nil || !known[svc+"@"+up] {
					failures++
					failMsgs = append(failMsgs, fmt.Sprintf("worker %d key %d: err %v, local reply %v, %s@%s", w, k, res.Err, res.LocalReply, svc, up))
				}
				mu.Unlock()
				held = append(held, s)
				if len(held) > 5 { // the oldest stream ends: it may span reconfigurations
					old := held[0]
					held = held[1:]
					old.ResponseHeaders([][2]string{{":status", "200"}})
					if err := old.Finish(); err != nil {
						mu.Lock()
						failures++
						failMsgs = append(failMsgs, fmt.Sprintf("worker %d: Finish: %v", w, err))
						mu.Unlock()
					}
				}
			}
		}(w)
	}
	for step := 0; step < steps; step++ {
		pods = churn(r, pods, step)
		note(pods)
		if err := h.Configure(podConfig(t, "LEASTCONNECTION", pods, nil)); err != nil {
			t.Errorf("step %d: Configure: %v", step, err)
		}
		mu.Lock()
		budget += 200
		mu.Unlock()
		waitRequests(&mu, &total, 100) // requests flow between the changes
		h.Advance(time.Second)         // ticks: loads shared, both root contexts alive
	}
	close(stop)
	wg.Wait()
	if failures != 0 || total < steps {
		t.Fatalf("%d of %d requests failed during %d reconfigurations: %q", failures, total, steps, failMsgs[:min(len(failMsgs), 5)])
	}
	for w := 0; w < workers; w++ {
		if _, draining := h.RootContexts(w); len(draining) != 0 {
			t.Errorf("worker %d: root contexts %v still draining after every stream ended", w, draining)
		}
		if err := h.Err(w); err != nil {
			t.Errorf("worker %d died: %v", w, err)
		}
	}
	h.Advance(time.Second)
	for name := range names {
		if m, ok := h.Metric("hashlb.service." + name + ".active"); ok && m.Value != 0 {
			t.Errorf("hashlb.service.%s.active = %d after every stream ended, want 0", name, m.Value)
		}
	}
	t.Logf("%d requests, %d reconfigurations, 0 failed", total, steps)
}

// waitRequests returns once *total grew by n.
func waitRequests(mu *sync.Mutex, total *int, n int) {
	mu.Lock()
	goal := *total + n
	mu.Unlock()
	for {
		mu.Lock()
		done := *total >= goal
		mu.Unlock()
		if done {
			return
		}
		runtime.Gosched()
	}
}

// TestReconfigureActiveCountsCarryOver: requests held on the old
// configuration still count for the new one, once: least connection fills
// the pod that joined first, then spreads evenly.
func TestReconfigureActiveCountsCarryOver(t *testing.T) {
	two := []pod{{"web-a", "10.1.0.1"}, {"web-b", "10.1.0.2"}}
	h := podHost(t, podConfig(t, "LEASTCONNECTION", two, nil), 1, nil)
	count := map[string]int{}
	var held []*hostsim.Stream
	hold := func(k int) string {
		s := h.Stream(0)
		res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", keyPath(k)}, {":authority", "h"}}, nil)
		svc, _ := res.Header("x-hashlb-service")
		if res.Err != nil || svc == "" {
			t.Fatalf("key %d: %+v", k, res)
		}
		held = append(held, s)
		count[svc]++
		return svc
	}
	for k := 0; k < 4; k++ {
		hold(k)
	}
	if count["web-a"] != 2 || count["web-b"] != 2 {
		t.Fatalf("4 requests on 2 pods: %v, want 2 each", count)
	}
	if err := h.Configure(podConfig(t, "LEASTCONNECTION", append(two, pod{"web-c", "10.1.0.3"}), nil)); err != nil {
		t.Fatal(err)
	}
	for k := 4; k < 6; k++ {
		if svc := hold(k); svc != "web-c" {
			t.Errorf("request %d after the join went to %s; with the old requests counted web-c has the fewest", k, svc)
		}
	}
	for k := 6; k < 9; k++ {
		hold(k)
	}
	if count["web-a"] != 3 || count["web-b"] != 3 || count["web-c"] != 3 {
		t.Errorf("9 requests (4 on the old configuration) = %v, want 3 each: the old ones counted once", count)
	}
	for _, s := range held {
		s.ResponseHeaders([][2]string{{":status", "200"}})
		if err := s.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if _, draining := h.RootContexts(0); len(draining) != 0 {
		t.Errorf("old root contexts %v alive after their streams ended", draining)
	}
}

// TestReconfigureHealthCarriesOver: a pod DOWN stays DOWN across a
// reconfiguration, a pod that joins serves only after its first good probe
// (the new configuration's first round, at its first tick), and each round
// probes every pod once although two root contexts are alive.
func TestReconfigureHealthCarriesOver(t *testing.T) {
	backends := newProbeAnswers("10.1.0.2:8080")
	hc := map[string]any{"healthCheck": map[string]any{"interval": "1s", "unhealthyThreshold": 1, "healthyThreshold": 2, "cluster": "backends"}}
	pods := []pod{{"web-a", "10.1.0.1"}, {"web-b", "10.1.0.2"}, {"web-c", "10.1.0.3"}}
	const workers, keys = 3, 300
	h := podHost(t, podConfig(t, "URLHASH", pods, hc), workers, backends.handle)
	h.Advance(time.Second) // first round: web-b DOWN
	h.Advance(time.Second) // every worker reads it
	for k := 0; k < keys; k++ {
		if got := mustSend(t, h, k%workers, k); got.service == "web-b" {
			t.Fatalf("key %d went to web-b, which failed its probe", k)
		}
	}
	// An in-flight request keeps the old root context alive (draining).
	s := h.Stream(0)
	s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/held"}, {":authority", "h"}}, nil)
	next := append(slices.Clone(pods[:2]), pod{"web-d", "10.1.0.4"}) // web-c leaves, web-d joins
	if err := h.Configure(podConfig(t, "URLHASH", next, hc)); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < keys; k++ {
		if got := mustSend(t, h, k%workers, k).service; got == "web-b" || got == "web-d" || got == "web-c" {
			t.Fatalf("key %d right after the change went to %s; want web-a: web-b stays DOWN, web-d waits for its first probe, web-c left", k, got)
		}
	}
	backends.counts()
	h.Advance(time.Second) // the new configuration's first round
	want := map[string]int{"10.1.0.1:8080": 1, "10.1.0.2:8080": 1, "10.1.0.4:8080": 1}
	if probes, _ := backends.counts(); fmt.Sprint(probes) != fmt.Sprint(want) {
		t.Errorf("first round after the change probed %v, want each pod of the new configuration once: %v", probes, want)
	}
	h.Advance(time.Second) // every worker reads the verdicts
	seen := map[string]int{}
	for k := 0; k < keys; k++ {
		seen[mustSend(t, h, k%workers, k).service]++
	}
	if seen["web-d"] == 0 || seen["web-b"] != 0 || seen["web-c"] != 0 {
		t.Errorf("after web-d's first good probe: %v, want web-d serving, web-b still DOWN", seen)
	}
	s.ResponseHeaders([][2]string{{":status", "200"}})
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < workers; w++ {
		if _, draining := h.RootContexts(w); len(draining) != 0 {
			t.Errorf("worker %d: old root contexts %v alive after their streams ended", w, draining)
		}
	}
}

// TestReconfigurePersistenceSurvives: every change that keeps a pod keeps
// its persistence entries (round robin alone would scatter the clients);
// the clients of a pod that left are chosen again once and stay there.
func TestReconfigurePersistenceSurvives(t *testing.T) {
	const clients, workers = 300, 2
	p := map[string]any{"persistence": map[string]any{"keys": []string{"${request.header.x-client-id}"}}}
	pods := makePods(6)
	h := podHost(t, podConfig(t, "ROUNDROBIN", pods, p), workers, nil)
	ask := func(i, w int) (svc, reason string) {
		s := h.Stream(w)
		res := s.RequestHeaders([][2]string{{":method", "GET"}, {":path", "/"}, {":authority", "h"}, {"x-client-id", fmt.Sprint("c", i)}}, nil)
		svc, _ = res.Header("x-hashlb-service")
		res = s.ResponseHeaders([][2]string{{":status", "200"}})
		dec, _ := res.Header("x-hashlb-decision")
		_, reason, _ = strings.Cut(dec, "reason=")
		if err := s.Finish(); err != nil || svc == "" {
			t.Fatalf("client %d: service %q, %v", i, svc, err)
		}
		return svc, reason
	}
	at := make([]string, clients)
	for i := range at {
		at[i], _ = ask(i, i%workers)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for step := 0; step < 9; step++ {
		pods = churn(r, pods, step)
		if err := h.Configure(podConfig(t, "ROUNDROBIN", pods, p)); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		live := map[string]bool{}
		for _, p := range pods {
			live[p.name] = true
		}
		for i := range at {
			svc, reason := ask(i, (i+step)%workers)
			switch {
			case live[at[i]] && (svc != at[i] || reason != "persistence"):
				t.Errorf("step %d: client %d was on %s, which remains: got %s (%s), want it by persistence", step, i, at[i], svc, reason)
			case !live[at[i]] && (svc == at[i] || reason == "persistence"):
				t.Errorf("step %d: client %d was on %s, which left: got %s (%s), want another pod chosen again", step, i, at[i], svc, reason)
			}
			at[i] = svc
		}
	}
}

// TestHealthChurnBoundsSharedData: 10^4 pod identities go through a plugin
// as the controller writes them (one services list per rollout step, half
// of the churning pods replaced each time), with active health checks. The
// health records' keys in shared data stay as many as the largest services
// list plus three, whatever the churn; the pods that stay keep their
// verdicts across every reconfiguration (a DOWN pod stays DOWN, a good one
// serves at once); a pod that joins waits for its first probe even when it
// takes the slot of a pod that left UP, and passes it even when the slot's
// last owner was DOWN. Every worker's choice for every key is lbcore's with
// exactly the expected pods DOWN.
func TestHealthChurnBoundsSharedData(t *testing.T) {
	const workers, churning, identities, keys = 2, 96, 10_000, 24
	stay := []pod{{"stay-a", "10.9.0.1"}, {"stay-b", "10.9.0.2"}, {"stay-c", "10.9.0.3"}, {"stay-d", "10.9.0.4"}}
	// stay-a and every pod whose number ends in 0, 3, 6 or 9 fail their probes.
	failing := func(name string) bool {
		return name == "stay-a" || strings.HasPrefix(name, "web-") && name[len(name)-1]%3 == 0
	}
	backends := newProbeAnswers("10.9.0.1:8080")
	seq := 0
	fresh := func() pod {
		seq++
		p := pod{fmt.Sprintf("web-%05d", seq), fmt.Sprintf("10.%d.%d.%d", 10+seq/62500, seq/250%250, seq%250+1)}
		if failing(p.name) {
			backends.set(true, p.ip+":8080")
		}
		return p
	}
	churn := make([]pod, churning)
	for i := range churn {
		churn[i] = fresh()
	}
	hc := map[string]any{"healthCheck": map[string]any{"interval": "1s", "unhealthyThreshold": 1, "healthyThreshold": 1, "cluster": "backends"}}
	config := func() []byte { return podConfig(t, "URLHASH", append(append([]pod(nil), stay...), churn...), hc) }
	var host *hostsim.Host
	// check sends keys on every worker and wants lbcore's choice with the
	// pods isDown names DOWN.
	check := func(step int, when string, cfg []byte, isDown func(name string) bool) {
		t.Helper()
		o := newOracle(t, cfg)
		for i, s := range o.cfg.Services {
			o.bal.SetDown(i, isDown(s.Name))
		}
		for k := 0; k < keys; k++ {
			k := step*keys + k
			r := lbcore.Request{Target: keyPath(k), Authority: "h", Method: "GET", Source: "192.0.2.1:4000", Dest: "10.0.0.100:80"}
			d := o.bal.Decide(&r, time.Unix(0, 0))
			want := o.cfg.Services[d.At(0)].Name
			if got := mustSend(t, host, k%workers, k).service; got != want {
				t.Fatalf("step %d, %s: key %d went to %s, want %s (DOWN: stay-a, pods failing probes, pods not probed yet)", step, when, k, got, want)
			}
		}
	}
	cfg := config()
	host = podHost(t, cfg, workers, backends.handle)
	host.Advance(time.Second) // first round
	host.Advance(time.Second) // every worker reads it
	check(0, "first configuration", cfg, failing)
	mostHealth, mostKeys, steps := 0, 0, 0
	for seen := churning; seen < identities; steps++ {
		joined := map[string]bool{}
		for i := steps % 2; i < churning; i += 2 {
			churn[i] = fresh()
			joined[churn[i].name] = true
			seen++
		}
		cfg = config()
		if err := host.Configure(cfg); err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		check(steps, "right after the change", cfg, func(name string) bool { return failing(name) || joined[name] })
		host.Advance(time.Second) // the new configuration's first round
		host.Advance(time.Second)
		check(steps, "after the first round", cfg, failing)
		nh, n := 0, 0
		for _, k := range host.SharedData().Keys() {
			n++
			if strings.Contains(k, "/h/") {
				nh++
			}
		}
		mostHealth, mostKeys = max(mostHealth, nh), max(mostKeys, n)
	}
	services := len(stay) + churning
	t.Logf("%d pod identities through %d reconfigurations of %d services, %d workers: at most %d keys in shared data, %d of them health (slots, table, lease, marker)", seq, steps, services, workers, mostKeys, mostHealth)
	if mostHealth > services+3 {
		t.Errorf("health keys in shared data reached %d, want at most %d: one slot per service of the largest configuration, the slot table, the probe lease and the create marker", mostHealth, services+3)
	}
	// The rest are the active-request slots (lbcore.LoadBoard) and their marker.
	if mostKeys > services+3+lbcore.MaxSlots+1 {
		t.Errorf("keys in shared data reached %d, want at most %d", mostKeys, services+3+lbcore.MaxSlots+1)
	}
}
