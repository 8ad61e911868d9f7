package envoy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/internal/envoyrun"
	"github.com/hashlb/hashlb/lbcore"
)

// TestLBPolicySlowStart: a fourth host added to the cluster of a policy
// with slowStart (a 6 s window from a 10 % floor) takes keys only from
// the other three, a growing share of them, and the placement without slow
// start once the window is over. Each worker ramps from the update that
// told it of the host, so two workers may answer a key differently during
// the window; every answer is still the key's old host or the new one.
func TestLBPolicySlowStart(t *testing.T) {
	const window = 6 * time.Second
	eachPolicyEnvoy(t, func(t *testing.T, bin envoyrun.Binary) {
		bs := envoyrun.StartBackends(t, 4)
		c := policyCluster{name: "ramp", config: `{"lbMethod":"URLHASH","slowStart":{"window":"6s","minWeightPercent":10}}`}
		for _, b := range bs[:3] {
			c.eps = append(c.eps, policyEndpoint{b: b})
		}
		e := startPolicy(t, bin, []policyCluster{c})
		const keys = 240
		path := func(k int) string { return fmt.Sprintf("/ramp/%d", k) }
		before := map[string]string{}
		for k := range keys {
			got, status := e.getPath(t, c.name, path(k))
			if status != 200 {
				t.Fatalf("%s: %d", path(k), status)
			}
			before[path(k)] = got
		}
		mark := len(e.Log())
		c.eps = append(c.eps, policyEndpoint{b: bs[3]})
		writePolicyEDS(t, e.Dir, c)
		e.waitHosts(t, c.name, 4, mark)
		added := time.Now() // every thread has the host: each ramp began before this
		final, svcs := policyOracle(t, c)
		want, byAddr := map[string]string{}, map[string]string{}
		for _, b := range bs {
			byAddr[b.Addr] = b.Name
		}
		newShare := 0
		for k := range keys {
			r := lbcore.Request{Target: path(k)}
			d := final.Decide(&r, added)
			want[path(k)] = byAddr[svcs[d.At(0)].Address]
			if want[path(k)] == bs[3].Name {
				newShare++
			}
		}
		// Sweeps of every key until the window is over for every thread;
		// the share of the new host in each, with the sweep's time.
		type sweep struct {
			at    time.Duration
			share int
		}
		var sweeps []sweep
		for {
			start := time.Since(added)
			share := 0
			for k := range keys {
				got, status := e.getPath(t, c.name, path(k))
				if status != 200 {
					t.Fatalf("%s: %d during the ramp", path(k), status)
				}
				switch got {
				case bs[3].Name:
					share++
				case before[path(k)]:
				default:
					t.Fatalf("%s: went to %s during the ramp; it was on %s, and only the new host %s may take it", path(k), got, before[path(k)], bs[3].Name)
				}
			}
			sweeps = append(sweeps, sweep{start, share})
			if start > window+time.Second {
				break
			}
		}
		var seen strings.Builder
		for _, s := range sweeps {
			fmt.Fprintf(&seen, " %.1fs:%d", s.at.Seconds(), s.share)
		}
		t.Logf("Envoy %s: the new host's keys of %d per sweep (seconds since every thread had it: keys):%s; without slow start %d", bin.Version, keys, seen.String(), newShare)
		last := sweeps[len(sweeps)-1]
		if last.share != newShare {
			t.Errorf("after the window the new host has %d keys, lbcore over four hosts gives it %d", last.share, newShare)
		}
		for k := range keys {
			if got, _ := e.getPath(t, c.name, path(k)); got != want[path(k)] {
				t.Fatalf("%s: on %s after the window, lbcore over four hosts: %s", path(k), got, want[path(k)])
			}
		}
		// The ramp itself: a sweep that began in the first half of the
		// window saw the new host with fewer keys than at the end. When the
		// machine was too slow for any sweep to begin there, that is said,
		// not judged.
		early := sweeps[0]
		if early.at >= window/2 {
			t.Logf("the first sweep began %v after the update, past half the window: the ramp's shape is not judged", early.at)
			return
		}
		if early.share >= newShare {
			t.Errorf("%v after the update the new host already had %d keys of its final %d: no ramp", early.at, early.share, newShare)
		}
	})
}
