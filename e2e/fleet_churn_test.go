package e2e

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore/fleet"
)

// TestFleetAuthChurn: Debian's etcd 3.4 with auth on, one proxy of two
// workers sending 10^4 new keys from 8 clients at once. Midway every token
// the proxy holds stops being valid (an operator changes the auth store:
// etcd then answers "revision of auth store is old" to every token issued
// before): the proxy authenticates again once per worker, not once per
// transaction in flight, and etcd is never marked down (it answered every
// call). Afterwards etcd holds at most one lease per worker and slot the
// run touched (plus the next slot's, granted ahead), not one per key.
func TestFleetAuthChurn(t *testing.T) {
	bin := etcdBinary(t)
	e := startEtcdProc(t, bin, etcdDir(t))
	const password = "churn-pw"
	prefix := "/hashlb/" + persistRootID + "/"
	root := enableEtcdAuth(t, e.addr, prefix, password)
	counted, count := countingProxy(t, e.addr)
	const workers = 2
	cfg := fleetConfig(t, map[string]any{"cluster": "etcd", "timeout": "2s", "createsPerSecond": 5000}, fourServices(), nil)
	calls := &calloutLog{}
	h, err := hostsim.New(t.Context(), module(t), hostsim.Config{Workers: workers, PluginConfig: cfg, RootID: persistRootID,
		RealTime: true, Clusters: map[string]string{"etcd": counted}, OnCallout: calls.hook(0),
		Env: map[string]string{"HASHLB_ETCD_USER": "hashlb", "HASHLB_ETCD_PASSWORD": password}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(t.Context()) })
	start := time.Now()

	const n, clients = 10000, 8
	keys := keysN("churn", n)
	var next atomic.Int64
	var authBefore int64
	var wg sync.WaitGroup
	var once sync.Once
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				if i == n/2 {
					once.Do(func() {
						authBefore = count("/v3/auth/authenticate")
						// Any change of the auth store outdates every token.
						etcdAuthCall(t, e.addr, root, "/v3/auth/user/add", map[string]string{"name": "other", "password": "x"}, nil)
					})
				}
				if _, err := fleetRoundTrip(h, int(i)%workers, keys[i]); err != nil {
					t.Error(err)
					return
				}
				if i%500 == 0 {
					h.Tick()
				}
			}
		}()
	}
	wg.Wait()
	for range 3 { // the syncs queued meanwhile
		h.Tick()
		time.Sleep(100 * time.Millisecond)
	}
	end := time.Now()
	// An authenticate that went unanswered in time (a bcrypt on a loaded
	// machine can take longer than the timeout) is sent again, by design.
	reauth, lost := count("/v3/auth/authenticate")-authBefore, int64(calls.unansweredPath("/v3/auth/authenticate"))
	if reauth > workers+lost {
		t.Errorf("after the tokens were outdated under load: %d authenticates, want at most one per worker (%d) and one for each that went unanswered (%d)", reauth, workers, lost)
	}
	if authBefore > workers {
		t.Errorf("before: %d authenticates for the first tokens, want at most one per worker (%d)", authBefore, workers)
	}
	for _, l := range h.Logs() {
		if strings.Contains(l.Message, "failed 3 times in a row") {
			t.Errorf("etcd marked down while it answered: %s", l.Message)
		}
	}
	var leases struct {
		Leases []struct{ ID string } `json:"leases"`
	}
	etcdAuthCall(t, e.addr, root, "/v3/lease/leases", map[string]any{}, &leases)
	slots := fleet.SlotOf(end.Unix(), 7*24*time.Hour) - fleet.SlotOf(start.Unix(), 7*24*time.Hour) + 1
	if limit := workers * int(slots+1); len(leases.Leases) > limit {
		t.Errorf("%d new keys: etcd holds %d leases, want at most %d (%d workers × %d slots, and the next one's)", n, len(leases.Leases), limit, workers, slots)
	}
	t.Logf("%d new keys in %v through %d workers with auth on: %d authenticates for the first tokens, %d after every token was outdated midway; %d grants, %d leases in etcd",
		n, end.Sub(start).Round(time.Millisecond), workers, authBefore, reauth, count("/v3/lease/grant"), len(leases.Leases))
}
