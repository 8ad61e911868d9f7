package e2e

import (
	"slices"
	"testing"

	"github.com/hashlb/hashlb/hostsim"
	"github.com/hashlb/hashlb/lbcore"
)

// TestGuestAllocationsSession: the session path allocates nothing in the
// guest (the memstats build, as TestGuestAllocations): requests that bring
// a valid cookie among others (checked, stripped from the Cookie line),
// requests without one and with a forged one (a new Set-Cookie on the
// response), and header sessions likewise, over 50 ticks after a warm-up.
func TestGuestAllocationsSession(t *testing.T) {
	wasm := memstatsModule(t)
	for _, typ := range []string{"cookie", "header"} {
		t.Run(typ, func(t *testing.T) {
			block := map[string]any{"type": typ, "idleTimeout": "10m"}
			if typ == "cookie" {
				block["lifetime"] = "permanent"
			}
			cfg := sessionConfig(t, block, sessionServices(4, nil), map[string]any{"lbMethod": "URLHASH", "upstreamCount": 2, "debugHeader": false})
			h := costHostWith(t, wasm, hostsim.Config{PluginConfig: cfg, Env: map[string]string{lbcore.SessionKeyEnv: sessionKey}}, nil)
			base := slices.Clone(costRequest.headers)
			first, err := sessionRequest(h, 0, 200)
			if err != nil {
				t.Fatal(err)
			}
			var valid, forged [][2]string
			if typ == "cookie" {
				v, _, ok := first.sessionCookie(t, "hashlb-session")
				if !ok {
					t.Fatal("no session cookie")
				}
				valid = append(slices.Clone(base), [2]string{"cookie", "a=1; hashlb-session=" + v + "; b=2"})
				forged = append(slices.Clone(base), [2]string{"cookie", "hashlb-session=" + flipFirst(v)})
			} else {
				v := first.header("hashlb-session")
				valid = append(slices.Clone(base), [2]string{"hashlb-session", v})
				forged = append(slices.Clone(base), [2]string{"hashlb-session", flipFirst(v)})
			}
			mix := [][][2]string{valid, valid, base, forged}
			run := func(n int) {
				for i := range n {
					costStream(t, h, mix[i%len(mix)])
				}
			}
			for range guestWarmupTicks {
				run(34)
				tick(h)
			}
			before := lastMemStats(t, h, "tick-end")
			for range guestTicks {
				run(guestRequests / guestTicks / 4)
				tick(h)
			}
			after := lastMemStats(t, h, "tick-end")
			bytes, mallocs, gcs := after.totalAlloc-before.totalAlloc, after.mallocs-before.mallocs, after.numGC-before.numGC
			t.Logf("%s sessions: %d requests: %d bytes in %d allocations, %d GC cycles", typ, guestRequests/4, bytes, mallocs, gcs)
			if bytes != 0 || mallocs != 0 || gcs != 0 {
				t.Errorf("%d requests allocated %d bytes in %d allocations and ran %d GC cycles, want 0", guestRequests/4, bytes, mallocs, gcs)
			}
			flushMetrics(h)
			t.Logf("valid %d issued %d forged %d absent %d", metricValue(h, "hashlb.session_valid"), metricValue(h, "hashlb.session_issued"), metricValue(h, "hashlb.session_forged"), metricValue(h, "hashlb.session_absent"))
			if metricValue(h, "hashlb.session_valid") == 0 || metricValue(h, "hashlb.session_issued") == 0 || metricValue(h, "hashlb.session_forged") == 0 {
				t.Error("the mix did not reach the valid, issued and forged paths")
			}
		})
	}
}

// flipFirst returns v with its first character replaced by another.
func flipFirst(v string) string {
	if v[0] == 'A' {
		return "B" + v[1:]
	}
	return "A" + v[1:]
}
