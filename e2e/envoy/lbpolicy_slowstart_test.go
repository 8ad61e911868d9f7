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
// the other three, in every sweep of the keys the share lbcore's ramp gives
// it at that time (± 3 points), and the placement without slow start once
// the window is over. Each worker ramps from the update that
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
		written := time.Now() // no thread's ramp began before this
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
		// onNew is how many keys lbcore gives the new host when its ramp
		// has run for elapsed.
		onNew := func(elapsed time.Duration) int {
			o, svcs := policyOracle(t, c)
			o.Ramp(3, added)
			n := 0
			for k := range keys {
				r := lbcore.Request{Target: path(k)}
				if d := o.Decide(&r, added.Add(elapsed)); byAddr[svcs[d.At(0)].Address] == bs[3].Name {
					n++
				}
			}
			return n
		}
		// Sweeps of every key until the window is over for every thread;
		// the share of the new host in each, with the sweep's time. A
		// worker's ramp begins at its first choice after the update, so
		// between the write and the first sweep: a sweep from Ts to Te
		// sees the ramp run for between Ts - first and Te - written, and
		// the share lbcore gives the new host for those bounds, ± 3 points,
		// is what the sweep must find.
		type sweep struct {
			at    time.Duration
			share int
		}
		var sweeps []sweep
		var first time.Time
		const slack = keys * 3 / 100
		for {
			if first.IsZero() {
				first = time.Now()
			}
			ts := time.Now()
			start := ts.Sub(added)
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
			te := time.Now()
			sweeps = append(sweeps, sweep{start, share})
			if lo, hi := onNew(ts.Sub(first)), onNew(te.Sub(written)); share < lo-slack || share > hi+slack {
				t.Errorf("%v after the update (a %v sweep) the new host had %d keys of %d; its ramp gives it %d to %d (± %d)",
					start.Round(time.Millisecond), te.Sub(ts).Round(time.Millisecond), share, keys, lo, hi, slack)
			}
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
	})
}
