package envoy

// The policy over what Envoy hands it beyond one flat host list: priority
// levels (failover to priority 1 when priority 0 has no healthy host, and
// back), 10^5 hosts (more than a configuration's services maximum), and
// Envoy's own stateful_session filter in front of it (cookie sessions for a
// policy, which cannot set a cookie itself).

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statefulsessionv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/stateful_session/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	cookiev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/stateful_session/cookie/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/type/http/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestLBPolicyPriorityFailover: three hosts at priority 0 and three at
// priority 1. While priority 0 has a healthy host, only its hosts serve;
// with all three failing their health check, every key goes to the host
// lbcore ranks first over priority 1's hosts; when priority 0 recovers,
// every key is back on its host there.
func TestLBPolicyPriorityFailover(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 6)
		c := policyCluster{name: "prio", config: `{"lbMethod":"URLHASH"}`, health: true}
		for i, b := range bs {
			c.eps = append(c.eps, policyEndpoint{b: b, prio: i / 3})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		waitStat(t, e.Envoy, "cluster.prio.membership_healthy", 6)
		const keys = 300
		before := keysOf(t, e, c.name, keys)
		p0, _ := policyOracle(t, c, bs[3].Name, bs[4].Name, bs[5].Name)
		checkKeysOn(t, c, before, p0, "lbcore over priority 0")
		mark := len(e.Log())
		for _, b := range bs[:3] {
			b.Fail(503)
		}
		waitLog(t, e, mark, "serving priority 1", 5)
		during := keysOf(t, e, c.name, keys)
		p1, _ := policyOracle(t, c, bs[0].Name, bs[1].Name, bs[2].Name)
		checkKeysOn(t, c, during, p1, "with priority 0 down, lbcore over priority 1")
		mark = len(e.Log())
		for _, b := range bs[:3] {
			b.Fail(0)
		}
		waitLog(t, e, mark, "serving priority 0 (3 of its 3 hosts healthy)", 5)
		after := keysOf(t, e, c.name, keys)
		for i := range after {
			if after[i] != before[i] {
				t.Fatalf("/k/%d on %s after priority 0 recovered, was on %s", i, after[i], before[i])
			}
		}
	})
}

// checkKeysOn fails t unless the backend of every key /k/<i> of got is the
// one b (lbcore over c, as said) ranks first.
func checkKeysOn(t testing.TB, c policyCluster, got []string, b *lbcore.Balancer, said string) {
	t.Helper()
	for i, g := range got {
		r := lbcore.Request{Target: fmt.Sprintf("/k/%d", i)}
		d := b.Decide(&r, time.Unix(0, 0))
		if want := backendOf(c, d.At(0)); g != want {
			t.Fatalf("/k/%d on %s, %s: %s", i, g, said, want)
		}
	}
}

// waitLog waits until the log after byte mark holds s at least n times (one
// per thread of Envoy that runs the policy: 4 workers and the main thread).
func waitLog(t testing.TB, e *policyEnvoy, mark int, s string, n int) {
	t.Helper()
	eventually(t, func() string {
		return fmt.Sprintf("%d threads logged %q\n%s", countLog(e.Log()[mark:], s), s, e.LogTail(20))
	}, func() bool { return countLog(e.Log()[mark:], s) >= n })
}

// TestLBPolicyHundredThousandHosts: a cluster of 10^5 endpoints (loopback
// addresses 127.a.b.c on one port, all answered by one backend that names
// the address it was reached on) is served, each choice the host lbcore
// ranks first over the 10^5, and the module logs how long each thread's
// membership update took.
func TestLBPolicyHundredThousandHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 10^5 endpoints")
	}
	bins := envoyrun.LBPolicyBinaries(t)
	bin := bins[len(bins)-1] // the newest: the size is the subject, not the version
	const n = 100_000
	be := envoyrun.StartFastBackendAny(t, 0)
	c := policyCluster{name: "large", config: `{"lbMethod":"URLHASH"}`}
	for i := range n {
		c.eps = append(c.eps, policyEndpoint{addr: fmt.Sprintf("127.%d.%d.%d:%d", 2+i/62500, i/250%250, i%250+1, be.Port())})
	}
	e := startPolicy(t, bin, []policyCluster{c})
	b, svcs := policyOracle(t, c)
	cli := &http.Client{Timeout: 30 * time.Second}
	defer cli.CloseIdleConnections()
	for k := range 200 {
		path := fmt.Sprintf("/large/%d", k)
		req, _ := http.NewRequest("GET", "http://"+e.addr+path, nil)
		req.Header.Set("x-test-cluster", c.name)
		resp, err := cli.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r := lbcore.Request{Target: path}
		d := b.Decide(&r, time.Unix(0, 0))
		if got, want := resp.Header.Get("X-Backend"), svcs[d.At(0)].Address; resp.StatusCode != 200 || got != want {
			t.Fatalf("%s: %d from %s, lbcore over 10^5 hosts: %s", path, resp.StatusCode, got, want)
		}
	}
	took := regexp.MustCompile(`cluster large: 100000 hosts .*; (\d+) ms`).FindAllStringSubmatch(e.Log(), -1)
	var ms []string
	for _, m := range took {
		ms = append(ms, m[1])
	}
	t.Logf("Envoy %s, 10^5 hosts: 200 paths each on lbcore's choice; membership update per thread (ms): %s", bin.Version, strings.Join(ms, ", "))
	if len(ms) == 0 {
		t.Error("the module logged no update time for the 10^5 hosts")
	}
}

