package e2e

// Sessions signed by a proxy whose clock runs ahead (docs/persistence.md#clocks).

import (
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// TestSessionClockAhead: proxies of one plugin and key whose clocks run a
// minute and a day ahead of this one issue sessions: the minute's is
// honoured (within clockSkew 5m), the day's refused, answered with a new
// session of this proxy's time, and counted in hashlb.session_future; the
// upstream sees neither.
func TestSessionClockAhead(t *testing.T) {
	t.Parallel()
	cfg := sessionConfig(t, map[string]any{"type": "cookie", "absoluteTimeout": "1h"}, sessionServices(3, nil), nil)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := moduleHost(t, hostsim.Config{Workers: 2, PluginConfig: cfg, RootID: persistRootID, Start: start,
		Env: map[string]string{lbcore.SessionKeyEnv: sessionKey}})
	ahead := func(d time.Duration) (string, string) {
		p := moduleHost(t, hostsim.Config{Workers: 1, PluginConfig: cfg, RootID: persistRootID, Start: start.Add(d),
			Env: map[string]string{lbcore.SessionKeyEnv: sessionKey}})
		r := mustSession(t, p, 0)
		v, _, ok := r.sessionCookie(t, "hashlb-session")
		if !ok {
			t.Fatalf("the proxy %v ahead set no session", d)
		}
		return v, r.service
	}
	minute, svc := ahead(time.Minute)
	day, _ := ahead(24 * time.Hour)

	r := mustSession(t, h, 0, cookieLine("hashlb-session", minute))
	checkStripped(t, r, "hashlb-session")
	if r.reason != "session" || r.service != svc {
		t.Errorf("a session signed a minute ahead: reason %s on %s, want session on %s", r.reason, r.service, svc)
	}
	for w := range 2 {
		r = mustSession(t, h, w, cookieLine("hashlb-session", day))
		checkStripped(t, r, "hashlb-session")
		nv, _, ok := r.sessionCookie(t, "hashlb-session")
		if r.reason == "session" || !ok {
			t.Fatalf("worker %d: a session signed a day ahead: reason %s, new session %v; want refused and a new one", w, r.reason, ok)
		}
		// The new value is this proxy's: honoured here.
		if r2 := mustSession(t, h, 1-w, cookieLine("hashlb-session", nv)); r2.reason != "session" || r2.service != r.service {
			t.Errorf("worker %d: the re-issued session: reason %s on %s, want session on %s", w, r2.reason, r2.service, r.service)
		}
	}
	flushMetrics(h)
	if got := metricValue(h, "hashlb.session_future"); got != 2 {
		t.Errorf("hashlb.session_future = %d, want 2", got)
	}
	if got := metricValue(h, "hashlb.session_valid"); got != 3 {
		t.Errorf("hashlb.session_valid = %d, want 3 (the minute's value and the two re-issued ones)", got)
	}
}
