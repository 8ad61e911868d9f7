package e2e

// The cases of Gateway API's session persistence conformance tests,
// reproduced in hostsim. The tests are provisional upstream: the cookie and
// permanent-lifetime tests are in kubernetes-sigs/gateway-api pull request
// 4954 (commit 25b5ff03219edc9ccd573bcc5a68157586d9035c,
// conformance/tests/httproute-session-persistence-cookie.go and
// httproute-session-persistence-cookie-permanent-lifetime.go); the header,
// weighted and route-rule cases are the "Conformance Details" table of
// GEP-1619 (geps/gep-1619/index.md at commit
// 4564255ac2c35d582249b3cdf261bdf51c8bca32), which asks for N >= 50
// requests per check. A Gateway API route rule maps to one hashlb plugin
// (one session block); "sessions not shared across rules" maps to one
// cookie name per plugin, and the value's MAC covers the name.

import (
	"fmt"
	"testing"
)

// gatewayN is how many requests with the session each case sends (GEP-1619: N >= 50).
const gatewayN = 50

// TestGatewayHTTPRouteSessionPersistenceCookie: HTTPRouteSessionPersistenceCookie.
// The first response sets a session cookie with neither Expires nor
// Max-Age; every later request with it reaches the same backend.
func TestGatewayHTTPRouteSessionPersistenceCookie(t *testing.T) {
	t.Parallel()
	h := sessionHost(t, sessionConfig(t, map[string]any{"type": "cookie"}, sessionServices(2, nil), nil), 4, sessionKey)
	first := mustSession(t, h, 0)
	v, attrs, ok := first.sessionCookie(t, "hashlb-session")
	if !ok {
		t.Fatalf("no session cookie in %q", first.set)
	}
	if hasAttr(attrs, "expires") || hasAttr(attrs, "max-age") {
		t.Errorf("session cookie %q has Expires or Max-Age", first.set)
	}
	for i := range gatewayN {
		if r := mustSession(t, h, i%4, [2]string{"cookie", "hashlb-session=" + v}); r.service != first.service {
			t.Fatalf("sticky request %d: %s, want %s (session cookie not honoured)", i+1, r.service, first.service)
		}
	}
}

// TestGatewayHTTPRouteSessionPersistenceCookiePermanentLifetime:
// HTTPRouteSessionPersistenceCookiePermanentLifetime (absoluteTimeout 1h,
// lifetimeType Permanent) and GEP-1619's 5-minute case: the cookie's
// Max-Age is absoluteTimeout, and the session holds until it expires.
func TestGatewayHTTPRouteSessionPersistenceCookiePermanentLifetime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timeout string
		maxAge  int
	}{{"1h", 3600}, {"5m", 300}} {
		h := sessionHost(t, sessionConfig(t, map[string]any{"type": "cookie", "lifetime": "permanent", "absoluteTimeout": tc.timeout}, sessionServices(2, nil), nil), 2, sessionKey)
		first := mustSession(t, h, 0)
		v, attrs, ok := first.sessionCookie(t, "hashlb-session")
		if !ok || attrs["max-age"] != fmt.Sprint(tc.maxAge) {
			t.Fatalf("absoluteTimeout %s: Set-Cookie %q, want Max-Age=%d", tc.timeout, first.set, tc.maxAge)
		}
		for i := range gatewayN {
			if i == gatewayN-1 { // the last one just before the cookie expires
				for range tc.maxAge - 2 {
					tick(h)
				}
			}
			if r := mustSession(t, h, i%2, [2]string{"cookie", "hashlb-session=" + v}); r.service != first.service || r.reason != "session" {
				t.Fatalf("absoluteTimeout %s: request %d: %s (%s), want %s", tc.timeout, i+1, r.service, r.reason, first.service)
			}
		}
		tick(h)
		tick(h)
		if r := mustSession(t, h, 0, [2]string{"cookie", "hashlb-session=" + v}); r.reason == "session" {
			t.Errorf("absoluteTimeout %s: the session holds past it", tc.timeout)
		}
	}
}

