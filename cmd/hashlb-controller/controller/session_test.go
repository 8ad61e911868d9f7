package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/hashlb/hashlb/cmd/hashlb-controller/internal/testenv"
	"github.com/hashlb/hashlb/lbcore"
)

// sessionDebounce keeps the session tests' successive writes quick.
const sessionDebounce = 200 * time.Millisecond

// gw is a direct client that also knows the Gateway API types.
func (k *kube) gw() client.Client {
	k.t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		k.t.Fatal(err)
	}
	if err := addGatewayScheme(scheme); err != nil {
		k.t.Fatal(err)
	}
	c, err := client.New(k.cfg, client.Options{Scheme: scheme})
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

// sessionPlugin creates a WasmPlugin annotated with svc whose pluginConfig
// has keys the controller must leave alone, and (withKey) a vmConfig naming
// the session key.
func sessionPlugin(k *kube, name, svc string, withKey bool) *unstructured.Unstructured {
	k.t.Helper()
	wasm := map[string]any{
		"url": "oci://registry.example.com/hashlb/hashlb:v0.1.0",
		"pluginConfig": map[string]any{
			"lbMethod":      "SOURCEIPHASH",
			"upstreamCount": int64(2),
			"persistence":   map[string]any{"keys": []any{"${client.ip}"}, "expire": "10m"},
			"services":      []any{map[string]any{"name": "static", "address": "192.0.2.1:80"}},
		},
	}
	if withKey {
		wasm["vmConfig"] = map[string]any{"env": []any{map[string]any{"name": sessionKeyEnv, "valueFrom": "HOST"}}}
	}
	spec := map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "frontend"}}}
	return k.createPlugin(name, annotated(svc), spec, wasm)
}

// rule is one rule of an HTTPRoute: its backends and persistence (nil: none).
type rule struct {
	backends []gwv1.BackendObjectReference
	sp       *gwv1.SessionPersistence
}

func svcRef(name string) gwv1.BackendObjectReference {
	return gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr(gwv1.PortNumber(80))}
}

// putRoute creates or replaces HTTPRoute ns/name with rules.
func (k *kube) putRoute(c client.Client, ns, name string, rules ...rule) {
	k.t.Helper()
	rt := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, r := range rules {
		hr := gwv1.HTTPRouteRule{SessionPersistence: r.sp}
		for _, b := range r.backends {
			hr.BackendRefs = append(hr.BackendRefs, gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{BackendObjectReference: b}})
		}
		rt.Spec.Rules = append(rt.Spec.Rules, hr)
	}
	ctx := context.Background()
	old := &gwv1.HTTPRoute{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, old); err == nil {
		rt.ResourceVersion = old.ResourceVersion
		if err := c.Update(ctx, rt); err != nil {
			k.t.Fatal(err)
		}
		return
	}
	if err := c.Create(ctx, rt); err != nil {
		k.t.Fatal(err)
	}
}

func (k *kube) deleteObj(c client.Client, o client.Object) {
	k.t.Helper()
	if err := c.Delete(context.Background(), o); err != nil {
		k.t.Fatal(err)
	}
}

// sessionOf is the WasmPlugin's spec.pluginConfig.session as compact JSON.
func sessionOf(wp *unstructured.Unstructured) string { return pluginConfigOf(wp, "session") }

func (k *kube) waitSession(name, want string) *unstructured.Unstructured {
	k.t.Helper()
	var got *unstructured.Unstructured
	k.waitFor(name, settle, "session "+want, func(wp *unstructured.Unstructured) bool {
		got = wp
		return sessionOf(wp) == want
	})
	return got
}

// jsonOf is v as compact JSON with sorted keys (what sessionOf gives).
func jsonOf(v map[string]any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

func cookie(name, timeout string, lifetime gwv1.CookieLifetimeType) *gwv1.SessionPersistence {
	sp := &gwv1.SessionPersistence{Type: ptr(gwv1.CookieBasedSessionPersistence)}
	if name != "" {
		sp.SessionName = ptr(name)
	}
	if timeout != "" {
		sp.AbsoluteTimeout = ptr(gwv1.Duration(timeout))
	}
	if lifetime != "" {
		sp.CookieConfig = &gwv1.CookieConfig{LifetimeType: ptr(lifetime)}
	}
	return sp
}

// specBesides is the object's spec without pluginConfig.services and
// pluginConfig.session: what the controller must leave exactly as it is.
func specBesides(wp *unstructured.Unstructured) map[string]any {
	obj := wp.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, kindOf(wp).Path("pluginConfig", "session")...)
	return specWithoutServices(obj)
}

