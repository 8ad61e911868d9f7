package e2e

// The healthChecks import-nsconf writes from NetScaler monitors, probed by
// the real module under hostsim against demo backends on loopback.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// probeSeen is one probe a demo backend received.
type probeSeen struct{ method, path, host string }

// demoBackend answers health probes as a backend behind a NetScaler monitor
// would: 200 with the monitor's -recv text in the body when healthy; when
// not, a body without that text (an HTTP-ECV monitor) or a 503 (an HTTP
// monitor, which reads the status only).
type demoBackend struct {
	srv     *httptest.Server
	healthy bool
	mu      sync.Mutex
	seen    []probeSeen
}

func startDemoBackend(t *testing.T, hc *lbcore.HealthCheck, healthy bool) *demoBackend {
	b := &demoBackend{healthy: healthy}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, probeSeen{r.Method, r.URL.RequestURI(), r.Host})
		b.mu.Unlock()
		switch {
		case b.healthy:
			fmt.Fprintf(w, "app ok\n%s\n", hc.ExpectBody)
		case hc.ExpectBody != "":
			fmt.Fprint(w, "app: Status=stopped\n")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// TestNSConfImportedHealthChecks imports the full-save case and runs every
// configuration with a healthCheck in hostsim (2 workers): each service gets a
// demo backend, reached at the address the probe names (the service's IP and
// the monitor's -destPort), and the first service's backend is unhealthy in
// its monitor's terms. After the monitor's rounds, that service is DOWN on
// every worker (no request reaches it, health_down counted once), the others
// are UP and serve, and every probe carried the monitor's method, path and
// Host.
func TestNSConfImportedHealthChecks(t *testing.T) {
	configs := importNSConf(t, buildHashlbCLI(t), "full-save")
	wantChecks := map[string]probeSeen{ // what each monitor of full-save/ns.conf probes
		"vs_portal.json": {"HEAD", "/keepAlive.html", ""}, // -destPort 8585, Host: the probed address
		"vs_app.json":    {"GET", "/status", "app.example.com"},
		"vs_shop.json":   {"GET", "/health", ""},
	}
	for file, want := range wantChecks {
		t.Run(file, func(t *testing.T) {
			js := configs[file]
			c, err := lbcore.ParseConfig(js)
			if err != nil || c.HealthCheck == nil {
				t.Fatalf("%s: ParseConfig: %v, healthCheck %v\n%s", file, err, c != nil && c.HealthCheck != nil, js)
			}
			hc := c.HealthCheck
			if hc.Method != want.method || hc.Path != want.path || hc.Host != want.host {
				t.Fatalf("%s: healthCheck %s %s host %q, want %s %s host %q", file, hc.Method, hc.Path, hc.Host, want.method, want.path, want.host)
			}
			backends := map[string]*demoBackend{} // probed address → backend
			for i, s := range c.Services {
				backends[hc.ProbeAddress(s.Address)] = startDemoBackend(t, hc, i != 0)
			}
			handler := func(r *hostsim.CallRequest) (*hostsim.CallResponse, error) {
				addr := r.Header("x-envoy-original-dst-host")
				b := backends[addr]
				if b == nil {
					return nil, fmt.Errorf("probe to %s, which is no service's probe address", addr)
				}
				return hostsim.SendHTTP(r, b.srv.Listener.Addr().String())
			}
			ctx := context.Background()
			h, err := hostsim.New(ctx, module(t), hostsim.Config{Workers: 2, PluginConfig: js, HTTPCall: handler, LogLevel: hostsim.LogWarn})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close(ctx)
			for i := 0; i < hc.UnhealthyThreshold+2; i++ { // the rounds that mark it DOWN, and a tick to spread it
				h.Advance(hc.Interval)
			}
			bad := c.Services[0]
			served := map[string]int{}
			for i := 0; i < 60; i++ {
				got, err := runOn(h, i%2, corpusRequest{headers: [][2]string{{":method", "GET"}, {":path", fmt.Sprintf("/p/%d", i)}, {":authority", "shop.example.com"}},
					src: fmt.Sprintf("192.0.2.%d:4000", 1+i)})
				if err != nil {
					t.Fatal(err)
				}
				served[firstOf(got.service)]++
			}
			if served[bad.Name] != 0 {
				t.Errorf("%s: %d of 60 requests went to %s, whose probes fail (%v)", file, served[bad.Name], bad.Name, served)
			}
			for _, s := range c.Services[1:] {
				if served[s.Name] == 0 && c.LBMethod.String() != "URLHASH" {
					t.Errorf("%s: no request went to %s, whose probes pass (%v)", file, s.Name, served)
				}
			}
			if m, ok := h.Metric("hashlb.service." + bad.Name + ".health_down"); !ok || m.Value != 1 {
				t.Errorf("%s: hashlb.service.%s.health_down = %+v, want 1", file, bad.Name, m)
			}
			for _, s := range c.Services[1:] {
				if m, _ := h.Metric("hashlb.service." + s.Name + ".health_down"); m.Value != 0 {
					t.Errorf("%s: hashlb.service.%s.health_down = %d, want 0 (its backend is healthy)", file, s.Name, m.Value)
				}
			}
			wantHost := want.host
			for addr, b := range backends {
				b.mu.Lock()
				seen := b.seen
				b.mu.Unlock()
				if len(seen) < hc.UnhealthyThreshold {
					t.Errorf("%s: the backend at %s got %d probes, want at least %d", file, addr, len(seen), hc.UnhealthyThreshold)
				}
				host := wantHost
				if host == "" {
					host = addr
				}
				for _, p := range seen {
					if p.method != want.method || p.path != want.path || p.host != host {
						t.Fatalf("%s: the backend at %s got %s %s Host %s, want %s %s Host %s", file, addr, p.method, p.path, p.host, want.method, want.path, host)
					}
				}
			}
			for w := 0; w < 2; w++ {
				if err := h.Err(w); err != nil {
					t.Fatalf("worker %d died: %v", w, err)
				}
			}
		})
	}
	for file := range configs {
		c, _ := lbcore.ParseConfig(configs[file])
		if _, listed := wantChecks[file]; c != nil && c.HealthCheck != nil && !listed {
			t.Errorf("%s has a healthCheck this test does not probe", file)
		}
	}
}
