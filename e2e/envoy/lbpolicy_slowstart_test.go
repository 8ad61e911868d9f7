package envoy

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestLBPolicySlowStart: a fourth host added to the cluster of a policy
// with slowStart (-slowstart.window, from a 10 % floor) takes keys only
// from the other three, in every sweep of the keys the share lbcore's ramp
// gives it at that time (± 3 points), and the placement without slow start
// once the window is over (rampWatch, slowstart_test.go). Each worker
// ramps from the update that told it of the host, so two workers may
// answer a key differently during the window; every answer is still the
// key's old host or the new one.
func TestLBPolicySlowStart(t *testing.T) {
	window, slow := rampWindow(t)
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 4)
		c := policyCluster{name: "ramp", config: `{"lbMethod":"URLHASH",` + slow + `}`}
		for _, b := range bs[:3] {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		const keys = 240
		var paths []string
		for k := range keys {
			paths = append(paths, fmt.Sprintf("/ramp/%d", k))
		}
		get := func(path string) string {
			got, status := e.getPath(t, c.name, path)
			if status != 200 {
				t.Fatalf("%s: %d", path, status)
			}
			return got
		}
		before := map[string]string{}
		for _, p := range paths {
			before[p] = get(p)
		}
		mark := len(e.Log())
		c.eps = append(c.eps, policyEndpoint{b: bs[3]})
		written := time.Now() // no thread's ramp began before this
		writePolicyEDS(t, e.Dir, c)
		e.waitHosts(t, c.name, 4, mark)
		added := time.Now()
		final, svcs := policyOracle(t, c)
		want, byAddr := map[string]string{}, map[string]string{}
		for _, b := range bs {
			byAddr[b.Addr] = b.Name
		}
		for _, p := range paths {
			r := lbcore.Request{Target: p}
			d := final.Decide(&r, added)
			want[p] = byAddr[svcs[d.At(0)].Address]
		}
		// onNew is how many keys lbcore gives the new host when its ramp
		// has run for elapsed.
		onNew := func(elapsed time.Duration) int {
			o, svcs := policyOracle(t, c)
			o.Ramp(3, added)
			n := 0
			for _, p := range paths {
				r := lbcore.Request{Target: p}
				if d := o.Decide(&r, added.Add(elapsed)); byAddr[svcs[d.At(0)].Address] == bs[3].Name {
					n++
				}
			}
			return n
		}
		// A worker's ramp begins at its first choice after the update, so
		// between the write and the first sweep: a sweep from ts to te
		// sees the ramp run for between ts - first and te - written.
		var first time.Time
		bounds := func(ts, te time.Time) (time.Duration, time.Duration) {
			if first.IsZero() {
				first = ts
			}
			return ts.Sub(first), te.Sub(written)
		}
		rampWatch{what: "Envoy " + bin.Version + ": a fourth host added", keys: paths, get: get, before: before, final: want,
			name: bs[3].Name, window: window, onNew: onNew, bounds: bounds}.watch(t)
	})
}
