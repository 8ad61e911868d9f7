package lbcore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// ssPool is a URLHASH configuration over services s0..s(n-1) with weights
// (1 each when weights is nil) and extra top-level fields.
func ssPool(n int, weights []int, extra string) string {
	if extra != "" {
		extra += ","
	}
	return urlPool(n, weights, extra, nil)
}

const ssWindow = `"slowStart":{"window":"60s"}`

// zipfKeys returns the distinct URLs of draws Zipf-distributed requests
// (s = 1.1 over 10^6 ranks), in order of first appearance: the new keys a
// proxy sees. tag keeps the key sets of two calls apart.
func zipfKeys(seed uint64, draws int, tag string) []string {
	r := rand.New(rand.NewPCG(seed, 7))
	z := rand.NewZipf(r, 1.1, 1, 1e6)
	seen := map[uint64]bool{}
	var out []string
	for range draws {
		k := z.Uint64()
		if !seen[k] {
			seen[k] = true
			out = append(out, fmt.Sprintf("/%s/item/%d", tag, k))
		}
	}
	return out
}

// placement is the service each URL is decided to at now.
func placement(b *Balancer, urls []string, now time.Time) []int {
	out := make([]int, len(urls))
	for i, u := range urls {
		d := b.Decide(&Request{Target: u}, now)
		out[i] = -1
		if d.Len() > 0 {
			out[i] = d.At(0)
		}
	}
	return out
}

// startedBalancer is a Balancer for js that has decided once.
func startedBalancer(t testing.TB, js string) *Balancer {
	b := NewBalancer(mustConfig(t, js), 1)
	b.Decide(&Request{Target: "/"}, epoch)
	return b
}

// rampShare is the share of keys a service ranking with fraction f of a
// weight w takes among others of total weight rest.
func rampShare(f, w, rest float64) float64 { return f * w / (f*w + rest) }

// checkShare fails unless service svc's share of urls' placement is within
// 3 percentage points of want.
func checkShare(t *testing.T, what string, got []int, svc int, want float64) {
	t.Helper()
	n := 0
	for _, s := range got {
		if s == svc {
			n++
		}
	}
	share := float64(n) / float64(len(got))
	if math.Abs(share-want) > 0.03 {
		t.Errorf("%s: service %d has %.2f%% of %d new keys, want %.2f%% ± 3 points", what, svc, 100*share, len(got), 100*want)
	}
}