// TestSessionFromHTTPRoute: a route rule with cookie persistence naming the
// Service becomes the session block (type, name, timeout, lifetime), beside
// the services, every other key untouched; a change of the route changes
// the block (header type, keys the new one lacks removed); the persistence
// removed, or the route deleted, removes the block and its annotation.
func TestSessionFromHTTPRoute(t *testing.T) { forKinds(t, testSessionFromHTTPRoute) }

func testSessionFromHTTPRoute(t *testing.T, k *kube) {
	gw := k.gw()
	k.controller(Options{Debounce: sessionDebounce})
	p := k.webPods(2)
	orig := sessionPlugin(k, "hashlb", "web", true)
	k.waitServices("hashlb", want(8080, p...), settle)

	// Another route, naming another Service, has no say.
	k.putRoute(gw, k.ns, "other", rule{[]gwv1.BackendObjectReference{svcRef("api")}, cookie("api", "5m", "")})
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web")}, cookie("web-session", "1h30m", gwv1.PermanentCookieLifetimeType)})
	cookieBlock := jsonOf(map[string]any{"type": "cookie", "name": "web-session", "absoluteTimeout": "90m", "lifetime": "permanent"})
	wp := k.waitSession("hashlb", cookieBlock)
	if got, want := wp.GetAnnotations()[AnnotationSessionFrom], "HTTPRoute "+k.ns+"/web rule 0"; got != want {
		t.Errorf("%s = %q, want %q", AnnotationSessionFrom, got, want)
	}
	if !sameSpec(specBesides(wp), specBesides(orig)) {
		t.Errorf("spec besides services and session changed:\n got %v\nwant %v", specBesides(wp), specBesides(orig))
	}
	if got := servicesOf(wp); got != want(8080, p...) {
		t.Errorf("services = %s, want %s", got, want(8080, p...))
	}
	if e, ok := wp.GetAnnotations()[AnnotationError]; ok {
		t.Errorf("%s = %q, want none", AnnotationError, e)
	}
	k.waitEvent("hashlb", ReasonSessionUpdated, `"name":"web-session"`, settle)
	// What the controller wrote, lbcore accepts with the session as asked.
	list, _, _ := unstructured.NestedSlice(wp.Object, k.kind.Path("pluginConfig", "services")...)
	if _, err := newConfigJSON(wp, list); err != nil {
		t.Errorf("the written configuration: %v", err)
	}

	// The route changes: a header session, a Session-lifetime cookie
	// config dropped; "lifetime" must go, not linger from the merge.
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web")}, &gwv1.SessionPersistence{
		Type: ptr(gwv1.HeaderBasedSessionPersistence), SessionName: ptr("X-Web-Session"), AbsoluteTimeout: ptr(gwv1.Duration("2h"))}})
	k.waitSession("hashlb", jsonOf(map[string]any{"type": "header", "name": "X-Web-Session", "absoluteTimeout": "2h"}))

	// No name, no timeout: the name is the rule's own (sessions are signed
	// for it, so no other rule honours them), the timeout hashlb's default
	// (absent); Session lifetime maps to "session".
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web")}, cookie("", "", gwv1.SessionCookieLifetimeType)})
	k.waitSession("hashlb", jsonOf(map[string]any{"type": "cookie", "name": "hashlb_" + k.ns + "_web_0", "lifetime": "session"}))

	// The persistence removed: the block and the annotation go.
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web")}, nil})
	wp = k.waitSession("hashlb", "<none>")
	if v, ok := wp.GetAnnotations()[AnnotationSessionFrom]; ok {
		t.Errorf("%s = %q after the persistence was removed, want none", AnnotationSessionFrom, v)
	}
	k.waitEvent("hashlb", ReasonSessionRemoved, "session block removed", settle)
	if !sameSpec(specBesides(wp), specBesides(orig)) {
		t.Errorf("spec besides services and session changed:\n got %v\nwant %v", specBesides(wp), specBesides(orig))
	}

	// Back, then the route deleted.
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web")}, cookie("web-session", "1h30m", gwv1.PermanentCookieLifetimeType)})
	k.waitSession("hashlb", cookieBlock)
	k.deleteObj(gw, &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web"}})
	wp = k.waitSession("hashlb", "<none>")
	if v, ok := wp.GetAnnotations()[AnnotationSessionFrom]; ok {
		t.Errorf("%s = %q after the route was deleted, want none", AnnotationSessionFrom, v)
	}
}

