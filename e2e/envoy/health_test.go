package envoy

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/internal/lateness"
)

// healthPlugin is configs/health.json's active check with short intervals,
// probing through envoy.yaml's override_host cluster.
const healthPlugin = `"lbMethod": "URLHASH",
  "healthCheck": {
    "path": "/healthz",
    "interval": "1s",
    "timeout": "500ms",
    "healthyThreshold": 2,
    "unhealthyThreshold": 2,
    "expectedStatuses": "200-399",
    "cluster": "hashlb_upstream"
  }`

// TestEnvoyActiveHealth: hashlb's probes go out by dispatch_http_call on
// envoy.yaml's cluster, steered by the upstream header to the service they
// probe. A backend whose /healthz answers 503 goes DOWN after
// unhealthyThreshold probes (metric health_down, an info line in Envoy's
// log), gets no request while it is DOWN, every request going where lbcore
// says with it out, and comes back UP after healthyThreshold good probes.
// One probe per service per interval, whichever of the 4 workers sends it
// (the probe lease in shared data). A backend that stops listening goes
// DOWN too.
func TestEnvoyActiveHealth(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		dr := newDataRequests()
		r := startRig(t, bin, healthPlugin, dr.install, nil)
		start := time.Now()
		meter := lateness.Start()
		defer meter.Stop()
		const victim = 1 // b2
		vName, vAddr := r.bs[victim].Name, r.bs[victim].Addr

		// The probe as the backend received it.
		var probe http.Header
		select {
		case probe = <-dr.probe[victim]:
		case <-time.After(waitCeiling):
			t.Fatalf("%s received no probe in %v", vName, waitCeiling)
		}
		if probe.Get("Host") != vAddr || probe.Get("User-Agent") != "hashlb-health" {
			t.Errorf("probe of %s: Host %q, User-Agent %q; want %s, hashlb-health", vName, probe.Get("Host"), probe.Get("User-Agent"), vAddr)
		}
		if probe.Get("X-Envoy-Original-Dst-Host") != vAddr {
			t.Errorf("probe of %s: upstream header %q, want %s", vName, probe.Get("X-Envoy-Original-Dst-Host"), vAddr)
		}
		t.Logf("probe headers Envoy sent to %s: %v", vName, probe)

		paths := make([]string, 24)
		for i := range paths {
			paths[i] = fmt.Sprintf("/h/%d", i)
		}
		check := func(phase string, down ...string) {
			t.Helper()
			for _, p := range paths {
				want := r.rank(p, down...)[0]
				code, got, _ := r.get(t, p)
				if code != 200 || got != want {
					t.Errorf("%s: GET %s: %d from %q, want 200 from %s (lbcore, down %v)", phase, p, code, got, want, down)
				}
			}
		}
		check("all UP")
		if dr.n[victim].Load() == 0 {
			t.Fatalf("no path of the corpus reaches %s: the test would prove nothing", vName)
		}

		// DOWN.
		r.bs[victim].Fail(503)
		_, took := waitStatIs(t, r.e, "wasmcustom.hashlb.service."+vName+".health_down", func(v int64) bool { return v == 1 })
		t.Logf("%s DOWN %v after its /healthz began to fail (unhealthyThreshold 2, interval 1s)", vName, took.Round(10*time.Millisecond))
		if err := r.e.WaitLog(fmt.Sprintf("service %s (%s) is DOWN: 2 failed health checks", vName, vAddr), waitCeiling); err != nil {
			t.Error(err)
		}
		if took < 900*time.Millisecond {
			t.Errorf("%s DOWN after %v: sooner than 2 probes 1 s apart allow", vName, took)
		}
		// Every worker refreshes its view on its tick, once a second.
		tickWait()
		before := dr.n[victim].Load()
		check("DOWN", vName)
		check("DOWN (again)", vName)
		if n := dr.n[victim].Load() - before; n != 0 {
			t.Errorf("%s is DOWN but received %d requests", vName, n)
		}
		if n := r.e.Stat(t, "wasmcustom.hashlb.service."+vName+".health_up"); n != 0 {
			t.Errorf("health_up = %d while the backend still fails", n)
		}

		// UP.
		r.bs[victim].Fail(0)
		_, took = waitStatIs(t, r.e, "wasmcustom.hashlb.service."+vName+".health_up", func(v int64) bool { return v == 1 })
		t.Logf("%s UP %v after its /healthz healed (healthyThreshold 2)", vName, took.Round(10*time.Millisecond))
		if err := r.e.WaitLog(fmt.Sprintf("service %s (%s) is UP: passed its health checks", vName, vAddr), waitCeiling); err != nil {
			t.Error(err)
		}
		tickWait()
		before = dr.n[victim].Load()
		check("UP again")
		if dr.n[victim].Load() == before {
			t.Errorf("%s is UP again but received no request", vName)
		}

		// A dead host: the probes' connect fails (Envoy's async client
		// answers the callout with its local 503, or no headers; either
		// fails the probe) and it goes DOWN the same way.
		dead := r.bs[2]
		dead.Stop()
		_, took = waitStatIs(t, r.e, "wasmcustom.hashlb.service."+dead.Name+".health_down", func(v int64) bool { return v == 1 })
		t.Logf("%s (stopped) DOWN %v after it stopped listening", dead.Name, took.Round(10*time.Millisecond))

		// The lease: one probe per service per interval, not one per worker.
		elapsed := time.Since(start)
		for i, b := range r.bs[:2] { // b3 stopped answering
			n := dr.probes[i].Load()
			if max := int64(elapsed/time.Second) + 2; n > max {
				t.Errorf("%s received %d probes in %v: more than one per interval (4 workers probing?)", b.Name, n, elapsed.Round(time.Millisecond))
			}
			// A round is due from half a tick before its time
			// (lbcore.RoundDue), so a tick that comes a little early does not
			// skip it: one probe per interval, give or take the first and the
			// last (9 in 9 s measured; 6 in 10 s before RoundDue's slack).
			// Each tick is a timer of Envoy's, late on a loaded machine as
			// this process's are: the interval is judged widened by that.
			if interval := lateness.Widen(time.Second, meter.Late(), 2); n < int64(elapsed/interval)-2 {
				t.Errorf("%s received %d probes in %v: fewer than one per interval (1 s, %v on this machine) %s", b.Name, n, elapsed.Round(time.Millisecond),
					interval, lateness.Note(meter.Late(), "the interval is 1 s widened by twice that"))
			}
			t.Logf("%s: %d probes in %v", b.Name, n, elapsed.Round(time.Millisecond))
		}
		if s := r.e.Log(); strings.Contains(s, "wasm trap") || strings.Contains(s, "failed: Uncaught") {
			t.Errorf("VM failure in the log")
		}
	})
}

