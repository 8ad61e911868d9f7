package lbcore

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// scopedBalancer returns a Balancer of js whose sessions are signed with
// keys (SessionKeyEnv's form) for root_id rootID.
func scopedBalancer(t testing.TB, js, keys, rootID string) (*Config, *Balancer) {
	t.Helper()
	c := mustConfig(t, js)
	b := NewBalancer(c, 1)
	if err := b.EnableSession([]byte(keys), rootID); err != nil {
		t.Fatal(err)
	}
	return c, b
}

// twoPools are two plugins' configurations whose services have the same
// identities (hashId web-0 and web-1, as a StatefulSet's pods in two
// namespaces), the second with web-0 drained (weight 0).
const (
	scopeA = `{"lbMethod":"URLHASH","session":{"type":"cookie"},"services":[{"name":"a0","address":"10.0.0.1:80","hashId":"web-0"},{"name":"a1","address":"10.0.0.2:80","hashId":"web-1"}]}`
	scopeB = `{"lbMethod":"URLHASH","session":{"type":"cookie"},"services":[{"name":"b0","address":"10.1.0.1:80","hashId":"web-0","weight":0},{"name":"b1","address":"10.1.0.2:80","hashId":"web-1"}]}`
)

// TestSessionScope: a value issued by one plugin is forged under another
// root_id or session name with the same key and services of the same
// identity, a drained one included; under the same scope it is valid, as
// on another worker or proxy of the same plugin.
func TestSessionScope(t *testing.T) {
	key := string(testSessionKey)
	ca, a := scopedBalancer(t, scopeA, key, "shop")
	// Issue sessions until one names web-0, which plugin B drains.
	var v string
	for i := 0; v == ""; i++ {
		r := Request{Target: fmt.Sprintf("/%d", i)}
		d, val := issue(t, a, &r, epoch)
		if ca.Services[d.At(0)].HashID == "web-0" {
			v = val
		}
	}
	for _, tc := range []struct {
		name, js, root string
		want           SessionState
	}{
		{"same plugin, another worker", scopeA, "shop", SessionValid},
		{"same scope over B's services (web-0 drained)", scopeB, "shop", SessionValid},
		{"another root_id", scopeB, "cart", SessionForged},
		{"another root_id, same services", scopeA, "cart", SessionForged},
		{"the default root_id", scopeB, "", SessionForged},
		{"another session name", strings.Replace(scopeB, `"type":"cookie"`, `"type":"cookie","name":"cart-session"`, 1), "shop", SessionAbsent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, b := scopedBalancer(t, tc.js, key, tc.root)
			name := c.Session.Name
			if tc.want == SessionAbsent {
				// The other plugin reads its own cookie name: give it A's
				// value under that name.
				name = "cart-session"
			}
			d := b.Decide(withCookie(Request{Target: "/x"}, name, v), epoch.Add(time.Minute))
			want := tc.want
			if want == SessionAbsent {
				want = SessionForged
			}
			if d.Session != want {
				t.Fatalf("Decide(A's value) session %v, want %v", d.Session, want)
			}
			if want == SessionForged && (d.Reason == ReasonSession || c.Services[d.At(0)].HashID == "web-0" && c.Services[d.At(0)].Weight == 0) {
				t.Errorf("a refused value decided %v → %v", d.Reason, names(c, d))
			}
			if want == SessionValid && c.Services[d.At(0)].HashID != "web-0" {
				t.Errorf("a valid value chose %v, want web-0's service", names(c, d))
			}
		})
	}
}

// TestSessionFuture: a value signed more than clockSkew ahead of the
// proxy's clock is refused (future); within it, it counts as issued now.
func TestSessionFuture(t *testing.T) {
	key := string(testSessionKey)
	for _, tc := range []struct {
		name, skew string
		ahead      time.Duration
		want       SessionState
	}{
		{"1 day ahead", "", 24 * time.Hour, SessionFuture},
		{"1 minute ahead", "", time.Minute, SessionValid},
		{"5 minutes ahead", "", 5 * time.Minute, SessionValid},
		{"6 minutes ahead", "", 6 * time.Minute, SessionFuture},
		{"1 minute ahead, skew 30s", `,"clockSkew":"30s"`, time.Minute, SessionFuture},
		{"50 minutes ahead, skew 1h", `,"clockSkew":"1h"`, 50 * time.Minute, SessionValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := pool("ROUNDROBIN", 4, `"session":{"type":"cookie","absoluteTimeout":"1h"`+tc.skew+`}`)
			c, b := scopedBalancer(t, js, key, "")
			r := Request{}
			d0, v := issue(t, b, &r, epoch.Add(tc.ahead)) // a proxy whose clock runs ahead
			d := b.Decide(withCookie(r, "hashlb-session", v), epoch)
			if d.Session != tc.want {
				t.Fatalf("a value signed %v ahead: %v, want %v", tc.ahead, d.Session, tc.want)
			}
			if tc.want == SessionFuture {
				if d.Reason == ReasonSession || !d.SetsSession() {
					t.Errorf("a future value decided %v (sets a new session: %v)", d.Reason, d.SetsSession())
				}
				// The new value is signed with this proxy's time.
				nv := string(b.AppendSessionValue(nil, &d, epoch))
				if got := b.Decide(withCookie(r, "hashlb-session", nv), epoch); got.Session != SessionValid {
					t.Errorf("the re-issued value: %v, want valid", got.Session)
				}
				return
			}
			if first(c, d) != first(c, d0) {
				t.Errorf("chose %s, want %s", first(c, d), first(c, d0))
			}
		})
	}
}

