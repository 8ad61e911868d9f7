package e2e

// Slow start in the module under hostsim: a pod added to a running filter
// ramps on every worker, from the configuration's time, by the virtual
// clock; lbcore is the oracle for the placement once the ramp is over.

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashlb/hashlb/hostsim"
)

// zipfKeys draws Zipf-distributed (s = 1.1) key numbers from [off,
// off+10^6) and returns the distinct ones in order of first appearance:
// the new keys a proxy sees.
func zipfKeys(seed uint64, draws, off int) []int {
	z := rand.NewZipf(rand.New(rand.NewPCG(seed, 11)), 1.1, 1, 1e6)
	seen := map[int]bool{}
	var out []int
	for range draws {
		k := off + int(z.Uint64())
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// TestSlowStartAddedPod: four workers serve three pods with a 60 s slow
// start; a fourth pod is added. At 25 %, 50 % and 100 % of the window its
// share of new keys, over the four workers, is its ramp's (±3 points); no
// key moves between the three old pods at any time, and a key that moved
// to the new pod stays; after the window every key goes where lbcore
// without slow start sends it.
func TestSlowStartAddedPod(t *testing.T) {
	const workers = 4
	slow := map[string]any{"slowStart": map[string]any{"window": "60s"}}
	base := makePods(3)
	next := append(slices.Clone(base), pod{"web-03", "10.1.0.4"})
	before, after := podConfig(t, "URLHASH", base, slow), podConfig(t, "URLHASH", next, slow)
	h := moduleHost(t, hostsim.Config{Workers: workers, PluginConfig: before})
	fixed := zipfKeys(1, 40000, 0)
	was := make([]string, len(fixed))
	for i, k := range fixed {
		was[i] = mustSend(t, h, i%workers, k).service
	}
	if err := h.Configure(after); err != nil {
		t.Fatal(err)
	}
	moved := make([]bool, len(fixed))
	elapsed := time.Duration(0)
	for _, at := range []float64{0, 0.25, 0.5, 0.75, 1} {
		h.Advance(time.Duration(at*float64(time.Minute)) - elapsed)
		elapsed = time.Duration(at * float64(time.Minute))
		for i, k := range fixed {
			got := mustSend(t, h, (i+1)%workers, k).service
			switch {
			case got == "web-03":
				moved[i] = true
			case moved[i]:
				t.Fatalf("at %.0f%% of the window key %d left web-03 for %s", 100*at, k, got)
			case got != was[i]:
				t.Fatalf("at %.0f%% of the window key %d moved from %s to %s", 100*at, k, was[i], got)
			}
		}
		if at != 0.25 && at != 0.5 && at != 1 {
			continue
		}
		fresh := zipfKeys(uint64(100*at)+2, 30000, (int(100*at)+1)*10_000_000)
		n := 0
		for i, k := range fresh {
			if mustSend(t, h, i%workers, k).service == "web-03" {
				n++
			}
		}
		f := max(0.1, at)
		want, share := f/(f+3), float64(n)/float64(len(fresh))
		if math.Abs(share-want) > 0.03 {
			t.Errorf("at %.0f%% of the window web-03 has %.2f%% of %d new keys, want %.2f%% ± 3 points", 100*at, 100*share, len(fresh), 100*want)
		}
	}
	// lbcore's oracle without slowStart: route marks services down and up,
	// which would start a ramp in a Balancer with it.
	o := newOracle(t, podConfig(t, "URLHASH", next, nil))
	for i, k := range fixed {
		if got, want := mustSend(t, h, i%workers, k).service, must(o.route(k)); got != want {
			t.Fatalf("after the window key %d goes to %s, lbcore without slow start %s", k, got, want)
		}
	}
}

// must is the first of two values.
func must[T any](v, _ T) T { return v }

// TestSlowStartBackFromDown: a pod that fails its health checks and
// passes them again ramps from the tick that brings it back; the others
// keep their keys.
func TestSlowStartBackFromDown(t *testing.T) {
	const workers = 2
	extra := map[string]any{
		"slowStart":   map[string]any{"window": "60s"},
		"healthCheck": map[string]any{"interval": "1s", "timeout": "500ms", "healthyThreshold": 1, "unhealthyThreshold": 1},
	}
	config := podConfig(t, "URLHASH", makePods(4), extra)
	backends := newProbeAnswers()
	h := podHost(t, config, workers, backends.handle)
	fixed := zipfKeys(3, 20000, 0)
	for i, k := range fixed { // the workers decide: the proxy has started
		mustSend(t, h, i%workers, k)
	}
	backends.set(true, "10.1.0.4:8080")
	h.Advance(3 * time.Second)
	was := make([]string, len(fixed))
	for i, k := range fixed {
		if was[i] = mustSend(t, h, i%workers, k).service; was[i] == "web-03" {
			t.Fatalf("key %d went to web-03, DOWN", k)
		}
	}
	backends.set(false, "10.1.0.4:8080")
	// The probe round that passes and the tick that reads its verdict:
	// the ramp starts within a few seconds of here.
	h.Advance(2 * time.Second)
	h.Advance(time.Second)
	for _, at := range []float64{0.25, 0.5} {
		h.Advance(15 * time.Second)
		n := 0
		for i, k := range fixed {
			got := mustSend(t, h, i%workers, k).service
			switch {
			case got == "web-03":
				n++
			case got != was[i]:
				t.Fatalf("at about %.0f%% of the window key %d moved from %s to %s", 100*at, k, was[i], got)
			}
		}
		// The ramp started up to 3 s (5 % of the window) before the
		// nominal point: the share is between the two.
		lo, hi := at/(at+3), (at+0.05)/(at+0.05+3)
		if share := float64(n) / float64(len(fixed)); share < lo-0.03 || share > hi+0.03 {
			t.Errorf("at about %.0f%% of the window web-03 has %.2f%% of the keys, want %.2f–%.2f%% ± 3 points", 100*at, 100*share, 100*lo, 100*hi)
		}
	}
}

// TestSlowStartTCP: the network filter ramps a service a new
// configuration adds (weights 1, 1, 2, 1, 1 and the new one's 1): its
// share of new connections' tuples at 50 % and 100 % of the window follows
// the ramp, and no tuple moves between the old services.
func TestSlowStartTCP(t *testing.T) {
	const workers = 2
	slow := `"slowStart":{"window":"60s"}`
	before := tcpConfig("SRCIPSRCPORTHASH", slow)
	after := []byte(strings.Replace(string(before), `"hashId":"e-cache"}`, `"hashId":"e-cache"},{"name":"f","address":"10.1.0.6:443"}`, 1))
	h := newTCPHost(t, before, workers, hostsim.ProfileEnvoy139, nil)
	tuples, was := connectRandom(t, h, workers, 9, 12000)
	if err := h.Configure(after); err != nil {
		t.Fatal(err)
	}
	for _, at := range []float64{0.5, 1} {
		h.Advance(30 * time.Second)
		n := 0
		for i, tp := range tuples {
			switch got := connect(t, h, (i+1)%workers, tp); {
			case got == "10.1.0.6:443":
				n++
			case got != was[i]:
				t.Fatalf("at %.0f%% of the window tuple %v moved from %s to %s", 100*at, tp, was[i], got)
			}
		}
		want, share := at/(at+6), float64(n)/float64(len(tuples))
		if math.Abs(share-want) > 0.03 {
			t.Errorf("at %.0f%% of the window f has %.2f%% of the tuples, want %.2f%% ± 3 points", 100*at, 100*share, 100*want)
		}
	}
}