// TestSessionNotHonoured: what cannot be honoured is reported on the
// WasmPlugin (hashlb.io/error, a SessionRejected event) and leaves the
// session block exactly as it was, while the services keep following the
// endpoints: two rules (in one route or two) with different persistence, a
// rule whose backends are not all this Service, a timeout hashlb's range
// refuses, a plugin without the session key, and a block the operator wrote.
func TestSessionNotHonoured(t *testing.T) {
	t.Parallel()
	k := newKube(t)
	gw := k.gw()
	k.controller(Options{Debounce: sessionDebounce})
	k.service("web")
	p := pods("web", 1, 3)
	k.slice("web", "web-a", v4, httpPort, p[:2]...)
	sessionPlugin(k, "hashlb", "web", true)
	web := []gwv1.BackendObjectReference{svcRef("web")}
	good := cookie("web-session", "1h", "")
	k.putRoute(gw, k.ns, "web", rule{web, good})
	goodBlock := jsonOf(map[string]any{"type": "cookie", "name": "web-session", "absoluteTimeout": "1h"})
	k.waitSession("hashlb", goodBlock)
	k.waitServices("hashlb", want(8080, p[:2]...), settle)

	// (each step: the error names the cause, the block stays as it was,
	// and an endpoint change still reaches the services)
	step, eps := 0, p[:2]
	check := func(what, sub string) {
		t.Helper()
		msg := k.waitError("hashlb", sub, settle)
		if !strings.HasPrefix(msg, "session not updated: ") {
			t.Errorf("%s: %s = %q, want it to start with %q", what, AnnotationError, msg, "session not updated: ")
		}
		k.waitEvent("hashlb", ReasonSessionRejected, sub, settle)
		step++
		eps = p[:2]
		if step%2 == 1 {
			eps = p
		}
		k.slice("web", "web-a", v4, httpPort, eps...)
		k.waitServices("hashlb", want(8080, eps...), settle)
		wp := k.get("hashlb")
		if got := sessionOf(wp); got != goodBlock {
			t.Errorf("%s: session = %s, want it kept as %s", what, got, goodBlock)
		}
		if from := wp.GetAnnotations()[AnnotationSessionFrom]; !strings.HasPrefix(from, "HTTPRoute "+k.ns+"/web rule 0") || strings.Contains(from, "web2") {
			t.Errorf("%s: %s = %q, want the rules of the block kept", what, AnnotationSessionFrom, from)
		}
	}

	// Two rules of one route: one asks for a header session.
	k.putRoute(gw, k.ns, "web", rule{web, good}, rule{web, &gwv1.SessionPersistence{Type: ptr(gwv1.HeaderBasedSessionPersistence)}})
	check("two rules", "ask for different sessionPersistence")
	// The same persistence on two rules is one session block: fine again.
	k.putRoute(gw, k.ns, "web", rule{web, good}, rule{web, cookie("web-session", "1h", "")})
	k.waitError("hashlb", "", settle)
	// Two routes.
	k.putRoute(gw, k.ns, "web", rule{web, good})
	k.putRoute(gw, k.ns, "web2", rule{web, cookie("other-session", "1h", "")})
	check("two routes", "HTTPRoute "+k.ns+"/web2 rule 0 ask for different")
	k.deleteObj(gw, &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web2"}})
	k.waitError("hashlb", "", settle)
	// A rule splitting between this Service and another.
	k.putRoute(gw, k.ns, "web", rule{[]gwv1.BackendObjectReference{svcRef("web"), svcRef("api")}, cookie("web-session", "2h", "")})
	check("mixed backends", "backendRefs other than Service "+k.ns+"/web")
	// Out of hashlb's range: 375 days (at most 365d), and 30 seconds (at least 1m).
	k.putRoute(gw, k.ns, "web", rule{web, cookie("web-session", "9000h", "")})
	check("too long", `"375d" is out of range [1m, 365d]`)
	k.putRoute(gw, k.ns, "web", rule{web, cookie("web-session", "30s", "")})
	check("too short", `"30s" is out of range [1m, 365d]`)
	k.putRoute(gw, k.ns, "web", rule{web, good})
	k.waitError("hashlb", "", settle)

	// A plugin without the session key in its VM's environment.
	sessionPlugin(k, "nokey", "web", false)
	k.waitError("nokey", "does not name "+sessionKeyEnv, settle)
	k.waitServices("nokey", want(8080, eps...), settle)
	if got := sessionOf(k.get("nokey")); got != "<none>" {
		t.Errorf("nokey: session = %s, want none", got)
	}

	// The operator's own session block (no hashlb.io/session-from): kept.
	sessionPlugin(k, "own", "web", true)
	own := k.get("own")
	mine := map[string]any{"type": "cookie", "name": "mine"}
	if err := unstructured.SetNestedField(own.Object, mine, k.kind.Path("pluginConfig", "session")...); err != nil {
		t.Fatal(err)
	}
	if err := k.c.Update(context.Background(), own); err != nil {
		t.Fatal(err)
	}
	k.waitError("own", "is the operator's", settle)
	if got := sessionOf(k.get("own")); got != jsonOf(mine) {
		t.Errorf("own: session = %s, want the operator's %s", got, jsonOf(mine))
	}
	// With no route asking any more, the operator's block still stays.
	k.deleteObj(gw, &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "web"}})
	k.waitError("own", "", settle)
	k.waitSession("hashlb", "<none>")
	if got := sessionOf(k.get("own")); got != jsonOf(mine) {
		t.Errorf("own, no route: session = %s, want the operator's %s", got, jsonOf(mine))
	}
}

