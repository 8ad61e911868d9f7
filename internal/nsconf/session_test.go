package nsconf

import (
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/lbcore"
)

// TestCookieInsertNamePerVServer: two COOKIEINSERT vservers over the same
// services get cookies of their own (NSC_ and the vserver's name), so the
// session signature, which covers the name, keeps each one's sessions its
// own; -cookieName still names it.
func TestCookieInsertNamePerVServer(t *testing.T) {
	src := servers + `add service a1 s1 HTTP 80
add service a2 s2 HTTP 80
add lb vserver shop HTTP 10.0.0.1 80 -persistenceType COOKIEINSERT -timeout 0
add lb vserver cart HTTP 10.0.0.2 80 -persistenceType COOKIEINSERT -timeout 0
add lb vserver named HTTP 10.0.0.3 80 -persistenceType COOKIEINSERT -timeout 0 -cookieName SRVID
bind lb vserver shop a1
bind lb vserver shop a2
bind lb vserver cart a1
bind lb vserver cart a2
bind lb vserver named a1
`
	res, rep := translateText(t, src, "")
	got := map[string]string{}
	for _, o := range res.Outputs {
		c, err := lbcore.ParseConfig(o.JSON)
		if err != nil || c.Session == nil {
			t.Fatalf("%s: %v, session %v\n%s", o.File, err, c.Session, rep)
		}
		got[o.File] = c.Session.Name
	}
	want := map[string]string{"shop.json": "NSC_shop", "cart.json": "NSC_cart", "named.json": "SRVID"}
	for f, n := range want {
		if got[f] != n {
			t.Errorf("%s: session.name %q, want %q (all: %v)", f, got[f], n, got)
		}
	}
	// A session of shop, brought to cart (same key, same services) under
	// cart's cookie name, is forged there.
	js := map[string][]byte{}
	for _, o := range res.Outputs {
		js[o.File] = o.JSON
	}
	balancer := func(file string) (*lbcore.Config, *lbcore.Balancer) {
		c, _ := lbcore.ParseConfig(js[file])
		b := lbcore.NewBalancer(c, 1)
		if err := b.EnableSession([]byte("nsconf-test-session-key-0123456789abcdef"), ""); err != nil {
			t.Fatal(err)
		}
		return c, b
	}
	_, shop := balancer("shop.json")
	cc, cart := balancer("cart.json")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := shop.Decide(&lbcore.Request{}, now)
	v := string(shop.AppendSessionValue(nil, &d, now))
	got2 := cart.Decide(&lbcore.Request{Headers: [][2]string{{"cookie", cc.Session.Name + "=" + v}}}, now)
	if got2.Session != lbcore.SessionForged || got2.Reason == lbcore.ReasonSession {
		t.Errorf("shop's session at cart: %v (%v), want forged", got2.Session, got2.Reason)
	}
}

// TestVServerCookie: names a cookie cannot hold are made into one, still
// one per vserver.
func TestVServerCookie(t *testing.T) {
	seen := map[string]string{}
	for _, name := range []string{"shop", "vs shop", "vs:shop", "vs_shop", "a@b", strings.Repeat("x", 200), strings.Repeat("x", 199) + "y"} {
		c := vserverCookie(name)
		if !isCookieToken(c) || len(c) > 128 || !strings.HasPrefix(c, "NSC_") {
			t.Errorf("vserverCookie(%q) = %q: not a cookie name of at most 128 bytes starting NSC_", name, c)
		}
		if o, dup := seen[c]; dup {
			t.Errorf("vserverCookie(%q) = vserverCookie(%q) = %q", name, o, c)
		}
		seen[c] = name
	}
}
