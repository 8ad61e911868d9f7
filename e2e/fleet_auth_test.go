package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/lateness"
)

// etcdAuthCall POSTs body to the gateway with token (if any) and decodes
// the answer into out; a non-200 answer fails the test.
func etcdAuthCall(t testing.TB, addr, token, path string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+addr+path, bytes.NewReader(b))
	req.Header.Set("content-type", "application/json")
	if token != "" {
		req.Header.Set("authorization", token)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s %s = %d %s", path, b, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s: %s: %v", path, raw, err)
		}
	}
}

// enableEtcdAuth gives etcd a root user and a user hashlb whose role may
// read and write keys under prefix only (the least role the fleet needs:
// lease grants need no permission), then turns auth on. It returns root's
// token.
func enableEtcdAuth(t testing.TB, addr, prefix, password string) string {
	t.Helper()
	end := prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)
	for _, c := range []struct {
		path string
		body any
	}{
		{"/v3/auth/user/add", map[string]string{"name": "root", "password": "root-pw"}},
		{"/v3/auth/role/add", map[string]string{"name": "root"}},
		{"/v3/auth/user/grant", map[string]string{"user": "root", "role": "root"}},
		{"/v3/auth/role/add", map[string]string{"name": "hashlb"}},
		{"/v3/auth/role/grant", map[string]any{"name": "hashlb",
			"perm": map[string]string{"permType": "READWRITE", "key": b64(prefix), "range_end": b64(end)}}},
		{"/v3/auth/user/add", map[string]string{"name": "hashlb", "password": password}},
		{"/v3/auth/user/grant", map[string]string{"user": "hashlb", "role": "hashlb"}},
		{"/v3/auth/enable", map[string]string{}},
	} {
		etcdAuthCall(t, addr, "", c.path, c.body, nil)
	}
	var a struct{ Token string }
	etcdAuthCall(t, addr, "", "/v3/auth/authenticate", map[string]string{"name": "root", "password": "root-pw"}, &a)
	return a.Token
}