// TestSlowStartAddedService: a fourth service added with a 60 s window
// takes its ramp's share of new keys at 25 %, 50 % and 100 % of the window;
// no key moves between the three old services at any time, a key that moved
// to the new service stays there, and at the end the placement is the one
// without slow start.
func TestSlowStartAddedService(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights []int // of the four services
		extra   string
	}{
		{"unit weights", nil, ssWindow},
		{"weights 1,2,3 and 2", []int{1, 2, 3, 2}, ssWindow},
		{"upstreamCount 3", nil, ssWindow + `,"upstreamCount":3`},
		{"bounded load", nil, ssWindow + `,"hashBalanceFactor":150`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w3 []int
			if tc.weights != nil {
				w3 = tc.weights[:3]
			}
			old := startedBalancer(t, ssPool(3, w3, tc.extra))
			cfg := mustConfig(t, ssPool(4, tc.weights, tc.extra))
			b := NewBalancer(cfg, 2)
			c := old.Carry(cfg.Services)
			b.Continue(old, &c)
			if _, _, ok := b.Ramping(3); !ok {
				t.Fatal("the added service is not ramping")
			}
			keys := zipfKeys(1, 100000, "fixed")
			before := placement(old, keys, epoch)
			wNew, rest := 1.0, 3.0
			if tc.weights != nil {
				wNew, rest = 2, 6
			}
			moved := make([]bool, len(keys))
			start := epoch.Add(time.Second)
			b.SetTime(start) // the ramp starts here
			for _, at := range []float64{0, 0.1, 0.25, 0.4, 0.5, 0.75, 0.99, 1, 1.5} {
				now := start.Add(time.Duration(at * float64(time.Minute)))
				got := placement(b, keys, now)
				for i := range keys {
					switch {
					case got[i] == 3:
						moved[i] = true
					case moved[i]:
						t.Fatalf("at %.0f%% of the window key %s left the new service for s%d", 100*at, keys[i], got[i])
					case got[i] != before[i]:
						t.Fatalf("at %.0f%% of the window key %s moved from s%d to s%d", 100*at, keys[i], before[i], got[i])
					}
				}
				if at == 0.25 || at == 0.5 || at == 1 {
					fresh := zipfKeys(uint64(100*at)+2, 60000, fmt.Sprint("new", at))
					want := rampShare(max(0.1, min(at, 1)), wNew, rest)
					checkShare(t, fmt.Sprintf("at %.0f%% of the window", 100*at), placement(b, fresh, now), 3, want)
				}
			}
			// At the end: the placement without slow start, and the fast
			// paths back.
			if _, _, ok := b.Ramping(3); ok {
				t.Fatal("still ramping after the window")
			}
			plain := NewBalancer(cfg, 3)
			end := start.Add(2 * time.Minute)
			got, want := placement(b, keys, end), placement(plain, keys, end)
			for i := range keys {
				if got[i] != want[i] {
					t.Fatalf("after the ramp key %s is on s%d, without slow start s%d", keys[i], got[i], want[i])
				}
			}
			if b.unitPass != b.baseUnit || b.cache != b.baseCache {
				t.Error("the unit-weight pass or the rank cache did not come back after the ramp")
			}
		})
	}
}

// TestSlowStartLargePool: with 200 services the rank cache decides; a
// service added ramps around it (no key moves between the others, the
// cached rankings are not polluted) and at the end decisions, cache and
// all, are those of a Balancer without slow start.
func TestSlowStartLargePool(t *testing.T) {
	const n = 200
	old := startedBalancer(t, ssPool(n, nil, ssWindow+`,"upstreamCount":2`))
	cfg := mustConfig(t, ssPool(n+1, nil, ssWindow+`,"upstreamCount":2`))
	b := NewBalancer(cfg, 2)
	if b.cache == nil {
		t.Fatal("no rank cache for 201 services: the test needs one")
	}
	keys := zipfKeys(3, 20000, "large")
	placement(b, keys, epoch) // fill the cache before the ramp
	c := old.Carry(cfg.Services)
	b.Continue(old, &c)
	before := placement(old, keys, epoch)
	for _, at := range []time.Duration{0, 30 * time.Second, 59 * time.Second} {
		got := placement(b, keys, epoch.Add(at))
		for i := range keys {
			if got[i] != n && got[i] != before[i] {
				t.Fatalf("at %v key %s moved from s%d to s%d", at, keys[i], before[i], got[i])
			}
		}
	}
	plain := NewBalancer(cfg, 3)
	end := epoch.Add(61 * time.Second)
	for _, k := range keys {
		r := &Request{Target: k}
		got, want := b.Decide(r, end), plain.Decide(r, end)
		if fmt.Sprint(names(cfg, got)) != fmt.Sprint(names(cfg, want)) {
			t.Fatalf("after the ramp %s goes to %v, without slow start %v", k, names(cfg, got), names(cfg, want))
		}
	}
}