// TestSessionCrossNamespace: a route of another namespace naming the
// Service counts only with a ReferenceGrant in the Service's namespace, as
// Gateway API requires; without one it is ignored (neither applied nor
// reported). Not parallel: the controller watches every namespace.
func TestSessionCrossNamespace(t *testing.T) {
	k := newKube(t)
	other := newKube(t)
	gw := k.gw()
	k.controller(Options{Namespace: allNamespaces, Debounce: sessionDebounce})
	p := k.webPods(2)
	sessionPlugin(k, "hashlb", "web", true)
	k.waitServices("hashlb", want(8080, p...), settle)

	ref := svcRef("web")
	ref.Namespace = ptr(gwv1.Namespace(k.ns))
	k.putRoute(gw, other.ns, "web", rule{[]gwv1.BackendObjectReference{ref}, cookie("web-session", "1h", "")})
	// A grant for another kind, then for another Service, allows nothing.
	grant := &gwv1beta1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: k.ns, Name: "routes"},
		Spec: gwv1beta1.ReferenceGrantSpec{
			From: []gwv1beta1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "GRPCRoute", Namespace: gwv1.Namespace(other.ns)}},
			To:   []gwv1beta1.ReferenceGrantTo{{Kind: "Service", Name: ptr(gwv1.ObjectName("api"))}},
		}}
	if err := gw.Create(context.Background(), grant); err != nil {
		t.Fatal(err)
	}
	// An endpoint change after both lands with no session, nor does one
	// come a little later.
	k.slice("web", "web-a", v4, httpPort, p[:1]...)
	k.waitServices("hashlb", want(8080, p[:1]...), settle)
	time.Sleep(3 * sessionDebounce)
	if got := sessionOf(k.get("hashlb")); got != "<none>" {
		t.Fatalf("without a ReferenceGrant: session = %s, want none", got)
	}
	if e, ok := k.get("hashlb").GetAnnotations()[AnnotationError]; ok {
		t.Errorf("without a ReferenceGrant: %s = %q, want none", AnnotationError, e)
	}

	grant.Spec.From[0].Kind = "HTTPRoute"
	grant.Spec.To[0].Name = ptr(gwv1.ObjectName("web"))
	if err := gw.Update(context.Background(), grant); err != nil {
		t.Fatal(err)
	}
	wpu := k.waitSession("hashlb", jsonOf(map[string]any{"type": "cookie", "name": "web-session", "absoluteTimeout": "1h"}))
	if got, want := wpu.GetAnnotations()[AnnotationSessionFrom], "HTTPRoute "+other.ns+"/web rule 0"; got != want {
		t.Errorf("%s = %q, want %q", AnnotationSessionFrom, got, want)
	}
	k.deleteObj(gw, grant)
	k.waitSession("hashlb", "<none>")
}

// TestSessionBlockMapping: Gateway API fields become hashlb's, durations in
// hashlb's one-unit form, absent fields absent (hashlb's defaults apply).
func TestSessionBlockMapping(t *testing.T) {
	for _, tt := range []struct {
		sp   *gwv1.SessionPersistence
		want string
	}{
		{&gwv1.SessionPersistence{}, `{"name":"hashlb_ns_route_0","type":"cookie"}`},
		{cookie("s", "1h30m", gwv1.PermanentCookieLifetimeType), `{"absoluteTimeout":"90m","lifetime":"permanent","name":"s","type":"cookie"}`},
		{cookie("", "24h", gwv1.SessionCookieLifetimeType), `{"absoluteTimeout":"1d","lifetime":"session","name":"hashlb_ns_route_0","type":"cookie"}`},
		{cookie("", "1m500ms", ""), `{"absoluteTimeout":"60500ms","name":"hashlb_ns_route_0","type":"cookie"}`},
		{&gwv1.SessionPersistence{Type: ptr(gwv1.HeaderBasedSessionPersistence), SessionName: ptr("X-S")}, `{"name":"X-S","type":"header"}`},
	} {
		b, err := sessionBlock(tt.sp, ruleSessionName("ns", "route", "0"))
		if err != nil {
			t.Errorf("%+v: %v", tt.sp, err)
			continue
		}
		if got := jsonOf(b); got != tt.want {
			t.Errorf("%+v: block %s, want %s", tt.sp, got, tt.want)
		}
	}
	if _, err := sessionBlock(&gwv1.SessionPersistence{Type: ptr(gwv1.SessionPersistenceType("Query"))}, "x"); err == nil {
		t.Error("type Query: no error")
	}
}