// TestFleetEtcdAuth: etcd 3.4 with auth on. Proxies given the user and
// password in the VM's environment place every key in etcd and agree; a
// proxy with a wrong password serves every request (locally), says so in
// one log line per worker and counts it; no log line shows a password.
func TestFleetEtcdAuth(t *testing.T) {
	bin := etcdBinary(t)
	e := startEtcdProc(t, bin, t.TempDir())
	const password = "pw-4f1c\"x"
	prefix := "/hashlb/" + persistRootID + "/"
	root := enableEtcdAuth(t, e.addr, prefix, password)
	cfg := fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "2s"}, fourServices(), nil)
	calls := &calloutLog{}
	meter := lateness.Start()
	defer meter.Stop()
	proxies := 0
	newHost := func(pw string) *hostsim.Host {
		proxies++
		h, err := hostsim.New(t.Context(), module(t), hostsim.Config{Workers: 2, PluginConfig: cfg, RootID: persistRootID,
			RealTime: true, Clusters: map[string]string{"etcd": e.addr}, OnCallout: calls.hook(proxies - 1),
			Env: map[string]string{"HASHLB_ETCD_USER": "hashlb", "HASHLB_ETCD_PASSWORD": pw}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close(t.Context()) })
		return h
	}
	good := []*hostsim.Host{newHost(password), newHost(password)}
	keys := keysN("auth", 200)
	// Agreement as the fleet promises it (sprayAgreed): a key may split
	// only where a call about it went unanswered in time (an authenticate
	// is a bcrypt on etcd, slow on a loaded machine) or a worker held etcd
	// down, and every key is on one service, and in etcd, once its
	// reconcile ran.
	sprayAgreed(t, good, keys, calls, "with the right password", meter)
	// etcd's key count (0 is left out of its JSON) and the wrong
	// password's refusals come once etcd has answered the calls: a busy
	// machine delays them, so each is waited for up to settleCeiling.
	count := func() string {
		var r etcdRangeResponse
		etcdAuthCall(t, e.addr, root, "/v3/kv/range", map[string]any{"key": b64(prefix), "range_end": b64("/hashlb/" + persistRootID + "0"),
			"count_only": true}, &r)
		return r.Count
	}
	if !tickUntil(good, settleCeiling, func() bool { return count() == "200" }) {
		t.Errorf("etcd holds %q keys under %s %v after the fleet settled, want 200 (one per key)", count(), prefix, settleCeiling)
	}

	bad := newHost("wrong")
	if _, replies := spray(t, []*hostsim.Host{bad}, keysN("bad", 50), 1, 2); len(replies) != 50 {
		t.Errorf("with a wrong password: %d of 50 requests served", len(replies))
	}
	refusals := func() (lines int) {
		for _, l := range bad.Logs() {
			if strings.Contains(l.Message, "refused the user") {
				lines++
			}
		}
		return lines
	}
	tickUntil([]*hostsim.Host{bad}, settleCeiling, func() bool {
		return refusals() >= bad.Workers() && persistMetric(bad, "hashlb.persistence_fleet_auth_failed") > 0
	})
	if n := persistMetric(bad, "hashlb.persistence_fleet_auth_failed"); n == 0 {
		t.Errorf("with a wrong password: persistence_fleet_auth_failed = 0, want the refusals counted")
	}
	lines := refusals()
	if lines != bad.Workers() {
		t.Errorf("with a wrong password: %d log lines about it, want one per worker (%d)", lines, bad.Workers())
	}
	for _, h := range append(good, bad) {
		for _, l := range h.Logs() {
			if strings.Contains(l.Message, password) || strings.Contains(l.Message, "wrong\"") || strings.Contains(l.Message, root) {
				t.Errorf("log line shows a secret: %s", l.Message)
			}
		}
	}
	t.Logf("auth on: 200 keys placed by 2 proxies as user hashlb (role: readwrite on %s); a wrong password: 50 requests served, %d log lines", prefix, lines)
}

// TestFleetCreateBudget: a client that sends a new key with every request,
// at ten times persistence.fleet.createsPerSecond: every request is served,
// and etcd's key count grows by at most the budget (per worker and second,
// plus one second's burst); the rest is counted as throttled.
func TestFleetCreateBudget(t *testing.T) {
	etcdAddr, _ := startEtcd(t, t.TempDir())
	const budget, workers, seconds = 20, 2, 3
	cfg := fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "2s", "createsPerSecond": budget}, fourServices(), nil)
	h := fleetHosts(t, 1, workers, cfg, etcdAddr, time.Time{}, true)[0]
	start := time.Now()
	rate := 10 * budget * workers
	n := 0
	for time.Since(start) < seconds*time.Second {
		if _, err := fleetRoundTrip(h, n%workers, "flood-"+strconv.Itoa(n)); err != nil {
			t.Fatal(err)
		}
		n++
		if d := time.Until(start.Add(time.Duration(n) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
	}
	took := time.Since(start)
	keys := len(etcdKeys(t, etcdAddr, "/hashlb/"+persistRootID+"/"))
	limit := int(float64(budget*workers) * (took.Seconds() + 1))
	throttled := persistMetric(h, "hashlb.persistence_fleet_throttled")
	if keys > limit {
		t.Errorf("%d new keys in %v at %d/s: etcd holds %d keys, want at most %d (%d per worker and second)", n, took.Round(time.Millisecond), rate, keys, limit, budget)
	}
	if throttled == 0 || int(throttled)+keys < n {
		t.Errorf("throttled = %d and %d keys in etcd for %d requests, want every request over the budget counted", throttled, keys, n)
	}
	t.Logf("%d requests with a new key each in %v (%.0f/s, budget %d per worker × %d workers): all served; etcd holds %d keys (limit %d), %d throttled",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), budget, workers, keys, limit, throttled)
}