// TestLBPolicyStatefulSession: Envoy's stateful_session filter (cookie) in
// front of the policy. A request without the cookie gets hashlb's choice
// and a cookie naming it; a request carrying that cookie reaches that host
// whatever its path would hash to; a cookie naming a host no longer in the
// cluster falls back to hashlb's choice.
func TestLBPolicyStatefulSession(t *testing.T) {
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 4)
		c := policyCluster{name: "sess", config: `{"lbMethod":"URLHASH"}`}
		for _, b := range bs {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicyWith(t, bin, []policyCluster{c}, func(b *bootstrap) {
			editHCM(t, b.other[0], func(h *hcmv3.HttpConnectionManager) {
				h.HttpFilters = append([]*hcmv3.HttpFilter{httpFilter("envoy.filters.http.stateful_session", &statefulsessionv3.StatefulSession{
					SessionState: &corev3.TypedExtensionConfig{Name: "envoy.http.stateful_session.cookie",
						TypedConfig: anyOf(&cookiev3.CookieBasedSessionState{Cookie: &httpv3.Cookie{Name: "hashlb-affinity", Path: "/", Ttl: durationpb.New(time.Hour)}})},
				})}, h.HttpFilters...)
			})
		})
		b, _ := policyOracle(t, c)
		hashed := func(path string) string {
			r := lbcore.Request{Target: path}
			d := b.Decide(&r, time.Unix(0, 0))
			return backendOf(c, d.At(0))
		}
		get := func(path, cookie string) (backend, setCookie string) {
			t.Helper()
			req, _ := http.NewRequest("GET", "http://"+e.addr+path, nil)
			req.Header.Set("x-test-cluster", c.name)
			if cookie != "" {
				req.Header.Set("cookie", cookie)
			}
			resp, err := e.cli.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", path, resp.StatusCode)
			}
			for _, sc := range resp.Header.Values("Set-Cookie") {
				if strings.HasPrefix(sc, "hashlb-affinity=") {
					setCookie = strings.SplitN(sc, ";", 2)[0]
				}
			}
			return resp.Header.Get("X-Backend"), setCookie
		}
		first, cookie := get("/cart/1", "")
		if first != hashed("/cart/1") {
			t.Fatalf("/cart/1 without a cookie on %s, hashlb's choice is %s", first, hashed("/cart/1"))
		}
		if cookie == "" {
			t.Fatal("stateful_session set no cookie")
		}
		moved := 0
		for k := range 40 {
			path := fmt.Sprintf("/cart/%d", k+2)
			got, _ := get(path, cookie)
			if got != first {
				t.Fatalf("%s with the cookie on %s, the cookie names %s", path, got, first)
			}
			if hashed(path) != first {
				moved++
			}
		}
		if moved == 0 {
			t.Fatal("every path hashed to the cookie's host: the cookie was not shown to decide")
		}
		// The cookie's host leaves the cluster: hashlb decides again.
		rest := c
		rest.eps = nil
		for _, ep := range c.eps {
			if ep.b.Name != first {
				rest.eps = append(rest.eps, ep)
			}
		}
		mark := len(e.Log())
		writePolicyEDS(t, e.Dir, rest)
		e.waitHosts(t, c.name, 3, mark)
		rb, _ := policyOracle(t, rest)
		for k := range 20 {
			path := fmt.Sprintf("/cart/%d", k+2)
			got, _ := get(path, cookie)
			r := lbcore.Request{Target: path}
			d := rb.Decide(&r, time.Unix(0, 0))
			if want := rest.eps[d.At(0)].b.Name; got != want {
				t.Fatalf("%s with a stale cookie on %s, hashlb's choice is %s", path, got, want)
			}
		}
	})
}
