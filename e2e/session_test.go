package e2e

// Session persistence in hostsim: three proxies of four workers sharing
// the session key (docs/persistence.md#session-persistence).

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// sessionClients is how many clients the fleet tests follow.
const sessionClients = 10_000

// TestSessionFleet: 10^4 clients each get a session on a random worker of
// one of three proxies sharing the key, then bring it back to random
// workers of every proxy: none moves while its service is selectable, the
// upstream never sees the session, and no valid session is re-issued. Then,
// reconfigured on every proxy: b1 at weight 0 keeps its sessions and gets
// no new client; b2 disabled and b3 ejected (passive health) lose theirs,
// whose requests fall back and get a new session that then holds. For a
// cookie and a header session.
func TestSessionFleet(t *testing.T) {
	for _, typ := range []string{"cookie", "header"} {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			name := "hashlb-session"
			carry := func(v string) [2]string {
				if typ == "cookie" {
					return cookieLine(name, v)
				}
				return [2]string{name, v}
			}
			issued := func(t testing.TB, r sessionReply) (string, bool) {
				if typ == "cookie" {
					v, attrs, ok := r.sessionCookie(t, name)
					if ok && (attrs["max-age"] != "" || attrs["path"] != "/" || !hasAttr(attrs, "httponly")) {
						t.Fatalf("Set-Cookie %q: want a session cookie with Path=/ and HttpOnly", r.set)
					}
					return v, ok
				}
				v := r.header(name)
				return v, v != ""
			}
			stripped := func(t testing.TB, r sessionReply) {
				if typ == "cookie" {
					checkStripped(t, r, name)
				} else if _, ok := r.upstreamHeader(name); ok {
					t.Fatalf("the upstream request carries the session header %s", name)
				}
			}
			block := map[string]any{"type": typ, "absoluteTimeout": "1h"}
			passive := map[string]any{"passiveHealth": map[string]any{"consecutiveFailures": 1, "ejectionTime": "1h", "failureStatuses": "503"}}
			cfg := sessionConfig(t, block, sessionServices(4, nil), passive)
			var proxies []*hostsim.Host
			for range 3 {
				proxies = append(proxies, sessionHost(t, cfg, 4, sessionKey))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			pick := func() (*hostsim.Host, int) { return proxies[rng.IntN(3)], rng.IntN(4) }
			values, services := make([]string, sessionClients), make([]string, sessionClients)
			count := map[string]int{}
			for c := range sessionClients {
				h, w := pick()
				r := mustSession(t, h, w)
				v, ok := issued(t, r)
				if !ok || r.reason != "round_robin" {
					t.Fatalf("client %d: first request: reason %s, session %q (%v)", c, r.reason, v, ok)
				}
				values[c], services[c] = v, r.service
				count[r.service]++
			}
			t.Logf("%d sessions: %v", sessionClients, count)
			moved, reissued := 0, 0
			for c := range sessionClients {
				h, w := pick()
				r := mustSession(t, h, w, carry(values[c]))
				stripped(t, r)
				if r.service != services[c] || r.reason != "session" {
					moved++
				}
				if _, ok := issued(t, r); ok {
					reissued++
				}
			}
			if moved != 0 || reissued != 0 {
				t.Fatalf("second requests on random workers of 3 proxies: %d of %d clients moved, %d valid sessions re-issued; want 0 and 0", moved, sessionClients, reissued)
			}

			// Every proxy: b1 weight 0, b2 disabled; b3 ejected by a 503.
			svcs := sessionServices(4, map[string]int{"b1": 0})
			svcs[1]["enabled"] = false
			cfg2 := sessionConfig(t, block, svcs, passive)
			for _, h := range proxies {
				if err := h.Configure(cfg2); err != nil {
					t.Fatal(err)
				}
			}
			b3 := -1
			for c := range services {
				if services[c] == "b3" {
					b3 = c
					break
				}
			}
			for _, h := range proxies { // one failed response per proxy ejects b3 on all its workers
				if r, err := sessionRequest(h, 0, 503, carry(values[b3])); err != nil || r.service != "b3" {
					t.Fatalf("b3's client: %+v, %v", r, err)
				}
			}
			for _, h := range proxies {
				tick(h) // the ejection reaches every worker at the tick
			}
			kept, fellBack, newOn1 := 0, 0, 0
			for c := range sessionClients {
				h, w := pick()
				r := mustSession(t, h, w, carry(values[c]))
				stripped(t, r)
				v, set := issued(t, r)
				switch services[c] {
				case "b1", "b4": // weight 0 keeps its sessions; b4 untouched
					if r.service != services[c] || r.reason != "session" || set {
						t.Fatalf("client %d of %s: now on %s (%s), new session %v; want kept", c, services[c], r.service, r.reason, set)
					}
					kept++
				default: // b2 disabled, b3 ejected: fall back, new session, on b4 (b1 takes no new clients)
					if r.service != "b4" || r.reason == "session" || !set {
						t.Fatalf("client %d of %s: on %s (%s), new session %v; want b4 by round robin and a new session", c, services[c], r.service, r.reason, set)
					}
					values[c], services[c] = v, r.service
					fellBack++
				}
			}
			for range 1000 {
				h, w := pick()
				if r := mustSession(t, h, w); r.service == "b1" {
					newOn1++
				}
			}
			if newOn1 != 0 {
				t.Errorf("%d of 1000 new clients went to b1 at weight 0", newOn1)
			}
			// The new sessions hold.
			for c := range sessionClients {
				h, w := pick()
				if r := mustSession(t, h, w, carry(values[c])); r.service != services[c] || r.reason != "session" {
					t.Fatalf("client %d: its new session for %s: on %s (%s)", c, services[c], r.service, r.reason)
				}
			}
			t.Logf("after the change: %d kept (b1 at weight 0, b4), %d fell back to a new session", kept, fellBack)
			flushMetrics(proxies[0])
			for _, s := range []string{"valid", "unselectable", "issued"} {
				if metricValue(proxies[0], "hashlb.session_"+s) == 0 {
					t.Errorf("hashlb.session_%s is 0 on proxy 0", s)
				}
			}
		})
	}
}

