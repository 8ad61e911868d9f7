package e2e

// One proxy's local view against the fleet's, on Debian's etcd 3.4 binary
// (HASHLB_ETCD_BIN): three hostsim proxies (separate shared data, two
// workers each) under steady load over 172 keys (ROUNDROBIN, expire 1h),
// while one of them, for 10 s, cannot use one service the others use:
// restarted with it `enabled: false` and then restarted with the fleet's
// configuration (a configuration skew), or seeing it DOWN through its own
// active health checks while the others see it UP (an asymmetric health
// view). During the skew only that proxy may differ from the others; from
// 10 s after it ends, no key goes to two services (but for requests decided
// locally by design, as in TestFleetFaults). The time to converge is
// logged.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/internal/lateness"
)

// skewProxy starts one proxy of two workers with cfg, reaching etcd at
// etcdAddr and sending its health probes to probeAddr ("" for none); its
// calls go to onCall.
func skewProxy(t *testing.T, cfg []byte, etcdAddr, probeAddr string, onCall func(hostsim.CalloutRecord)) *hostsim.Host {
	t.Helper()
	clusters := map[string]string{"etcd": etcdAddr}
	if probeAddr != "" {
		clusters["hashlb_upstream"] = probeAddr
	}
	h, err := hostsim.New(context.Background(), module(t), hostsim.Config{Workers: 2, PluginConfig: cfg,
		RootID: persistRootID, RealTime: true, Clusters: clusters, OnCallout: onCall})
	if err != nil {
		t.Fatalf("hostsim.New: %v", err)
	}
	return h
}

// probeServer answers health probes 200, or 503 for b2 (10.0.0.12:8080)
// while down is set.
func probeServer(t *testing.T, down *atomic.Bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() && r.Host == "10.0.0.12:8080" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

func TestFleetSkew(t *testing.T) {
	bin := etcdBinary(t)
	svcsWithout := func() []svcDef {
		s := fourServices()
		off := false
		s[1].Enabled = &off // b2
		return s
	}
	for _, tt := range []struct {
		name string
		// health: the proxies probe their services, and the skew is
		// proxy 0 seeing b2 DOWN; else it is proxy 0 restarted with b2
		// disabled, then with the fleet's configuration.
		health bool
	}{
		{"configuration skew: one proxy restarted with a service disabled for 10 s", false},
		{"asymmetric health: one proxy sees a service DOWN for 10 s", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := startEtcdProc(t, bin, etcdDir(t))
			p := persistence(map[string]any{"expire": "1h"})
			lateBefore := lateness.Measure(time.Second)
			timeout := callTimeout(faultTimeout, lateBefore, maxFaultTimeout)
			p["fleet"] = map[string]any{"cluster": "etcd", "timeout": timeout.String()}
			extra := func(svcs []svcDef) []byte {
				c := lbConfig(t, "ROUNDROBIN", p, svcs)
				if !tt.health {
					return c
				}
				return withHealth(t, c)
			}
			cfg := extra(fourServices())
			var down atomic.Bool
			probes := [3]string{}
			if tt.health {
				var up atomic.Bool
				probes = [3]string{probeServer(t, &down), probeServer(t, &up), probeServer(t, &up)}
			}
			l := &swapLoad{}
			calls := &calloutLog{}
			for i := range 3 {
				l.hosts = append(l.hosts, skewProxy(t, cfg, e.addr, probes[i], calls.hook(i)))
			}
			t.Cleanup(func() {
				for _, h := range l.hosts {
					h.Close(context.Background())
				}
			})
			keys := keysN("skew", 172)
			meter := lateness.Start()
			stop := l.run(t, keys, 150, 28)
			time.Sleep(3 * time.Second) // the fleet places the keys
			began := time.Now()
			if tt.health {
				down.Store(true)
			} else {
				l.swap(0, skewProxy(t, extra(svcsWithout()), e.addr, "", calls.hook(0)))
			}
			time.Sleep(10 * time.Second)
			if tt.health {
				down.Store(false)
			} else {
				l.swap(0, skewProxy(t, cfg, e.addr, "", calls.hook(0)))
			}
			ended := time.Now()
			// The bound, widened by the lateness measured meanwhile as in
			// TestFleetFaults.
			const quietBound = 10 * time.Second
			bound := func() time.Duration { return lateness.Widen(quietBound, meter.Late(), 10) }
			for time.Since(ended) < bound()+2*time.Second {
				time.Sleep(100 * time.Millisecond)
			}
			recs := stop()
			meter.Stop()
			late := meter.Late()

			// During the skew the proxies that can use every service follow
			// the fleet's records, which the skewed one leaves alone: keys
			// they split then come from their own transactions that ran out
			// of time (a loaded machine), reconciled within seconds; logged.
			var others []loadRec
			for _, r := range recs {
				if r.host != 0 && r.at.After(began) && r.at.Before(ended) {
					others = append(others, r)
				}
			}
			during, _ := splitAfter(others, began)
			var timeouts int64
			for _, h := range l.hosts[1:] {
				timeouts += persistMetric(h, "hashlb.persistence_fleet_timeout")
			}
			// As in TestFleetFaults, a request its proxy decided locally by
			// design (etcd held down, or its last call about the key
			// unanswered: the loaded machine) is not held to the bound.
			split, story, local, judged := calls.agreement(recs, l.hosts, ended.Add(bound()), ended)
			if split > 0 {
				t.Errorf("%d of %d keys got two services from %v after the skew ended %s, e.g. %s (times from the skew's end)", split, len(keys), bound(),
					lateness.Note(late, fmt.Sprintf("the bound is %v widened by 10 times that; fleet.timeout %v", quietBound, timeout)), story)
			}
			converged := time.Duration(0)
			if last, _ := lastSplit(recs, ended); !last.IsZero() {
				converged = last.Sub(ended)
			}
			var diverted, replaced int64
			for _, h := range l.hosts {
				diverted += persistMetric(h, "hashlb.persistence_fleet_diverted")
				replaced += persistMetric(h, "hashlb.persistence_fleet_replaced")
			}
			t.Logf("%s: fleet.timeout %v (timers %v late before the run, up to %v during it); %d requests over %d keys; converged %v after the skew ended (bound %v; after it %d requests decided locally by design, %d held to it); during it %d keys split between the other two proxies (%d of their transactions timed out); the proxies now count %d diverted, %d replaced",
				tt.name, timeout, lateBefore.Round(time.Millisecond), late.Round(time.Millisecond), len(recs), len(keys), converged.Round(time.Millisecond), bound(), local, judged, during, timeouts, diverted, replaced)
		})
	}
}

// withHealth adds active health checks every second (DOWN after 2 failed
// probes, UP after 2 good ones) to configuration c.
func withHealth(t *testing.T, c []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(c, &m); err != nil {
		t.Fatal(err)
	}
	m["healthCheck"] = map[string]any{"path": "/healthz", "interval": "1s", "timeout": "500ms",
		"unhealthyThreshold": 2, "healthyThreshold": 2}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