// TestGatewaySessionPersistenceHeader: GEP-1619's header case
// (GRPCRouteSessionPersistenceHeader; the same on HTTP): the first response
// carries the session header, and requests that send it back reach the
// same backend.
func TestGatewaySessionPersistenceHeader(t *testing.T) {
	t.Parallel()
	h := sessionHost(t, sessionConfig(t, map[string]any{"type": "header", "name": "Session-Id"}, sessionServices(3, nil), nil), 4, sessionKey)
	first := mustSession(t, h, 0)
	v := first.header("session-id")
	if v == "" {
		t.Fatalf("no session-id header in the response %q", first.response)
	}
	for i := range gatewayN {
		r := mustSession(t, h, i%4, [2]string{"Session-Id", v})
		if r.service != first.service {
			t.Fatalf("request %d with the header: %s, want %s", i+1, r.service, first.service)
		}
		if _, ok := r.upstreamHeader("session-id"); ok {
			t.Fatal("the upstream request carries the session header")
		}
	}
}

// TestGatewaySessionPersistenceWeighted: GEP-1619's "Multiple Weighted
// Backends - Initial Distribution Honored": new clients split 70/30 by
// weight, and every established session keeps its backend whatever the
// weights become, 0 included (GEP-1619: persistence MUST be maintained even
// if the weight is set to 0).
func TestGatewaySessionPersistenceWeighted(t *testing.T) {
	t.Parallel()
	block := map[string]any{"type": "cookie"}
	h := sessionHost(t, sessionConfig(t, block, sessionServices(2, map[string]int{"b1": 70, "b2": 30}), nil), 1, sessionKey)
	count := map[string]int{}
	var values, services []string
	for range 1000 {
		r := mustSession(t, h, 0)
		v, _, _ := r.sessionCookie(t, "hashlb-session")
		values, services = append(values, v), append(services, r.service)
		count[r.service]++
	}
	if count["b1"] != 700 || count["b2"] != 300 {
		t.Errorf("1000 new clients at weights 70/30: %v", count)
	}
	for _, w := range []map[string]int{{"b1": 30, "b2": 70}, {"b1": 0, "b2": 100}, {"b1": 100, "b2": 0}} {
		if err := h.Configure(sessionConfig(t, block, sessionServices(2, w), nil)); err != nil {
			t.Fatal(err)
		}
		for c, v := range values[:gatewayN*4] {
			if r := mustSession(t, h, 0, [2]string{"cookie", "hashlb-session=" + v}); r.service != services[c] {
				t.Fatalf("weights %v: client %d of %s moved to %s", w, c, services[c], r.service)
			}
		}
	}
}

// TestGatewaySessionPersistenceScopedToRouteRule: GEP-1619's "Session
// Persistence Scoped to Route Rule". Two rules (/a and /b) over the same
// backends are two hashlb plugins sharing the key, each with its own
// cookie name: each establishes and keeps its own session; /a's value is
// not honoured by /b, not even under /b's cookie name.
func TestGatewaySessionPersistenceScopedToRouteRule(t *testing.T) {
	t.Parallel()
	ruleA := sessionHost(t, sessionConfig(t, map[string]any{"type": "cookie", "name": "session-a"}, sessionServices(4, nil), nil), 2, sessionKey)
	ruleB := sessionHost(t, sessionConfig(t, map[string]any{"type": "cookie", "name": "session-b"}, sessionServices(4, nil), nil), 2, sessionKey)
	ra, rb := mustSession(t, ruleA, 0), mustSession(t, ruleB, 0)
	va, _, okA := ra.sessionCookie(t, "session-a")
	vb, _, okB := rb.sessionCookie(t, "session-b")
	if !okA || !okB {
		t.Fatalf("each rule sets its own cookie: /a %q, /b %q", ra.set, rb.set)
	}
	jar := [2]string{"cookie", "session-a=" + va + "; session-b=" + vb}
	for i := range gatewayN {
		if r := mustSession(t, ruleA, i%2, jar); r.service != ra.service || r.reason != "session" {
			t.Fatalf("/a request %d: %s (%s), want %s", i+1, r.service, r.reason, ra.service)
		}
		if r := mustSession(t, ruleB, i%2, jar); r.service != rb.service || r.reason != "session" {
			t.Fatalf("/b request %d: %s (%s), want %s", i+1, r.service, r.reason, rb.service)
		}
	}
	// /a's session under /b's name: not /b's session.
	for i := range gatewayN {
		if r := mustSession(t, ruleB, 0, [2]string{"cookie", "session-b=" + va}); r.reason == "session" {
			t.Fatalf("/a's value sent as session-b: /b honoured it (request %d)", i+1)
		}
	}
}