// TestRuleSessionName: one name per rule, a cookie name lbcore accepts,
// whatever the lengths; rules of two routes, or of two namespaces, whose
// names run together stay apart.
func TestRuleSessionName(t *testing.T) {
	long := strings.Repeat("r", 253)
	seen := map[string]string{}
	for _, r := range [][3]string{{"shop", "web", "0"}, {"shop", "web", "1"}, {"shop", "web-0", "0"}, {"shop-web", "0", "0"},
		{"a", "b.c", "0"}, {"a", "b", "c"}, {"ns", long, "0"}, {"ns", long, "1"}, {strings.Repeat("n", 63), long, "checkout"}} {
		n := ruleSessionName(r[0], r[1], r[2])
		if o, dup := seen[n]; dup {
			t.Errorf("rules %v and %s share session name %q", r, o, n)
		}
		seen[n] = fmt.Sprint(r)
		js := fmt.Sprintf(`{"session":{"type":"cookie","name":%q},"services":[{"name":"a","address":"10.0.0.1:80"}]}`, n)
		if _, err := lbcore.ParseConfig([]byte(js)); err != nil {
			t.Errorf("ruleSessionName%v = %q: %v", r, n, err)
		}
	}
}

// TestStandardChannelDropsSessionPersistence: the standard channel's
// HTTPRoute CRD of the pinned Gateway API has no sessionPersistence (the
// API server prunes it, so the controller sees none), the experimental one
// has it: docs/controller.md's claim about channels.
func TestStandardChannelDropsSessionPersistence(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for channel, want := range map[string]bool{"standard": false, "experimental": true} {
		files, err := testenv.GatewayAPICRDs(root, channel)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(data), "sessionPersistence:"); got != want {
			t.Errorf("%s channel %s: has sessionPersistence = %v, want %v", channel, filepath.Base(files[0]), got, want)
		}
	}
}

// TestRuleSessionsApart: two HTTPRoute rules without sessionName over
// services of the same identity (a StatefulSet's pod names in two
// namespaces), the second with that pod drained: a session the first
// rule's plugin issues is forged under the second's, with the same key and
// root_id, so it never reaches the drained pod.
func TestRuleSessionsApart(t *testing.T) {
	const key = "controller-test-session-key-0123456789abcdef"
	balancer := func(route string, weight int) (*lbcore.Config, *lbcore.Balancer) {
		block, err := sessionBlock(&gwv1.SessionPersistence{}, ruleSessionName("shop", route, "0"))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(map[string]any{"lbMethod": "ROUNDROBIN", "session": block, "services": []any{
			map[string]any{"name": "web-0", "address": "10.0.0.1:8080", "hashId": "web-0", "weight": weight},
			map[string]any{"name": "web-1", "address": "10.0.0.2:8080", "hashId": "web-1"},
		}})
		c, err := lbcore.ParseConfig(js)
		if err != nil {
			t.Fatal(err)
		}
		b := lbcore.NewBalancer(c, 1)
		if err := b.EnableSession([]byte(key), ""); err != nil {
			t.Fatal(err)
		}
		return c, b
	}
	ca, a := balancer("web", 1)
	cb, b := balancer("checkout", 0)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 4 {
		d := a.Decide(&lbcore.Request{}, now)
		v := string(a.AppendSessionValue(nil, &d, now))
		r := &lbcore.Request{Headers: [][2]string{{"cookie", cb.Session.Name + "=" + v}}}
		got := b.Decide(r, now)
		if got.Session != lbcore.SessionForged || got.Reason == lbcore.ReasonSession || cb.Services[got.At(0)].Name == "web-0" {
			t.Fatalf("client %d: rule web's session for %s at rule checkout: %v, %v on %s; want forged, never web-0 (drained)",
				i, ca.Services[d.At(0)].Name, got.Session, got.Reason, cb.Services[got.At(0)].Name)
		}
	}
}