func hasAttr(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// TestSessionForgedValues: no altered session selects a service: every
// character of a valid value replaced in turn, the value truncated at every
// length, 16 KiB of it, another proxy's key, and a value for another
// session name; each request is balanced by the method (reason
// round_robin), gets a new session, and the upstream sees no session.
func TestSessionForgedValues(t *testing.T) {
	t.Parallel()
	cfg := sessionConfig(t, map[string]any{"type": "cookie"}, sessionServices(4, nil), nil)
	h := sessionHost(t, cfg, 2, sessionKey)
	foreign := sessionHost(t, cfg, 1, otherSessionKey)
	renamed := sessionHost(t, sessionConfig(t, map[string]any{"type": "cookie", "name": "other"}, sessionServices(4, nil), nil), 1, sessionKey)
	v, _, _ := mustSession(t, h, 0).sessionCookie(t, "hashlb-session")
	fv, _, _ := mustSession(t, foreign, 0).sessionCookie(t, "hashlb-session")
	rv, _, _ := mustSession(t, renamed, 0).sessionCookie(t, "other")
	if v == "" || fv == "" || rv == "" {
		t.Fatal("no session issued")
	}
	var forged []string
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range len(v) {
		j := (strings.IndexByte(alphabet, v[i]) + 1 + i) % len(alphabet)
		forged = append(forged, v[:i]+alphabet[j:j+1]+v[i+1:], v[:i])
	}
	forged = append(forged, strings.Repeat(v, 16*1024/len(v)+1)[:16*1024], fv, rv, v+"x")
	for i, f := range forged {
		r := mustSession(t, h, i%2, cookieLine("hashlb-session", f))
		checkStripped(t, r, "hashlb-session")
		if r.reason != "round_robin" {
			t.Fatalf("forged value %d (%.60q): reason %s on %s, want round_robin", i, f, r.reason, r.service)
		}
		if nv, _, ok := r.sessionCookie(t, "hashlb-session"); !ok || nv == f {
			t.Fatalf("forged value %d: no new session (%q)", i, r.set)
		}
	}
	flushMetrics(h)
	if got := metricValue(h, "hashlb.session_forged"); got != int64(len(forged)) {
		t.Errorf("hashlb.session_forged = %d, want %d", got, len(forged))
	}
	t.Logf("%d forged values refused", len(forged))
}

// TestSessionIdleAndAbsoluteTimeouts: a session used after a tenth of
// idleTimeout is re-issued with a fresh last use; one unused for idleTimeout
// falls back and gets a new session; past absoluteTimeout too; a permanent
// cookie's Max-Age is absoluteTimeout.
func TestSessionIdleAndAbsoluteTimeouts(t *testing.T) {
	t.Parallel()
	block := map[string]any{"type": "cookie", "lifetime": "permanent", "absoluteTimeout": "1h", "idleTimeout": "10m"}
	h := sessionHost(t, sessionConfig(t, block, sessionServices(4, nil), nil), 1, sessionKey)
	first := mustSession(t, h, 0)
	v, attrs, ok := first.sessionCookie(t, "hashlb-session")
	if !ok || attrs["max-age"] != "3600" {
		t.Fatalf("permanent cookie %q: Max-Age %q, want 3600 (absoluteTimeout 1h)", first.set, attrs["max-age"])
	}
	svc := first.service
	wait := func(d time.Duration) {
		for range int(d / time.Second) {
			tick(h)
		}
	}
	wait(30 * time.Second)
	if r := mustSession(t, h, 0, cookieLine("hashlb-session", v)); r.service != svc || len(r.set) != 1 {
		t.Fatalf("30 s later: on %s, set-cookie %q; want %s, not re-issued", r.service, r.set, svc)
	}
	wait(40 * time.Second) // 70 s after issue: past a tenth of 10m
	r := mustSession(t, h, 0, cookieLine("hashlb-session", v))
	nv, attrs, ok := r.sessionCookie(t, "hashlb-session")
	if r.service != svc || !ok || nv == v {
		t.Fatalf("70 s later: on %s, new value %v; want %s and the session re-issued", r.service, ok, svc)
	}
	if ma := attrs["max-age"]; ma != "3530" && ma != "3529" {
		t.Errorf("re-issued Max-Age %s, want what is left of 1h (3530)", ma)
	}
	// The old value ends 10 minutes after its last use, the refreshed one later.
	wait(9*time.Minute + 30*time.Second)
	if r := mustSession(t, h, 0, cookieLine("hashlb-session", v)); r.reason == "session" {
		t.Errorf("the value last used 10m40s ago: reason session, want the idle timeout")
	}
	cur := nv
	if r := mustSession(t, h, 0, cookieLine("hashlb-session", nv)); r.reason != "session" || r.service != svc {
		t.Errorf("the refreshed value, last used 9m30s ago: %s on %s, want session on %s", r.reason, r.service, svc)
	} else if x, _, ok := r.sessionCookie(t, "hashlb-session"); ok {
		cur = x
	}
	// Kept alive every 9 minutes until the absolute timeout.
	for elapsed := 20 * time.Minute; elapsed < time.Hour-9*time.Minute; elapsed += 9 * time.Minute {
		wait(9 * time.Minute)
		r := mustSession(t, h, 0, cookieLine("hashlb-session", cur))
		if r.reason != "session" {
			t.Fatalf("kept alive, %v after issue: %s", elapsed, r.reason)
		}
		if x, _, ok := r.sessionCookie(t, "hashlb-session"); ok {
			cur = x
		}
	}
	wait(15 * time.Minute)
	if r := mustSession(t, h, 0, cookieLine("hashlb-session", cur)); r.reason == "session" {
		t.Errorf("past absoluteTimeout: reason session")
	} else if _, attrs, ok := r.sessionCookie(t, "hashlb-session"); !ok || attrs["max-age"] != "3600" {
		t.Errorf("past absoluteTimeout: new cookie %v, Max-Age %q; want a new one of 3600", ok, attrs["max-age"])
	}
	flushMetrics(h)
	for _, s := range []string{"idle", "expired", "refreshed"} {
		if metricValue(h, "hashlb.session_"+s) == 0 {
			t.Errorf("hashlb.session_%s is 0", s)
		}
	}
}

// TestSessionNoKey: a session block without HASHLB_SESSION_KEY (or with a
// short one) does not start; the error says what to set.
func TestSessionNoKey(t *testing.T) {
	t.Parallel()
	cfg := sessionConfig(t, map[string]any{"type": "cookie"}, sessionServices(2, nil), nil)
	for _, key := range []string{"", "short-key"} {
		var log strings.Builder
		h, err := hostsim.New(t.Context(), module(t), hostsim.Config{PluginConfig: cfg, Env: map[string]string{"HASHLB_SESSION_KEY": key}, LogOutput: &log})
		if err == nil {
			h.Close(t.Context())
			t.Fatalf("key %q: the plugin started", key)
		}
		if !strings.Contains(log.String(), "HASHLB_SESSION_KEY") {
			t.Errorf("key %q: the log does not name HASHLB_SESSION_KEY:\n%s", key, log.String())
		}
	}
}