// TestSessionRotation: values signed with a previous key are honoured and
// re-issued with the current one; a removed key's values are forged.
func TestSessionRotation(t *testing.T) {
	k1 := "k1-0123456789abcdef0123456789abcdef"
	k2 := "k2-0123456789abcdef0123456789abcdef"
	js := pool("URLHASH", 8, `"session":{"type":"cookie","absoluteTimeout":"1d"}`)
	c, b1 := scopedBalancer(t, js, k1, "")
	_, b21 := scopedBalancer(t, js, k2+SessionKeySep+k1, "")
	_, b2 := scopedBalancer(t, js, k2, "")
	for i := range 20 {
		r := Request{Target: fmt.Sprintf("/c/%d", i)}
		d1, v1 := issue(t, b1, &r, epoch)
		// K2 current, K1 previous: honoured, on its service, re-issued under K2.
		other := withCookie(Request{Target: "/elsewhere"}, "hashlb-session", v1)
		d := b21.Decide(other, epoch.Add(time.Hour))
		if d.Session != SessionValid || first(c, d) != first(c, d1) || d.SessionKey() != 1 {
			t.Fatalf("client %d: K1's value under K2,K1: %v on %s (key %d), want valid on %s (key 1)", i, d.Session, first(c, d), d.SessionKey(), first(c, d1))
		}
		if !d.SetsSession() || !d.Refreshes() {
			t.Fatalf("client %d: a previous key's value is not re-issued", i)
		}
		v2 := string(b21.AppendSessionValue(nil, &d, epoch.Add(time.Hour)))
		// The re-issued value keeps its issue time and verifies under K2 alone.
		d2 := b2.Decide(withCookie(Request{Target: "/x"}, "hashlb-session", v2), epoch.Add(2*time.Hour))
		if d2.Session != SessionValid || first(c, d2) != first(c, d1) || d2.SessionKey() != 0 || d2.SetsSession() {
			t.Fatalf("client %d: the re-issued value under K2: %v on %s (key %d, sets %v)", i, d2.Session, first(c, d2), d2.SessionKey(), d2.SetsSession())
		}
		if got := b2.Decide(withCookie(Request{Target: "/x"}, "hashlb-session", v2), epoch.Add(25*time.Hour)); got.Session != SessionExpired {
			t.Fatalf("client %d: the re-issued value 25h after its first issue: %v, want expired (issue time kept)", i, got.Session)
		}
		// K1 removed: its values are forged, and fall back.
		if got := b2.Decide(other, epoch.Add(time.Hour)); got.Session != SessionForged || got.SessionKey() != -1 || !got.SetsSession() {
			t.Fatalf("client %d: K1's value under K2 alone: %v (key %d), want forged", i, got.Session, got.SessionKey())
		}
	}
}

// TestParseSessionKeys: the list's errors name the key's position, never
// its bytes.
func TestParseSessionKeys(t *testing.T) {
	k := strings.Repeat("k", MinSessionKeyBytes)
	secret := "s3cr3t-that-is-long-enough-but-repeated!"
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "session: no key"},
		{"short current", "short", "session: the key in HASHLB_SESSION_KEY has 5 bytes, want 32 or more"},
		{"short previous", k + ",short", "session: previous key 1 in HASHLB_SESSION_KEY has 5 bytes"},
		{"empty previous", k + ",", "session: previous key 1 in HASHLB_SESSION_KEY has 0 bytes"},
		{"repeated", secret + "," + secret, "session: previous key 1 in HASHLB_SESSION_KEY repeats key 0"},
		{"too many", strings.Join([]string{k + "1", k + "2", k + "3", k + "4", k + "5"}, ","), "holds more than 4 keys"},
	} {
		_, err := ParseSessionKeys([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the error shows the key: %v", tc.name, err)
		}
	}
	keys, err := ParseSessionKeys([]byte(k + "1," + k + "2"))
	if err != nil || len(keys) != 2 || string(keys[0]) != k+"1" {
		t.Errorf("two keys: %q, %v", keys, err)
	}
}