const passivePlugin = `"lbMethod": "URLHASH",
  "passiveHealth": {
    "consecutiveFailures": 3,
    "ejectionTime": "2s",
    "failureStatuses": "503"
  }`

// TestEnvoyPassiveEjection: envoy.yaml with one more route, /noretry/,
// whose retry policy leaves out 5xx. There a backend answering 503 is
// ejected after consecutiveFailures responses (metric ejected, an info
// line), gets nothing for ejectionTime, every request going where lbcore
// says with it out, then is selectable again (health_up, "ejection ended")
// and served.
//
// On envoy.yaml's own route (retry_on 5xx) the client never sees the 503:
// the router retries on the 2nd ranked service and the Wasm filter, above
// the router, sees only the final 200, so hashlb's passive check never
// counts the failure (Envoy's outlier detection, which sees every attempt,
// is what can eject then). The first half asserts exactly that, with
// another backend.
func TestEnvoyPassiveEjection(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		dr := newDataRequests()
		r := startRig(t, bin, passivePlugin, dr.install, func(b *bootstrap) {
			editHCM(t, b.other[0], func(h *hcmv3.HttpConnectionManager) {
				vh := h.GetRouteConfig().VirtualHosts[0]
				noRetry := routeTo("hashlb_upstream", pathPrefix("/noretry/"))
				noRetry.GetRoute().RetryPolicy = &routev3.RetryPolicy{RetryOn: "connect-failure,refused-stream,reset", NumRetries: wrapperspb.UInt32(2)}
				vh.Routes = append([]*routev3.Route{noRetry}, vh.Routes...)
			})
		})

		// The shipped route: retried, never seen by the filter.
		const first = 0 // b1
		fName := r.bs[first].Name
		paths := r.pathsTo(fName, 4)
		r.bs[first].Fail(503)
		// 4: below the cluster's consecutive_5xx (5), so Envoy's own
		// outlier detection does not eject the host.
		for _, p := range paths {
			want := r.rank(p)[1]
			if code, got, _ := r.get(t, p); code != 200 || got != want {
				t.Errorf("GET %s: %d from %q, want 200 from %s (the retry on the 2nd ranked)", p, code, got, want)
			}
		}
		if n := dr.n[first].Load(); n != int64(len(paths)) {
			t.Errorf("%s received %d requests, want %d (each first attempt)", fName, n, len(paths))
		}
		if n := r.e.Stat(t, "cluster.hashlb_upstream.upstream_rq_retry"); n != int64(len(paths)) {
			t.Errorf("cluster.hashlb_upstream.upstream_rq_retry = %d, want %d", n, len(paths))
		}
		if n := r.e.Stat(t, "wasmcustom.hashlb.service."+fName+".ejected"); n != 0 {
			t.Errorf("ejected = %d: the filter saw a 503 the router retried", n)
		}
		r.bs[first].Fail(0)

		// /noretry/: the filter sees each 503.
		const victim = 2 // b3
		vName, vAddr := r.bs[victim].Name, r.bs[victim].Addr
		var nr []string
		for i := 0; len(nr) < 6; i++ {
			p := fmt.Sprintf("/noretry/%d", i)
			if r.rank(p)[0] == vName {
				nr = append(nr, p)
			}
		}
		r.bs[victim].Fail(503)
		for i, p := range nr[:3] {
			if code, _, _ := r.get(t, p); code != 503 {
				t.Fatalf("failure %d: GET %s: %d, want the backend's 503 (no retry on 5xx)", i+1, p, code)
			}
		}
		ejectedAt := time.Now()
		if n := r.e.Stat(t, "wasmcustom.hashlb.service."+vName+".ejected"); n != 1 {
			t.Errorf("ejected = %d after 3 failed responses, want 1 (counted at once)", n)
		}
		if err := r.e.WaitLog(fmt.Sprintf("service %s (%s) ejected for 2s after 3 failed responses", vName, vAddr), waitCeiling); err != nil {
			t.Error(err)
		}
		// The worker that saw the third failure ejects at once; the others
		// on their next tick.
		tickWait()
		before := dr.n[victim].Load()
		for _, p := range nr {
			want := r.rank(p, vName)[0]
			if code, got, _ := r.get(t, p); code != 200 || got != want {
				t.Errorf("ejected: GET %s: %d from %q, want 200 from %s", p, code, got, want)
			}
		}
		if n := dr.n[victim].Load() - before; n != 0 && time.Since(ejectedAt) < 2*time.Second {
			t.Errorf("%s is ejected but received %d requests", vName, n)
		}
		r.bs[victim].Fail(0)
		waitStatIs(t, r.e, "wasmcustom.hashlb.service."+vName+".health_up", func(v int64) bool { return v == 1 })
		t.Logf("%s selectable again %v after its ejection (ejectionTime 2s; ejections end on a tick)", vName, time.Since(ejectedAt).Round(10*time.Millisecond))
		if err := r.e.WaitLog(fmt.Sprintf("service %s (%s) is UP: ejection ended", vName, vAddr), waitCeiling); err != nil {
			t.Error(err)
		}
		tickWait()
		for _, p := range nr {
			if code, got, _ := r.get(t, p); code != 200 || got != vName {
				t.Errorf("after the ejection: GET %s: %d from %q, want 200 from %s", p, code, got, vName)
			}
		}
	})
}