// TestSlowStartBackFromDown: a service that comes back from DOWN ramps
// the same way, and only it gains keys.
func TestSlowStartBackFromDown(t *testing.T) {
	b := startedBalancer(t, ssPool(4, nil, ssWindow))
	keys := zipfKeys(4, 60000, "down")
	up := placement(b, keys, epoch)
	b.SetDown(3, true)
	if _, _, ok := b.Ramping(3); ok {
		t.Fatal("a DOWN service ramps")
	}
	down := placement(b, keys, epoch)
	b.SetDown(3, false)
	start := epoch.Add(10 * time.Second)
	b.SetTime(start) // the ramp starts here
	for _, at := range []float64{0.25, 0.5, 1} {
		now := start.Add(time.Duration(at * float64(time.Minute)))
		got := placement(b, keys, now)
		for i := range keys {
			if got[i] != 3 && got[i] != down[i] {
				t.Fatalf("at %.0f%% key %s moved from s%d to s%d", 100*at, keys[i], down[i], got[i])
			}
		}
		checkShare(t, fmt.Sprintf("at %.0f%% of the window", 100*at), got, 3, rampShare(at, 1, 3))
	}
	if got := placement(b, keys, start.Add(time.Hour)); fmt.Sprint(got) != fmt.Sprint(up) {
		t.Error("after the ramp the placement is not the one before the service went DOWN")
	}
}

// TestSlowStartWeightZeroRaised: a service at weight 0 raised to 10 by a
// new configuration ramps to its weight.
func TestSlowStartWeightZeroRaised(t *testing.T) {
	old := startedBalancer(t, ssPool(4, []int{10, 10, 10, 0}, ssWindow))
	cfg := mustConfig(t, ssPool(4, []int{10, 10, 10, 10}, ssWindow))
	b := NewBalancer(cfg, 2)
	c := old.Carry(cfg.Services)
	b.Continue(old, &c)
	keys := zipfKeys(5, 60000, "zero")
	before := placement(old, keys, epoch)
	b.SetTime(epoch)
	for _, at := range []float64{0.25, 0.5, 1} {
		got := placement(b, keys, epoch.Add(time.Duration(at*float64(time.Minute))))
		for i := range keys {
			if got[i] != 3 && got[i] != before[i] {
				t.Fatalf("at %.0f%% key %s moved from s%d to s%d", 100*at, keys[i], before[i], got[i])
			}
		}
		checkShare(t, fmt.Sprintf("at %.0f%% of the window", 100*at), got, 3, rampShare(at, 10, 30))
	}
}

// TestSlowStartWhatRamps: what starts a ramp and what does not.
func TestSlowStartWhatRamps(t *testing.T) {
	ramping := func(b *Balancer, i int) bool { _, _, ok := b.Ramping(i); return ok }
	t.Run("not at start", func(t *testing.T) {
		b := NewBalancer(mustConfig(t, ssPool(4, nil, ssWindow)), 1)
		b.SetDown(3, true)
		b.SetDown(3, false) // the host's first view of health
		if ramping(b, 3) {
			t.Error("a service ramps before the proxy decided anything")
		}
		b.Decide(&Request{Target: "/"}, epoch)
		b.SetDown(3, true)
		b.SetDown(3, false)
		if !ramping(b, 3) {
			t.Error("a service back from DOWN does not ramp")
		}
	})
	t.Run("not after a start that never decided", func(t *testing.T) {
		old := NewBalancer(mustConfig(t, ssPool(3, nil, ssWindow)), 1)
		cfg := mustConfig(t, ssPool(4, nil, ssWindow))
		b := NewBalancer(cfg, 1)
		c := old.Carry(cfg.Services)
		b.Continue(old, &c)
		if ramping(b, 3) {
			t.Error("a service added before any decision ramps")
		}
	})
	t.Run("enabled again", func(t *testing.T) {
		old := startedBalancer(t, strings.Replace(ssPool(4, nil, ssWindow), `"weight":1}]`, `"weight":1,"enabled":false}]`, 1))
		cfg := mustConfig(t, ssPool(4, nil, ssWindow))
		b := NewBalancer(cfg, 1)
		c := old.Carry(cfg.Services)
		b.Continue(old, &c)
		if !ramping(b, 3) || ramping(b, 0) {
			t.Error("want the enabled service alone to ramp")
		}
	})
	t.Run("a ramp goes on in the next configuration", func(t *testing.T) {
		old := startedBalancer(t, ssPool(3, nil, ssWindow))
		cfg := mustConfig(t, ssPool(4, nil, ssWindow))
		b := NewBalancer(cfg, 1)
		c := old.Carry(cfg.Services)
		b.Continue(old, &c)
		b.SetTime(epoch)
		cfg2 := mustConfig(t, ssPool(5, nil, ssWindow))
		b2 := NewBalancer(cfg2, 1)
		c2 := b.Carry(cfg2.Services)
		b2.Continue(b, &c2)
		f, since, ok := b2.Ramping(3)
		if !ok || !since.Equal(epoch) || f != 0.1 {
			t.Errorf("s3 in the next configuration: ramping %v since %v at %v, want since %v at 0.1", ok, since, f, epoch)
		}
		if !ramping(b2, 4) {
			t.Error("s4, added by the next configuration, does not ramp")
		}
	})
	t.Run("DOWN ends a ramp", func(t *testing.T) {
		b := startedBalancer(t, ssPool(4, nil, ssWindow))
		b.SetDown(3, true)
		b.SetDown(3, false)
		b.SetDown(3, true)
		if ramping(b, 3) || len(b.ramps) != 0 || b.cache != b.baseCache || b.unitPass != b.baseUnit {
			t.Error("a service that went DOWN still ramps")
		}
	})
	t.Run("minWeightPercent 100", func(t *testing.T) {
		b := startedBalancer(t, ssPool(4, nil, `"slowStart":{"window":"60s","minWeightPercent":100}`))
		b.SetDown(3, true)
		b.SetDown(3, false)
		if ramping(b, 3) {
			t.Error("minWeightPercent 100 ramps")
		}
	})
	t.Run("without slowStart", func(t *testing.T) {
		b := startedBalancer(t, ssPool(4, nil, ""))
		b.SetDown(3, true)
		b.SetDown(3, false)
		if ramping(b, 3) {
			t.Error("a service ramps without slowStart")
		}
	})
}

