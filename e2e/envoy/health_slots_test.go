package envoy

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashlb/hashlb/internal/envoyrun"
)

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