// TestEnvoyHealthSlotsAcrossReconfigure: health records live in a bounded
// slot table in shared data (lbcore/healthslots.go), reused when a service
// leaves. Under real Envoy, reconfigured through an ECDS file as
// hashlb-controller does: b1 and b3 fail their probes and go DOWN; the next
// configuration keeps b1 and b2 and replaces b3 by b4, which takes b3's
// slot. b1 stays DOWN across the change (carried, never served), and b4
// starts Pending, not with b3's DOWN record: its first good probe brings it
// UP (healthyThreshold 3 would need three from DOWN).
func TestEnvoyHealthSlotsAcrossReconfigure(t *testing.T) {
	t.Parallel()
	eachEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		t.Parallel()
		bs := envoyrun.StartBackends(t, 4)
		var data, probes [4]atomic.Int64
		for i, b := range bs {
			b.OnRequest = func(r *http.Request) {
				if r.URL.Path == "/healthz" {
					probes[i].Add(1)
				} else {
					data[i].Add(1)
				}
			}
		}
		bs[0].Fail(503)
		bs[2].Fail(503)
		plugin := func(pool ...*envoyrun.Backend) string {
			var svcs []string
			for _, b := range pool {
				svcs = append(svcs, fmt.Sprintf(`{"name":%q,"hashId":%q,"address":%q}`, b.Name, b.Name, b.Addr))
			}
			return `{"lbMethod":"URLHASH","upstreamHeader":"x-envoy-original-dst-host","upstreamCount":1,` +
				`"healthCheck":{"interval":"1s","timeout":"500ms","unhealthyThreshold":1,"healthyThreshold":3,"cluster":"hashlb_upstream"},` +
				`"services":[` + strings.Join(svcs, ",") + `]}`
		}
		dir := envoyrun.WorkDir(t)
		ecds := filepath.Join(dir, "ecds", "hashlb.json")
		writeAtomic(t, ecds, ecdsFile(t, "hashlb", "0", []byte(plugin(bs[0], bs[1], bs[2]))))
		e := envoyrun.Start(t, bin, envoyrun.Options{Bootstrap: reconfigBootstrap(t), Dir: dir})
		url := "http://" + e.MustListener(t, "hashlb_listener")
		get := servedBy(t, url)
		waitStat := func(name string, want int64) {
			t.Helper()
			waitStatIs(t, e, name, func(v int64) bool { return v == want })
		}
		waitStat("wasmcustom.hashlb.service.b1.health_down", 1)
		waitStat("wasmcustom.hashlb.service.b3.health_down", 1)
		tickWait() // every worker reads the verdicts on its tick
		for i := 0; i < 24; i++ {
			if b := get(fmt.Sprintf("/s/%d", i)); b != "b2" {
				t.Fatalf("with b1 and b3 DOWN, GET /s/%d went to %s", i, b)
			}
		}

		// b3 leaves, b4 joins in its slot.
		before := probes[3].Load()
		writeAtomic(t, ecds, ecdsFile(t, "hashlb", "1", []byte(plugin(bs[0], bs[1], bs[3]))))
		waitStat("wasmcustom.hashlb.service.b4.health_up", 1)
		if n := probes[3].Load() - before; n > 2 {
			t.Errorf("b4 came UP after %d probes: it read b3's DOWN record (healthyThreshold 3) instead of starting Pending", n)
		}
		if err := e.WaitLog("service b4 ("+bs[3].Addr+") is UP: passed its health checks", waitCeiling); err != nil {
			t.Error(err)
		}
		tickWait()
		served := map[string]int{}
		for i := 0; i < 48; i++ {
			served[get(fmt.Sprintf("/s/%d", i))]++
		}
		if served["b4"] == 0 || served["b1"] != 0 || served["b3"] != 0 {
			t.Errorf("after the change: %v; want b4 serving, b1 still DOWN (its record carried), b3 gone", served)
		}
		if n := data[0].Load(); n != 0 {
			t.Errorf("b1, DOWN throughout, received %d requests", n)
		}
		if s := e.Log(); strings.Contains(s, "wasm trap") || strings.Contains(s, "failed: Uncaught") {
			t.Error("VM failure in the log")
		}
	})
}