// TestSlowStartFraction: the ramp's shapes, linear from the floor and in
// NetScaler's steps (10 PERCENT every 5 s: window 50s, step 5s).
func TestSlowStartFraction(t *testing.T) {
	lin := &SlowStart{Window: time.Minute, MinWeightPercent: 10}
	steps := &SlowStart{Window: 50 * time.Second, MinWeightPercent: 10, Step: 5 * time.Second}
	for _, c := range []struct {
		s    *SlowStart
		at   time.Duration
		want float64
	}{
		{lin, -time.Second, 0.1}, {lin, 0, 0.1}, {lin, 3 * time.Second, 0.1}, {lin, 15 * time.Second, 0.25},
		{lin, 30 * time.Second, 0.5}, {lin, time.Minute, 1}, {lin, time.Hour, 1},
		{steps, 0, 0.1}, {steps, 4999 * time.Millisecond, 0.1}, {steps, 5 * time.Second, 0.2},
		{steps, 12 * time.Second, 0.3}, {steps, 44 * time.Second, 0.9}, {steps, 45 * time.Second, 1},
	} {
		if got := c.s.Fraction(c.at); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v at %v: %v, want %v", *c.s, c.at, got, c.want)
		}
	}
	for _, s := range []*SlowStart{lin, steps, {Window: 13334 * time.Millisecond, MinWeightPercent: 30, Step: 4 * time.Second}} {
		if l := s.Length(); s.Fraction(l) != 1 || s.Fraction(l-time.Millisecond) == 1 {
			t.Errorf("%+v: Length %v is not where the fraction reaches 1", *s, l)
		}
	}
}

// TestSlowStartConfig: the cross-field check.
func TestSlowStartConfig(t *testing.T) {
	_, err := ParseConfig([]byte(ssPool(2, nil, `"slowStart":{"window":"10s","step":"20s"}`)))
	if err == nil || err.Error() != `slowStart.step: "20s" is longer than window "10s"` {
		t.Errorf("step over window: %v", err)
	}
}
